package edge_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/iop-dev/iop/edge"
)

const pageOrigin = "https://chat.example.com"

func preflight(origin, method, headers string) map[string]string {
	h := map[string]string{"Origin": origin, "Access-Control-Request-Method": method}
	if headers != "" {
		h["Access-Control-Request-Headers"] = headers
	}
	return h
}

// TestCORSOff: without CORSOrigins, the default, no answer carries a CORS
// header, whatever origin asks, and a preflight gets the 405 any OPTIONS
// gets: a browser page on another origin cannot read the API.
func TestCORSOff(t *testing.T) {
	r := newRig(t, rigOpts{})
	resp, body := r.do(t, "OPTIONS", "/v1/chat/completions", "", preflight(pageOrigin, "POST", "authorization, content-type"))
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("preflight: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = r.do(t, "POST", "/v1/chat/completions", chatJSON("gpt-local", "hi"), map[string]string{"Origin": pageOrigin, "Authorization": "Bearer " + apiKey})
	if resp.StatusCode != 200 {
		t.Fatalf("chat: %d %s", resp.StatusCode, body)
	}
	for k := range resp.Header {
		if strings.HasPrefix(k, "Access-Control-") {
			t.Errorf("answer carries %s: %q", k, resp.Header.Get(k))
		}
	}
}

// TestCORSOrigins: a listed origin's preflight is answered without a key
// (browsers send none), naming the path's methods and allowing the
// requested headers back; its requests still need the key, and every
// answer (an error too, so that the page can read it) carries the origin
// and the headers a client may read. An unlisted origin, an unserved
// path and a malformed header list get no CORS header (but Vary: Origin,
// so that a cache keeps the answers apart). A reload changes the list
// for new requests. The operator paths never carry CORS headers.
func TestCORSOrigins(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		c.CORSOrigins = []string{pageOrigin, "http://localhost:3000"}
	}})

	resp, body := r.do(t, "OPTIONS", "/v1/chat/completions", "", preflight(pageOrigin, "POST", "Authorization, content-type,x-stainless-os"))
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("preflight: %d %s", resp.StatusCode, body)
	}
	for k, want := range map[string]string{
		"Access-Control-Allow-Origin":  pageOrigin,
		"Access-Control-Allow-Methods": "POST",
		"Access-Control-Allow-Headers": "authorization, content-type, x-stainless-os",
		"Access-Control-Max-Age":       "7200",
		"Vary":                         "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
	} {
		if got := resp.Header.Get(k); got != want {
			t.Errorf("preflight %s: %q, want %q", k, got, want)
		}
	}
	if got := resp.Header.Get("Access-Control-Allow-Credentials"); got != "" {
		t.Errorf("preflight allows credentials: %q", got)
	}
	resp, _ = r.do(t, "OPTIONS", "/v1/models/gpt-local", "", preflight("http://localhost:3000", "GET", ""))
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Methods") != "GET, HEAD" ||
		resp.Header.Get("Access-Control-Allow-Origin") != "http://localhost:3000" || resp.Header.Get("Access-Control-Allow-Headers") != "" {
		t.Errorf("models preflight: %d %v", resp.StatusCode, resp.Header)
	}

	for _, c := range []struct {
		name, path string
		header     map[string]string
		status     int
	}{
		{"unlisted origin", "/v1/chat/completions", preflight("https://evil.example", "POST", "authorization"), http.StatusMethodNotAllowed},
		{"origin with another port", "/v1/chat/completions", preflight("http://localhost:3001", "POST", ""), http.StatusMethodNotAllowed},
		{"origin with a trailing slash", "/v1/chat/completions", preflight(pageOrigin+"/", "POST", ""), http.StatusMethodNotAllowed},
		{"unserved path", "/v1/files", preflight(pageOrigin, "POST", "authorization"), http.StatusNotFound},
		{"operator path", "/readyz", preflight(pageOrigin, "GET", ""), http.StatusMethodNotAllowed},
		{"header list with a space in a name", "/v1/chat/completions", preflight(pageOrigin, "POST", "authorization, x evil"), http.StatusMethodNotAllowed},
		{"oversized header list", "/v1/chat/completions", preflight(pageOrigin, "POST", strings.Repeat("x-a,", 1100)), http.StatusMethodNotAllowed},
	} {
		resp, _ := r.do(t, "OPTIONS", c.path, "", c.header)
		if resp.StatusCode != c.status {
			t.Errorf("%s: %d, want %d", c.name, resp.StatusCode, c.status)
		}
		for k := range resp.Header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("%s: answer carries %s", c.name, k)
			}
		}
	}

	// The request itself: answered (tunnelled and translated alike), with
	// the origin, its Vary and the exposed headers; without the key, 401
	// that the page can read.
	for _, model := range []string{"gpt-local", "via-anthropic"} {
		resp, body = r.do(t, "POST", "/v1/chat/completions", chatJSON(model, "hi"), map[string]string{"Origin": pageOrigin, "Authorization": "Bearer " + apiKey, "Content-Type": "application/json"})
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != pageOrigin || resp.Header.Get("Vary") != "Origin" ||
			!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "X-Request-Id") || resp.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s: %d %v %s", model, resp.StatusCode, resp.Header, body)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, _ := r.do(t, "GET", path, "", map[string]string{"Origin": pageOrigin})
		if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "" {
			t.Errorf("GET %s from a listed origin: %d, Access-Control-Allow-Origin %q", path, resp.StatusCode, got)
		}
	}
	resp, body = r.do(t, "POST", "/v1/chat/completions", chatJSON("gpt-local", "hi"), map[string]string{"Origin": pageOrigin})
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != pageOrigin {
		t.Errorf("without a key: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, o := range []string{"https://evil.example", ""} {
		resp, _ = r.do(t, "POST", "/v1/chat/completions", chatJSON("gpt-local", "hi"), map[string]string{"Origin": o, "Authorization": "Bearer " + apiKey})
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Vary") != "Origin" {
			t.Errorf("request from origin %q: %d %v", o, resp.StatusCode, resp.Header)
		}
	}

	// "*" by reload: every origin, and no Vary since the answer is the
	// same for all.
	cfg := r.config(8)
	cfg.CORSOrigins = []string{"*"}
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	resp, _ = r.do(t, "POST", "/v1/chat/completions", chatJSON("gpt-local", "hi"), map[string]string{"Origin": "https://evil.example", "Authorization": "Bearer " + apiKey})
	if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != "*" || resp.Header.Get("Vary") != "" {
		t.Errorf("after reload to *: %d %v", resp.StatusCode, resp.Header)
	}
	// And off again.
	cfg.CORSOrigins = nil
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	resp, _ = r.do(t, "OPTIONS", "/v1/chat/completions", "", preflight(pageOrigin, "POST", ""))
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("after reload to none: %d %v", resp.StatusCode, resp.Header)
	}
}

