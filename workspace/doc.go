// Package workspace is the Node-side workspace executor: bounded,
// traversal-safe file operations beneath an operator-approved root that
// never follow a link or cross a mount, operator-defined command templates
// run without a shell in their own process group, and a request-owned
// namespace under .iop with inventoried cleanup.
//
// A [Catalog] holds the Node's entries (node.yaml): an opaque ref, the
// root, the platform, the operations and command templates it may ever
// allow, the environment names passed to commands, and limits. The Edge
// grants a request an [Authority] (a subset, limits lower or equal);
// [Catalog.Open] checks it and starts a [Session] for the request.
//
// Paths are request text, checked before any system call: relative, no
// empty, "." or ".." component, no NUL, no trailing slash, bounded length
// and depth, and ".iop" (any letter case) and temporary names reserved.
// Resolution on Linux is one openat2 call with RESOLVE_BENEATH,
// RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV and RESOLVE_NO_MAGICLINKS; where
// openat2 is unavailable (ENOSYS, EPERM), and always on macOS, a
// component-by-component O_NOFOLLOW walk that checks the device (and on
// Linux the mount id) at every step. Files must be regular with one link.
// Writes go through a temporary file in the same directory, fsync and
// rename; deletes are never recursive. os.Root alone is not used: it
// follows links inside the root, crosses mounts and reads hard links.
//
// Commands: a template id maps to a fixed argv whose "{name}" arguments
// take typed values (path, word, int; never starting with "-"); stdin is
// /dev/null; the environment is the allow-list plus a fixed PATH, HOME and
// TMPDIR; inherited descriptors are sealed so only 0-2 reach the child;
// the working directory is the already-opened root (Linux:
// /proc/self/fd/N; macOS: a re-exec trampoline that fchdirs); the command
// runs in its own process group, killed whole on timeout, cancel and
// cleanup; stdout and stderr share one output cap. Commands run as the
// Node's user: the working directory confines nothing by itself.
//
// It must never touch anything outside the root, never expose .iop to a
// request's tools, never pass the ambient environment to a command, and
// never remove a user's results during cleanup. Workspaces run on linux
// and darwin; elsewhere only an empty catalog is accepted.
package workspace
