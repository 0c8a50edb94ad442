package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/iop-dev/iop/execution"
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

// TestAPIPath: a server whose API does not live at /v1 gets every /v1 path
// under its own; other paths, and paths that only begin with the letters
// "/v1", are sent as they are; a malformed API path is refused.
func TestAPIPath(t *testing.T) {
	for _, c := range []struct{ apiPath, path, want string }{
		{"/v1beta/openai", "/v1/chat/completions", "https://g.example/base/v1beta/openai/chat/completions"},
		{"/v1beta/openai/", "/v1/models?limit=2", "https://g.example/base/v1beta/openai/models?limit=2"},
		{"/v1beta/openai", "/v1", "https://g.example/base/v1beta/openai"},
		{"/v1beta/openai", "/v10/x", "https://g.example/base/v10/x"},
		{"/v1beta/openai", "/api/tags", "https://g.example/base/api/tags"},
		{"/", "/v1/chat/completions", "https://g.example/base/chat/completions"},
		{"/", "/v1?x=1", "https://g.example/base/?x=1"},
		{"", "/v1/chat/completions", "https://g.example/base/v1/chat/completions"},
	} {
		cl, err := NewClient("https://g.example/base/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.apiPath != "" {
			if err := cl.SetAPIPath(c.apiPath); err != nil {
				t.Fatalf("%q: %v", c.apiPath, err)
			}
		}
		if got := cl.URL(c.path); got != c.want {
			t.Errorf("API path %q, path %q: %s, want %s", c.apiPath, c.path, got, c.want)
		}
	}
	cl, _ := NewClient("https://g.example", nil)
	for _, bad := range []string{"v1beta", "//evil.example/x", "/a/../b", "/a/./b", "/a//b", "/a?q=1", "/a#f", "/a%2Fb", "/a b", "/ä"} {
		if err := cl.SetAPIPath(bad); err == nil {
			t.Errorf("API path %q accepted", bad)
		}
	}
}

// TestDecodeAnswer: a whole answer is one JSON object within its bound;
// anything else is the provider's failure with a note that names no
// content, unless the caller's context ended first.
func TestDecodeAnswer(t *testing.T) {
	type answer struct {
		A int `json:"a"`
	}
	for _, tc := range []struct {
		body, note string
	}{
		{` {"a":1} `, ""},
		{`{"a":1}{"a":2}`, "malformed upstream answer"},
		{`null`, "malformed upstream answer"},
		{`[]`, "malformed upstream answer"},
		{``, "malformed upstream answer"},
		{`{"a":"x"}`, "malformed upstream answer"},
		{`{"a":1,"pad":"` + strings.Repeat("x", 64) + `"}`, "upstream answer too large"},
	} {
		var v answer
		err := DecodeAnswer(context.Background(), strings.NewReader(tc.body), 64, &v)
		if tc.note == "" {
			if err != nil || v.A != 1 {
				t.Errorf("%q: %v, %+v", tc.body, err, v)
			}
			continue
		}
		var f *execution.Failure
		if !errors.As(err, &f) || f.Class != execution.FailureProvider || f.Message != tc.note {
			t.Errorf("%q: %v, want provider: %s", tc.body, err, tc.note)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var f *execution.Failure
	if err := DecodeAnswer(ctx, iotest.ErrReader(context.Canceled), 64, new(answer)); !errors.As(err, &f) || f.Class != execution.FailureCanceled {
		t.Errorf("a read the caller cancelled: %v, want canceled", err)
	}
}

func TestStatusClass(t *testing.T) {
	for status, want := range map[int]execution.FailureClass{
		400: execution.FailureInvalidRequest, 401: execution.FailureProvider, 404: execution.FailureInvalidRequest,
		422: execution.FailureInvalidRequest, 429: execution.FailureRateLimited, 500: execution.FailureProvider,
		503: execution.FailureUnavailable, 529: execution.FailureUnavailable,
	} {
		if got := StatusClass(status); got != want {
			t.Errorf("%d: %v, want %v", status, got, want)
		}
	}
}
