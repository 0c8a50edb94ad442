package workspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Op is an operation a workspace may allow.
type Op string

// Operations.
const (
	OpRead    Op = "read"
	OpList    Op = "list"
	OpWrite   Op = "write"
	OpDelete  Op = "delete"
	OpCommand Op = "command"
)

var allOps = []Op{OpRead, OpList, OpWrite, OpDelete, OpCommand}

// Limits bound one request's use of a workspace. Every field must be set.
type Limits struct {
	ReadBytes      int64         // one read
	ListEntries    int           // one list
	WriteBytes     int64         // one write
	CommandTimeout time.Duration // one command
	OutputBytes    int64         // one command's stdout and stderr together
}

// Ceilings no configured limit may exceed.
var maxLimits = Limits{ReadBytes: 64 << 20, ListEntries: 100_000, WriteBytes: 64 << 20, CommandTimeout: time.Hour, OutputBytes: 16 << 20}

// Validate reports a limit that is unset, negative, or above its ceiling
// (64 MiB for each byte limit but OutputBytes, 16 MiB; 100,000 list
// entries; an hour for a command). A catalog refuses such an entry, and a
// Node such an authority, so an Edge checks its grants with it too.
func (l Limits) Validate() error {
	switch {
	case l.ReadBytes <= 0 || l.ListEntries <= 0 || l.WriteBytes <= 0 || l.CommandTimeout <= 0 || l.OutputBytes <= 0:
		return errors.New("every limit must be set and positive")
	case !l.within(maxLimits):
		return fmt.Errorf("a limit is above its ceiling %+v", maxLimits)
	}
	return nil
}

// within reports whether every limit of l is at most the one in max.
func (l Limits) within(max Limits) bool {
	return l.ReadBytes <= max.ReadBytes && l.ListEntries <= max.ListEntries && l.WriteBytes <= max.WriteBytes &&
		l.CommandTimeout <= max.CommandTimeout && l.OutputBytes <= max.OutputBytes
}

// ArgKind types a command template placeholder.
type ArgKind string

// Placeholder kinds. A value never starts with "-", so it cannot become an
// option of the command.
const (
	// ArgPath is a workspace path under the path rules (relative, beneath
	// the root, no reserved component).
	ArgPath ArgKind = "path"
	// ArgWord is 1 to 64 of [A-Za-z0-9._-], and not "." or ".." (a
	// word is no path: a command reading one as a path must not reach
	// the root's parent through it).
	ArgWord ArgKind = "word"
	// ArgInt is a decimal integer of at most 18 digits.
	ArgInt ArgKind = "int"
)

// Template is an operator-approved command: a fixed argv whose arguments
// of the form "{name}" are replaced, whole, by typed values.
type Template struct {
	ID string
	// Argv[0] is an absolute path to an executable outside the root.
	Argv []string
	// Args types each placeholder that appears in Argv.
	Args map[string]ArgKind
}

// Entry is one workspace a Node offers (node.yaml).
type Entry struct {
	// Ref is the opaque name the Edge uses.
	Ref string
	// Root is the absolute directory the workspace is confined to.
	Root string
	// Platform is "linux" or "darwin" and must be the host's.
	Platform string
	// Ops are the operations it may ever allow.
	Ops      []Op
	Commands []Template
	// Env names the environment variables passed through to commands
	// (besides the fixed PATH, HOME and TMPDIR).
	Env    []string
	Limits Limits
}

// Authority is what the Edge grants one request: a subset of an entry's
// operations and commands, with limits lower or equal.
type Authority struct {
	Ops      []Op
	Commands []string
	Limits   Limits
}

// Within reports whether a grants no more than max: its operations and
// commands are max's, its limits lower or equal.
func (a Authority) Within(max Authority) bool {
	for _, op := range a.Ops {
		if !slices.Contains(max.Ops, op) {
			return false
		}
	}
	for _, c := range a.Commands {
		if !slices.Contains(max.Commands, c) {
			return false
		}
	}
	return a.Limits.within(max.Limits)
}

// ValidName reports whether s is a valid ref, request id, template id or
// placeholder name: 1 to 64 of [A-Za-z0-9._-], and not "." or "..",
// which name directories wherever they are used.
func ValidName(s string) bool { return validName(s) }

// Catalog is a Node's validated workspace entries.
type Catalog struct {
	host    string
	entries map[string]*entry
}

type entry struct {
	Entry
	dev, ino uint64 // the root's identity when the catalog was built
}

// ErrUnsupportedHost: workspaces run on linux and darwin only.
var ErrUnsupportedHost = &Error{Code: CodeUnsupportedHost, Op: "catalog"}

// NewCatalog validates entries for this host. Every entry's platform is
// checked before any root is opened; then each root must be an existing
// directory (not a symlink) and each command's executable must lie
// outside it. An empty catalog is valid anywhere.
func NewCatalog(entries []Entry) (*Catalog, error) { return newCatalog(entries, runtime.GOOS) }

