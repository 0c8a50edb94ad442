package workspace

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
)

// TestErrorMatching checks the matching Error documents: a class target
// (a Code alone) matches any error of that code however wrapped, a target
// naming an operation or path matches only itself, the cause stays
// reachable, and CodeOf sorts everything into a code.
func TestErrorMatching(t *testing.T) {
	err := fmt.Errorf("open: %w", fail(CodeLink, "read", "a/b", syscall.ELOOP))
	for _, c := range []struct {
		target error
		want   bool
	}{
		{&Error{Code: CodeLink}, true},
		{&Error{Code: CodeNotFound}, false},
		{&Error{Code: CodeLink, Op: "read"}, false},
		{&Error{Code: CodeLink, Path: "a/b"}, false},
		{syscall.ELOOP, true},
		{syscall.ENOENT, false},
	} {
		if got := errors.Is(err, c.target); got != c.want {
			t.Errorf("errors.Is(%v, %#v) = %v, want %v", err, c.target, got, c.want)
		}
	}
	if !errors.Is(ErrUnsupportedHost, &Error{Code: CodeUnsupportedHost}) || !errors.Is(fmt.Errorf("x: %w", ErrUnsupportedHost), ErrUnsupportedHost) {
		t.Error("ErrUnsupportedHost does not match its class or itself")
	}

	for _, c := range []struct {
		err  error
		want Code
	}{
		{nil, ""},
		{err, CodeLink},
		{io.ErrUnexpectedEOF, CodeIO},
		{fmt.Errorf("x: %w", fail(CodeTooLarge, "write", "f", nil)), CodeTooLarge},
	} {
		if got := CodeOf(c.err); got != c.want {
			t.Errorf("CodeOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}

	msg := err.Error()
	for _, part := range []string{"read a/b", string(CodeLink), syscall.ELOOP.Error()} {
		if !strings.Contains(msg, part) {
			t.Errorf("message %q lacks %q", msg, part)
		}
	}
	if got := fail(CodeClosed, "list", "", nil).Error(); got != "workspace: list: closed" {
		t.Errorf("message without path or cause = %q", got)
	}
}
