package workspace

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
)

// Result is a command's typed outcome.
type Result struct {
	// ExitCode is the exit status; -1 when a signal ended it.
	ExitCode int
	// Signal names the signal that ended it, if one did.
	Signal string
	// TimedOut: the command limit ended it (its whole process group was
	// killed). Canceled: the request was cancelled or cleaned up.
	TimedOut, Canceled bool
	// Output is stdout and stderr as they interleaved, at most the output
	// limit; Truncated says more was dropped.
	Output    []byte
	Truncated bool
}

// fixedPath is the PATH every command gets.
const fixedPath = "/usr/local/bin:/usr/bin:/bin"

// expand builds a template's argv with typed values for its
// placeholders. Every placeholder must get a value, and no other value
// may be given.
func expand(t *Template, args map[string]string) ([]string, error) {
	for name := range args {
		if _, ok := t.Args[name]; !ok {
			return nil, fail(CodeBadArgument, "command", "", fmt.Errorf("%q is not a placeholder of %q", name, t.ID))
		}
	}
	argv := make([]string, len(t.Argv))
	copy(argv, t.Argv)
	for i, a := range argv[1:] {
		name, ok := placeholder(a)
		if !ok {
			continue
		}
		v, given := args[name]
		if !given {
			return nil, fail(CodeBadArgument, "command", "", fmt.Errorf("no value for {%s}", name))
		}
		if err := checkArg(t.Args[name], v); err != nil {
			return nil, fail(CodeBadArgument, "command", "", fmt.Errorf("{%s}: %w", name, err))
		}
		argv[i+1] = v
	}
	return argv, nil
}

func checkArg(k ArgKind, v string) error {
	if v == "" || v[0] == '-' {
		return errors.New("empty, or starts with '-'")
	}
	switch k {
	case ArgPath:
		if _, err := splitPath("command", v); err != nil || v == "." {
			return errors.New("not a workspace path")
		}
	case ArgWord:
		if !validName(v) {
			return errors.New("not a word of [A-Za-z0-9._-]")
		}
	case ArgInt:
		if len(v) > 18 {
			return errors.New("not an integer")
		}
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return errors.New("not an integer")
		}
	default:
		return errors.New("untyped placeholder")
	}
	return nil
}

// environ is the command environment: the entry's allow-listed names
// present in the Node's environment, then the fixed PATH, HOME and TMPDIR.
func (s *Session) environ(tmp string) []string {
	var env []string
	for _, n := range s.e.Env {
		if deniedEnv(n) {
			continue
		}
		if v, ok := os.LookupEnv(n); ok {
			env = append(env, n+"="+v)
		}
	}
	return append(env, "PATH="+fixedPath, "HOME="+tmp, "TMPDIR="+tmp)
}

// capWriter keeps the first limit bytes and drops the rest silently, so a
// flooding command is never handed EPIPE by the cap.
type capWriter struct {
	mu        sync.Mutex
	limit     int64
	buf       []byte
	truncated bool
}

func (w *capWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	room := w.limit - int64(len(w.buf))
	switch {
	case room <= 0:
		w.truncated = w.truncated || len(p) > 0
	case int64(len(p)) > room:
		w.buf = append(w.buf, p[:room]...)
		w.truncated = true
	default:
		w.buf = append(w.buf, p...)
	}
	return len(p), nil
}
