package cors_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/internal/cors"
)

// TestNewPolicyRefuses: a refused entry comes back as an *OriginError
// naming its place in the list and the entry as given.
func TestNewPolicyRefuses(t *testing.T) {
	for _, c := range []struct {
		origins []string
		index   int
	}{
		{[]string{"https://a.example/"}, 0},
		{[]string{"https://a.example", "null"}, 1},
		{[]string{"https://a.example", "*"}, 1},
		{[]string{"https://a.example", "https://b.example", "https://a.example"}, 2},
	} {
		p, err := cors.NewPolicy(c.origins)
		oe, ok := errors.AsType[*cors.OriginError](err)
		if p != nil || !ok || oe.Index != c.index || oe.Origin != c.origins[c.index] || oe.Reason == "" {
			t.Errorf("%q: %v, %#v; want an *OriginError for [%d]", c.origins, p, err, c.index)
		}
	}
	if p, err := cors.NewPolicy(nil); p != nil || err != nil {
		t.Errorf("no origins: %v, %v; want the nil policy", p, err)
	}
}

// TestHandler: what each kind of request gets, with the policy read per
// request (a reload) and CORS only under the prefix.
func TestHandler(t *testing.T) {
	served := http.NewServeMux()
	served.HandleFunc("POST /v1/chat", func(http.ResponseWriter, *http.Request) {})
	served.HandleFunc("GET /v1/models", func(http.ResponseWriter, *http.Request) {})
	listed, err := cors.NewPolicy([]string{"https://a.example"})
	if err != nil {
		t.Fatal(err)
	}
	every, err := cors.NewPolicy([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	var policy *cors.Policy
	h := &cors.Handler{
		Policy: func() *cors.Policy { return policy },
		Prefix: "/v1/",
		Expose: "Request-Id",
		Served: served,
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTeapot) // Next answered
		}),
	}
	do := func(method, path string, hdr ...string) (int, http.Header) {
		r := httptest.NewRequest(method, path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code, w.Header()
	}
	pre := []string{"Origin", "https://a.example", "Access-Control-Request-Method", "POST"}
	for _, c := range []struct {
		name   string
		policy *cors.Policy
		method string
		path   string
		hdr    []string
		code   int
		want   http.Header
	}{
		{"no policy", nil, "OPTIONS", "/v1/chat", pre, http.StatusTeapot, http.Header{}},
		{"preflight", listed, "OPTIONS", "/v1/chat", append(pre, "Access-Control-Request-Headers", "Authorization,X-A"), http.StatusNoContent, http.Header{
			"Vary":                         {"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"},
			"Access-Control-Allow-Origin":  {"https://a.example"},
			"Access-Control-Allow-Methods": {"POST"},
			"Access-Control-Allow-Headers": {"authorization, x-a"},
			"Access-Control-Max-Age":       {cors.MaxAge},
		}},
		{"preflight, unserved path", listed, "OPTIONS", "/v1/other", pre, http.StatusTeapot, http.Header{}},
		{"preflight, bad header list", listed, "OPTIONS", "/v1/chat", append(pre, "Access-Control-Request-Headers", "x evil"), http.StatusTeapot, http.Header{}},
		{"request", listed, "POST", "/v1/chat", []string{"Origin", "https://a.example"}, http.StatusTeapot, http.Header{
			"Vary":                          {"Origin"},
			"Access-Control-Allow-Origin":   {"https://a.example"},
			"Access-Control-Expose-Headers": {"Request-Id"},
		}},
		{"unlisted origin", listed, "POST", "/v1/chat", []string{"Origin", "https://b.example"}, http.StatusTeapot, http.Header{"Vary": {"Origin"}}},
		{"no origin", listed, "POST", "/v1/chat", nil, http.StatusTeapot, http.Header{"Vary": {"Origin"}}},
		{"outside the prefix", listed, "GET", "/metrics", []string{"Origin", "https://a.example"}, http.StatusTeapot, http.Header{}},
		{"every origin", every, "POST", "/v1/chat", []string{"Origin", "https://b.example"}, http.StatusTeapot, http.Header{
			"Access-Control-Allow-Origin":   {"*"},
			"Access-Control-Expose-Headers": {"Request-Id"},
		}},
		{"every origin, none sent", every, "POST", "/v1/chat", nil, http.StatusTeapot, http.Header{}},
	} {
		policy = c.policy
		code, got := do(c.method, c.path, c.hdr...)
		if code != c.code {
			t.Errorf("%s: status %d, want %d", c.name, code, c.code)
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%s: headers (-want +got):\n%s", c.name, diff)
		}
	}
}
