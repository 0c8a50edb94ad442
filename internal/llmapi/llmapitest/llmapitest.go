// Package llmapitest holds what the tests of llmapi and of code built on
// it share: llmapi's provider fixtures, a decoder driven through a
// renderer, the client formats' stream grammars (CheckAnthropic,
// CheckChat, CheckResponses), and the answer a client holds after a
// stream or a whole body (StreamAnswer, BodyAnswer).
package llmapitest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/sse"
)

// Fixture returns llmapi's testdata file name: a provider's answer, written
// by hand from the provider's published API reference, never captured
// from llmapi's output. It finds the module's root from the test's working
// directory (its package's directory), so it works under -trimpath too.
func Fixture(t testing.TB, name string) []byte {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("llmapitest: no go.mod above the test's directory")
		}
		dir = parent
	}
	b, err := os.ReadFile(filepath.Join(dir, "internal", "llmapi", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Render drives dec through r and returns the stream r rendered, and its
// buffered answer's status and body.
func Render(t testing.TB, dec llmapi.Decoder, r llmapi.Renderer) (stream []byte, status int, body []byte) {
	t.Helper()
	for {
		ev, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, r.Event(ev)...)
	}
	status, body = r.Body()
	return stream, status, body
}

// Events parses a rendered stream into its server-sent events.
func Events(t testing.TB, stream []byte) []sse.Event {
	t.Helper()
	rd := sse.NewReader(bytes.NewReader(stream), 0)
	var out []sse.Event
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}
