package upstream

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/iop-dev/iop/internal/h1"
)

func TestAllowed(t *testing.T) {
	routes := []Route{{"POST", "/v1/chat/completions"}, {"GET", "/v1/responses/{id}"}, {"GET", "/api/tags"}}
	cases := []struct {
		method, path string
		want         bool
	}{
		{"POST", "/v1/chat/completions", true},
		{"GET", "/v1/chat/completions", false},
		{"POST", "/v1/chat/completions/", false},
		{"POST", "/v1/chat/completions?x=1", false},
		{"POST", "/v1//chat/completions", false},
		{"POST", "/v1/../v1/chat/completions", false},
		{"POST", "/v1/chat/%63ompletions", false},
		{"POST", "v1/chat/completions", false},
		{"GET", "/v1/responses/resp_123-abc", true},
		{"GET", "/v1/responses/../../admin", false},
		{"GET", "/v1/responses/a/b", false},
		{"GET", "/v1/responses/", false},
		{"GET", "/api/tags", true},
		{"DELETE", "/api/tags", false},
		{"POST", "/api/pull", false},
	}
	for _, c := range cases {
		if got := Allowed(routes, c.method, c.path); got != c.want {
			t.Errorf("Allowed(%s %s) = %v, want %v", c.method, c.path, got, c.want)
		}
	}
}

// A plain http upstream gets h1's transport; https keeps net/http's, and
// a caller's own client is kept as it is.
func TestNewClientTransport(t *testing.T) {
	c, err := NewClient("http://127.0.0.1:11434", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.HTTP.Transport.(*h1.Transport); !ok {
		t.Errorf("http upstream: transport %T, want *h1.Transport", c.HTTP.Transport)
	}
	c, err = NewClient("https://api.example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.HTTP.Transport.(*http.Transport); !ok {
		t.Errorf("https upstream: transport %T, want *http.Transport", c.HTTP.Transport)
	}
	own := &http.Client{Transport: &http.Transport{}}
	c, err = NewClient("http://127.0.0.1:11434", own)
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.Transport != own.Transport {
		t.Errorf("caller's transport replaced by %T", c.HTTP.Transport)
	}
}

// TestRedirectNotFollowed: a 3xx from the upstream comes back as it is,
// and the credential never reaches the host it points to, with
// NewClient's own client (which calls its transport directly) and with a
// caller's.
func TestRedirectNotFollowed(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer up.Close()
	for _, own := range []*http.Client{nil, {}} {
		c, err := NewClient(up.URL, own)
		if err != nil {
			t.Fatal(err)
		}
		c.Auth = func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer secret")
			return nil
		}
		resp, err := c.Do(context.Background(), http.MethodGet, "/v1/models", nil, nil)
		if err != nil {
			t.Fatalf("own client %v: %v", own != nil, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.HTTP.CloseIdleConnections()
		if resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("own client %v: status %d, want the 307 itself", own != nil, resp.StatusCode)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}
