package httpmux

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestAllowed(t *testing.T) {
	mux := http.NewServeMux()
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux.Handle("POST /v1/chat/completions", nop)
	mux.Handle("GET /v1/models/{id...}", nop)
	mux.Handle("DELETE /v1/models/{id...}", nop)
	mux.Handle("/any", nop)
	for _, c := range []struct{ method, path, want string }{
		{"GET", "/v1/chat/completions", "POST"},
		{"POST", "/v1/chat/completions", "POST"},
		{"PUT", "/v1/models/org/m", "GET, HEAD, DELETE"},
		{"OPTIONS", "/any", "GET, HEAD, POST, PUT, PATCH, DELETE"},
		{"GET", "/v1/files", ""},
		{"GET", "/v1/chat/completions/x", ""},
	} {
		if got := Allowed(mux, httptest.NewRequest(c.method, c.path, nil)); got != c.want {
			t.Errorf("%s %s: %q, want %q", c.method, c.path, got, c.want)
		}
	}
}
