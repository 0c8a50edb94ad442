package workspace

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Artifact names a request-owned file in the request namespace. Only these
// exist; a name is never taken from a request.
type Artifact int

// Artifacts.
const (
	ArtifactPlan   Artifact = iota + 1 // plan.md
	ArtifactReview                     // review.md
)

func (a Artifact) file() (string, bool) {
	switch a {
	case ArtifactPlan:
		return "plan.md", true
	case ArtifactReview:
		return "review.md", true
	}
	return "", false
}

// DirEntry is one listed entry.
type DirEntry struct {
	Name string
	// Type is "file", "dir", "symlink" or "other".
	Type string
	// Size is a regular file's size.
	Size int64
}

// Session is one request's use of one workspace under a frozen authority.
// It owns the request namespace .iop/job/<request id>/ (created 0700 at
// Open) and the request's commands; Cleanup ends it.
type Session struct {
	e         *entry
	auth      Authority
	requestID string
	r         *root
	ns        *namespace

	mu      sync.Mutex
	closed  bool
	running map[*running]struct{}
	wg      sync.WaitGroup // operations and commands in progress

	cleanupOnce sync.Once
	report      CleanupReport
	cleanupErr  error
}

// Open starts a session on ref for a request: the authority must be
// within the catalog's entry (Check), the root must still be the
// directory the catalog validated, and the request gets its namespace.
func (c *Catalog) Open(ref string, a Authority, requestID string) (*Session, error) {
	if err := c.Check(ref, a); err != nil {
		return nil, err
	}
	if !validName(requestID) {
		return nil, fail(CodeInvalidPath, "open", "", errors.New("request id must be 1 to 64 of [A-Za-z0-9._-]"))
	}
	e := c.entries[ref]
	r, err := openRoot(e)
	if err != nil {
		return nil, err
	}
	ns, err := r.makeNamespace(requestID)
	if err != nil {
		r.close()
		return nil, err
	}
	frozen := Authority{Ops: slices.Clone(a.Ops), Commands: slices.Clone(a.Commands), Limits: a.Limits}
	return &Session{e: e, auth: frozen, requestID: requestID, r: r, ns: ns, running: map[*running]struct{}{}}, nil
}

// Authority returns the session's frozen authority.
func (s *Session) Authority() Authority { return s.auth }

// begin checks that the session is open, op is granted and the root is
// still in place, and holds the session open until end is called:
// Cleanup waits for every operation in progress before it closes the
// root's descriptor (whose number could otherwise be reused under a
// running operation).
func (s *Session) begin(op Op) (end func(), err error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fail(CodeClosed, string(op), "", nil)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	if !slices.Contains(s.auth.Ops, op) {
		s.wg.Done()
		return nil, fail(CodeDenied, string(op), "", nil)
	}
	if err := s.r.check(string(op)); err != nil {
		s.wg.Done()
		return nil, err
	}
	return s.wg.Done, nil
}

// Read returns at most the read limit of a regular, singly linked file,
// and whether it was cut.
func (s *Session) Read(path string) ([]byte, bool, error) {
	end, err := s.begin(OpRead)
	if err != nil {
		return nil, false, err
	}
	defer end()
	parts, err := splitPath("read", path)
	if err != nil {
		return nil, false, err
	}
	if len(parts) == 0 {
		return nil, false, fail(CodeNotRegular, "read", path, nil)
	}
	return s.r.readFile("read", path, parts, s.auth.Limits.ReadBytes)
}

// List returns a directory's entries sorted by name, at most the list
// limit, and whether more were cut. Reserved names never appear, nor do
// names that are not UTF-8 (no path can name them). "." lists the root.
func (s *Session) List(path string) ([]DirEntry, bool, error) {
	end, err := s.begin(OpList)
	if err != nil {
		return nil, false, err
	}
	defer end()
	parts, err := splitPath("list", path)
	if err != nil {
		return nil, false, err
	}
	return s.r.list("list", path, parts, s.auth.Limits.ListEntries)
}

// Write replaces (or, createOnly, creates) a regular file atomically.
func (s *Session) Write(path string, data []byte, createOnly bool) error {
	end, err := s.begin(OpWrite)
	if err != nil {
		return err
	}
	defer end()
	parts, err := splitPath("write", path)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return fail(CodeNotRegular, "write", path, nil)
	}
	if int64(len(data)) > s.auth.Limits.WriteBytes {
		return fail(CodeTooLarge, "write", path, fmt.Errorf("%d bytes above %d", len(data), s.auth.Limits.WriteBytes))
	}
	return s.r.writeFile("write", path, parts, data, createOnly)
}

// Delete removes a regular file or an empty directory, never recursively.
func (s *Session) Delete(path string) error {
	end, err := s.begin(OpDelete)
	if err != nil {
		return err
	}
	defer end()
	parts, err := splitPath("delete", path)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return fail(CodeNotRegular, "delete", path, nil)
	}
	return s.r.remove("delete", path, parts)
}

// WriteArtifact stores a request artifact in the namespace (inventoried).
func (s *Session) WriteArtifact(a Artifact, data []byte) error {
	name, ok := a.file()
	if !ok {
		return fail(CodeDenied, "artifact", "", errors.New("unknown artifact"))
	}
	end, err := s.open("artifact")
	if err != nil {
		return err
	}
	defer end()
	if int64(len(data)) > s.auth.Limits.WriteBytes {
		return fail(CodeTooLarge, "artifact", name, nil)
	}
	return s.ns.write(name, data)
}

// ReadArtifact reads a request artifact back; one that was swapped for
// another file is refused.
func (s *Session) ReadArtifact(a Artifact) ([]byte, error) {
	name, ok := a.file()
	if !ok {
		return nil, fail(CodeDenied, "artifact", "", errors.New("unknown artifact"))
	}
	end, err := s.open("artifact")
	if err != nil {
		return nil, err
	}
	defer end()
	return s.ns.read(name, s.auth.Limits.ReadBytes)
}

func (s *Session) open(op string) (end func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fail(CodeClosed, op, "", nil)
	}
	s.wg.Add(1)
	return s.wg.Done, nil
}

// CleanupReport says what cleanup removed and what it left in place.
type CleanupReport struct {
	// Removed are namespace entries removed (relative to the root).
	Removed []string
	// Left are entries that were not removed: unknown to the inventory,
	// or no longer the inventoried file.
	Left []string
}

// Cleanup ends the session: it cancels the request's commands and waits
// for their process groups, then removes only inventoried namespace
// entries, deepest first, each after an identity check. Anything else is
// left and reported; files outside the namespace are never touched.
// Concurrent and repeated calls share one result.
func (s *Session) Cleanup() (CleanupReport, error) {
	s.cleanupOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		for r := range s.running {
			r.cancel()
		}
		s.mu.Unlock()
		s.wg.Wait()
		s.report, s.cleanupErr = s.ns.cleanup()
		s.r.close()
	})
	return s.report, s.cleanupErr
}

// namespacePath is a namespace entry's path relative to the root.
func namespacePath(requestID, name string) string {
	return strings.Join([]string{".iop", "job", requestID, name}, "/")
}