func newCatalog(entries []Entry, host string) (*Catalog, error) {
	c := &Catalog{host: host, entries: map[string]*entry{}}
	if len(entries) == 0 {
		return c, nil
	}
	if host != "linux" && host != "darwin" {
		return nil, ErrUnsupportedHost
	}
	for i, e := range entries {
		if e.Platform != host {
			return nil, fmt.Errorf("workspace: entry %d (%s): platform %q is not this host's %q", i, e.Ref, e.Platform, host)
		}
	}
	for i, e := range entries {
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("workspace: entry %d (%s): %w", i, e.Ref, err)
		}
		if c.entries[e.Ref] != nil {
			return nil, fmt.Errorf("workspace: entry %d: duplicate ref %q", i, e.Ref)
		}
		dev, ino, err := rootIdentity(e.Root)
		if err != nil {
			return nil, fmt.Errorf("workspace: entry %d (%s): root: %w", i, e.Ref, err)
		}
		for _, t := range e.Commands {
			if err := outsideRoot(t.Argv[0], e.Root); err != nil {
				return nil, fmt.Errorf("workspace: entry %d (%s): command %q: %w", i, e.Ref, t.ID, err)
			}
		}
		c.entries[e.Ref] = &entry{Entry: e, dev: dev, ino: ino}
	}
	return c, nil
}

// validName accepts refs, template ids and placeholder names: 1 to 64 of
// [A-Za-z0-9._-].
func validName(s string) bool {
	if s == "" || len(s) > 64 || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// deniedEnv are names never passed to commands, whatever the allow-list
// says: loader and git control, secrets by convention, and the fixed ones.
func deniedEnv(name string) bool {
	u := strings.ToUpper(name)
	return strings.HasPrefix(u, "LD_") || strings.HasPrefix(u, "DYLD_") || strings.HasPrefix(u, "GIT_") ||
		strings.HasSuffix(u, "_TOKEN") || strings.HasSuffix(u, "_KEY") || strings.HasSuffix(u, "_SECRET") ||
		strings.HasSuffix(u, "_PASSWORD") || u == "PATH" || u == "HOME" || u == "TMPDIR" || u == "IFS" || u == "BASH_ENV" || u == "ENV"
}

func (e *Entry) validate() error {
	if !validName(e.Ref) {
		return errors.New("ref must be 1 to 64 of [A-Za-z0-9._-]")
	}
	if !filepath.IsAbs(e.Root) || filepath.Clean(e.Root) != e.Root || e.Root == "/" {
		return fmt.Errorf("root %q must be a clean absolute path other than /", e.Root)
	}
	if len(e.Ops) == 0 {
		return errors.New("no operations")
	}
	for _, op := range e.Ops {
		if !slices.Contains(allOps, op) {
			return fmt.Errorf("unknown operation %q", op)
		}
	}
	if err := e.Limits.Validate(); err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	for _, n := range e.Env {
		if n == "" || strings.ContainsAny(n, "=\x00") || deniedEnv(n) {
			return fmt.Errorf("environment name %q may not be passed to commands", n)
		}
	}
	if len(e.Commands) > 0 && !slices.Contains(e.Ops, OpCommand) {
		return errors.New("command templates without the command operation")
	}
	seen := map[string]bool{}
	for _, t := range e.Commands {
		if !validName(t.ID) || seen[t.ID] {
			return fmt.Errorf("command id %q is invalid or repeated", t.ID)
		}
		seen[t.ID] = true
		if len(t.Argv) == 0 || !filepath.IsAbs(t.Argv[0]) || filepath.Clean(t.Argv[0]) != t.Argv[0] {
			return fmt.Errorf("command %q: argv[0] must be a clean absolute path", t.ID)
		}
		used := map[string]bool{}
		for _, a := range t.Argv[1:] {
			if name, ok := placeholder(a); ok {
				k, typed := t.Args[name]
				if !typed || (k != ArgPath && k != ArgWord && k != ArgInt) {
					return fmt.Errorf("command %q: placeholder {%s} has no valid type", t.ID, name)
				}
				used[name] = true
			} else if strings.ContainsAny(a, "{}\x00") {
				return fmt.Errorf("command %q: argument %q: a placeholder must be a whole argument", t.ID, a)
			}
		}
		for name := range t.Args {
			if !used[name] {
				return fmt.Errorf("command %q: placeholder %q is not in argv", t.ID, name)
			}
		}
	}
	return nil
}

// placeholder reports whether an argv element is "{name}".
func placeholder(a string) (string, bool) {
	if len(a) > 2 && a[0] == '{' && a[len(a)-1] == '}' && validName(a[1:len(a)-1]) {
		return a[1 : len(a)-1], true
	}
	return "", false
}

// outsideRoot checks that an executable exists, is a regular file, and
// does not lie beneath root (both with symlinks resolved).
func outsideRoot(exe, root string) error {
	realExe, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return err
	}
	st, err := os.Stat(realExe)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", exe)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(realRoot, realExe); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s lies inside the workspace root", exe)
	}
	return nil
}

// Refs returns the catalog's refs, sorted.
func (c *Catalog) Refs() []string {
	out := make([]string, 0, len(c.entries))
	for r := range c.entries {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Check reports whether a grants no more than ref's entry allows:
// operations and commands it lists, limits lower or equal.
func (c *Catalog) Check(ref string, a Authority) error {
	e := c.entries[ref]
	if e == nil {
		return fail(CodeDenied, "grant", "", fmt.Errorf("no workspace %q on this node", ref))
	}
	for _, op := range a.Ops {
		if !slices.Contains(e.Ops, op) {
			return fail(CodeDenied, "grant", "", fmt.Errorf("operation %q is not allowed for %q", op, ref))
		}
	}
	for _, id := range a.Commands {
		if !slices.Contains(a.Ops, OpCommand) || !slices.ContainsFunc(e.Commands, func(t Template) bool { return t.ID == id }) {
			return fail(CodeDenied, "grant", "", fmt.Errorf("command %q is not allowed for %q", id, ref))
		}
	}
	if err := a.Limits.Validate(); err != nil || !a.Limits.within(e.Limits) {
		return fail(CodeDenied, "grant", "", errors.New("limits above the node's"))
	}
	return nil
}
