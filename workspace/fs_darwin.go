package workspace

import "golang.org/x/sys/unix"

// resolve opens parts beneath the root with flags. macOS has no openat2:
// the component walk (O_NOFOLLOW on every component, device checked at
// every step) is the resolver.
func (r *root) resolve(op string, parts []string, flags int, mode uint32) (int, error) {
	return r.walk(op, parts, flags, mode)
}

// mountID is 0 on macOS: the device check is the mount check.
func mountID(int) (uint64, error) { return 0, nil }

func renameNoReplace(dir int, from, to string) error {
	return unix.RenameatxNp(dir, from, dir, to, unix.RENAME_EXCL)
}