// TestCORSOriginsRefused: an origin spelled other than a browser sends it
// would never match, so the configuration is refused, naming the entry,
// on New and on Reload (which keeps the running list).
func TestCORSOriginsRefused(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) { c.CORSOrigins = []string{pageOrigin} }})
	for _, c := range []struct {
		origins []string
		want    string
	}{
		{[]string{"https://chat.example.com/"}, "no path"},
		{[]string{"https://chat.example.com/app"}, "no path"},
		{[]string{"https://chat.example.com?x=1"}, "no path"},
		{[]string{"https://chat.example.com#"}, "no path"},
		{[]string{"HTTPS://chat.example.com"}, "lower case"},
		{[]string{"https://Chat.example.com"}, "lower case"},
		{[]string{"https://chat.example.com:443"}, "default port"},
		{[]string{"http://chat.example.com:80"}, "default port"},
		{[]string{"https://chat.example.com:"}, "empty port"},
		{[]string{"ftp://chat.example.com"}, "http:// or https://"},
		{[]string{"chat.example.com"}, "http:// or https://"},
		{[]string{"null"}, "http:// or https://"},
		{[]string{"https://"}, "scheme://host"},
		{[]string{"https://u:p@chat.example.com"}, "scheme://host"},
		{[]string{"https://chat.example.com", "*"}, "must stand alone"},
		{[]string{"https://chat.example.com", "https://chat.example.com"}, "duplicate"},
		{[]string{""}, "http:// or https://"},
	} {
		cfg := r.config(8)
		cfg.CORSOrigins = c.origins
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "CORSOrigins[") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.origins, err, c.want)
		}
		if err := r.srv.Reload(cfg); err == nil {
			t.Errorf("%q: reload accepted", c.origins)
		}
		bad := r.cfg
		bad.CORSOrigins = c.origins
		if _, err := edge.New(bad); err == nil {
			t.Errorf("%q: New accepted", c.origins)
		}
	}
	resp, _ := r.do(t, "OPTIONS", "/v1/chat/completions", "", preflight(pageOrigin, "POST", ""))
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != pageOrigin {
		t.Errorf("a refused reload changed the origins: %d %v", resp.StatusCode, resp.Header)
	}
	for _, ok := range [][]string{{"http://localhost:3000"}, {"https://[::1]:8443"}, {"http://127.0.0.1"}, {"*"}} {
		cfg := r.config(8)
		cfg.CORSOrigins = ok
		if err := cfg.Validate(); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}
