//go:build !linux && !darwin

package workspace

import "context"

// On other hosts a catalog can only be empty (NewCatalog refuses entries),
// so nothing below is ever reached with a real entry; every path refuses.

type root struct{ fd int }

type namespace struct{}

type running struct{}

func rootIdentity(string) (uint64, uint64, error) { return 0, 0, ErrUnsupportedHost }
func openRoot(*entry) (*root, error)              { return nil, ErrUnsupportedHost }
func (r *root) close()                            {}
func (r *root) check(string) error                { return ErrUnsupportedHost }
func (r *root) makeNamespace(string) (*namespace, error) {
	return nil, ErrUnsupportedHost
}
func (r *root) readFile(string, string, []string, int64) ([]byte, bool, error) {
	return nil, false, ErrUnsupportedHost
}
func (r *root) list(string, string, []string, int) ([]DirEntry, bool, error) {
	return nil, false, ErrUnsupportedHost
}
func (r *root) writeFile(string, string, []string, []byte, bool) error { return ErrUnsupportedHost }
func (r *root) remove(string, string, []string) error                  { return ErrUnsupportedHost }
func (n *namespace) write(string, []byte) error                        { return ErrUnsupportedHost }
func (n *namespace) read(string, int64) ([]byte, error)                { return nil, ErrUnsupportedHost }
func (n *namespace) cleanup() (CleanupReport, error)                   { return CleanupReport{}, nil }
func (r *running) cancel()                                             {}

// Run refuses: workspaces run on linux and darwin only.
func (s *Session) Run(context.Context, string, map[string]string) (*Result, error) {
	return nil, ErrUnsupportedHost
}
