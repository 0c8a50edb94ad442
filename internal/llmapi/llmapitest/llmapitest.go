// Package llmapitest holds what the tests of llmapi and of code built on
// it share: llmapi's provider fixtures and a decoder driven through a
// renderer.
package llmapitest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/sse"
)

// Fixture returns llmapi's testdata file name: a provider's answer, written
// by hand from the provider's published API reference, never captured
// from llmapi's output.
func Fixture(t testing.TB, name string) []byte {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("llmapitest: no source path for the fixtures")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "testdata", name))
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
