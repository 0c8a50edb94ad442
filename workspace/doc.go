// Package workspace will hold the Node-side workspace executor: bounded,
// traversal-safe file operations beneath an operator-approved root that
// never follow a link or cross a mount, operator-defined command templates
// run without a shell in their own process group, and a request-owned
// namespace under .iop with inventoried cleanup.
//
// It must never touch anything outside the root, never expose .iop to a
// request's tools, never pass the ambient environment to a command, and
// never remove a user's results during cleanup. It is filled in by step
// [S9].
package workspace
