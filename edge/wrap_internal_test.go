package edge

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPanicAfterTheAnswerBegan: a handler that panics before it wrote
// anything answers a clean 500; one that panics after its answer began
// has the connection cut, so that the client sees a broken answer rather
// than an error body appended to it as if it were part of it.
func TestPanicAfterTheAnswerBegan(t *testing.T) {
	s, err := New(Config{Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mux := http.NewServeMux()
	mux.Handle("/before", s.wrap(func(http.ResponseWriter, *http.Request, string) { panic("boom") }))
	mux.Handle("/after", s.wrap(func(w http.ResponseWriter, _ *http.Request, _ string) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		panic("boom")
	}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/before")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(b), "Internal error.") || strings.Contains(string(b), "boom") {
		t.Fatalf("panic before the answer: %d %s", resp.StatusCode, b)
	}

	resp, err = http.Get(srv.URL + "/after")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "data: {\"n\":1}\n" {
		t.Fatalf("first event %q %v", first, err)
	}
	rest, err := io.ReadAll(br)
	if err == nil || strings.Contains(string(rest), "error") {
		t.Fatalf("after the panic: %q, %v; want the answer cut (an error reading it), nothing appended", rest, err)
	}
}
