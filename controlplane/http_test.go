package controlplane_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/testpki"
	"github.com/iop-dev/iop/wire"
)

// apiCall is one operator request and its answer.
type apiCall struct {
	method, path, body string
	header             map[string]string
}

type apiAnswer struct {
	status int
	header http.Header
	body   string
}

func (a apiAnswer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, a.body)
	}
	return m
}

func do(t *testing.T, c *http.Client, base string, call apiCall) apiAnswer {
	t.Helper()
	var body io.Reader
	if call.body != "" {
		body = strings.NewReader(call.body)
	}
	req, err := http.NewRequest(call.method, base+call.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if call.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range call.header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return apiAnswer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// TestOperatorAuth covers every way in and every refusal: no credential,
// a wrong one, a bearer token, the page's cookie session with its CSRF
// token, cross-site requests, sign-out.
func TestOperatorAuth(t *testing.T) {
	h := startHub(t, "", nil)
	e1 := startEdge(t, "e1", h.addr, nil)
	e1.startNode()
	waitFor(t, "n-e1 online", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return n.Connected })
	c := &http.Client{}
	list := apiCall{method: "GET", path: "/api/edges?nodes=1"}
	refresh := apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"config.refresh"}`}

	// Refusals.
	for name, hdr := range map[string]map[string]string{
		"none":        nil,
		"wrong token": bearer("op-token-wrong"),
		"edge token":  bearer(edgeToken("e1")),
		"basic":       {"Authorization": "Basic YWxpY2U6eA=="},
		"empty":       bearer(""),
	} {
		call := list
		call.header = hdr
		a := do(t, c, h.url, call)
		if a.status != http.StatusUnauthorized || a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: status %d, WWW-Authenticate %q", name, a.status, a.header.Get("WWW-Authenticate"))
		}
		if strings.Contains(a.body, "n-e1") {
			t.Errorf("%s: the view leaked to an unauthenticated caller", name)
		}
		call = refresh
		call.header = hdr
		if a := do(t, c, h.url, call); a.status != http.StatusUnauthorized {
			t.Errorf("%s: command status %d", name, a.status)
		}
	}

	// The operator's token sent twice is ambiguous, and refused.
	twice, _ := http.NewRequest("GET", h.url+"/api/edges", nil)
	twice.Header.Add("Authorization", "Bearer "+operatorToken)
	twice.Header.Add("Authorization", "Bearer "+operatorToken)
	if resp, err := c.Do(twice); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("Authorization twice: %d, want 401", resp.StatusCode)
	}

	// A bearer token: reads and commands, no CSRF token needed (a browser
	// never attaches it by itself). The scheme's name is matched in any
	// case.
	call := list
	call.header = map[string]string{"Authorization": "bearer " + operatorToken}
	if a := do(t, c, h.url, call); a.status != 200 {
		t.Fatalf("lower-case bearer list: %d %s", a.status, a.body)
	}
	call.header = bearer(operatorToken)
	a := do(t, c, h.url, call)
	if a.status != 200 {
		t.Fatalf("bearer list: %d %s", a.status, a.body)
	}
	for _, secret := range []string{operatorToken, edgeToken("e1"), nodeToken, apiKey} {
		if strings.Contains(a.body, secret) {
			t.Fatalf("the view carries a secret: %s", a.body)
		}
	}
	var listed struct {
		Edges []struct {
			ID          string `json:"id"`
			Connected   bool   `json:"connected"`
			NodesOnline int    `json:"nodes_online"`
			Nodes       []struct {
				ID string `json:"id"`
			} `json:"nodes"`
		} `json:"edges"`
	}
	json.Unmarshal([]byte(a.body), &listed)
	if len(listed.Edges) != 3 || listed.Edges[0].ID != "e1" || !listed.Edges[0].Connected || listed.Edges[0].NodesOnline != 1 || listed.Edges[0].Nodes[0].ID != "n-e1" {
		t.Fatalf("list: %s", a.body)
	}
	// The flag's other spellings: nodes only when it is on.
	for q, want := range map[string]bool{"": false, "?nodes=0": false, "?nodes=false": false, "?nodes": true, "?nodes=true": true} {
		a := do(t, c, h.url, apiCall{method: "GET", path: "/api/edges" + q, header: bearer(operatorToken)})
		listed.Edges = nil
		json.Unmarshal([]byte(a.body), &listed)
		if a.status != 200 || len(listed.Edges) != 3 || (len(listed.Edges[0].Nodes) > 0) != want {
			t.Errorf("GET /api/edges%s: %d, want nodes %v: %s", q, a.status, want, a.body)
		}
	}
	call = refresh
	call.header = bearer(operatorToken)
	if a := do(t, c, h.url, call); a.status != 200 || a.json(t)["outcome"] != "succeeded" {
		t.Fatalf("bearer command: %d %s", a.status, a.body)
	}

	// Sign-in: a wrong token, a cross-site attempt, then the right one.
	jar, _ := cookiejar.New(nil)
	bc := &http.Client{Jar: jar}
	if a := do(t, bc, h.url, apiCall{method: "POST", path: "/api/login", body: `{"token":"nope"}`}); a.status != 401 || a.header.Get("Set-Cookie") != "" {
		t.Fatalf("login with a wrong token: %d %v", a.status, a.header)
	}
	if a := do(t, bc, h.url, apiCall{method: "POST", path: "/api/login", body: `{"token":"` + operatorToken + `"}`,
		header: map[string]string{"Origin": "https://evil.example"}}); a.status != 403 {
		t.Fatalf("cross-site login: %d", a.status)
	}
	a = do(t, bc, h.url, apiCall{method: "POST", path: "/api/login", body: `{"token":"` + operatorToken + `"}`})
	if a.status != 200 {
		t.Fatalf("login: %d %s", a.status, a.body)
	}
	ck := a.header.Get("Set-Cookie")
	if !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") || strings.Contains(ck, operatorToken) {
		t.Fatalf("session cookie %q", ck)
	}
	csrf, _ := a.json(t)["csrf"].(string)
	if len(csrf) < 32 {
		t.Fatalf("csrf token %q", csrf)
	}
	if a := do(t, bc, h.url, apiCall{method: "GET", path: "/api/session"}); a.status != 200 || a.json(t)["operator"] != "alice" || a.json(t)["csrf"] != csrf {
		t.Fatalf("session: %d %s", a.status, a.body)
	}
	if a := do(t, bc, h.url, list); a.status != 200 {
		t.Fatalf("cookie list: %d", a.status)
	}
	// The session cookie sent twice, the real one first or second (a
	// sibling site may set one for the parent domain), signs no one in.
	u, _ := url.Parse(h.url)
	real := jar.Cookies(u)[0]
	for _, cookies := range []string{real.Name + "=" + real.Value + "; " + real.Name + "=planted", real.Name + "=planted; " + real.Name + "=" + real.Value} {
		if a := do(t, c, h.url, apiCall{method: "GET", path: "/api/edges", header: map[string]string{"Cookie": cookies}}); a.status != 401 {
			t.Errorf("session cookie twice (%.30s...): %d, want 401", cookies, a.status)
		}
	}
	origin := h.url
	for name, hdr := range map[string]map[string]string{
		"no csrf token":      {"Origin": origin},
		"wrong csrf token":   {"Origin": origin, "X-CSRF-Token": strings.Repeat("0", len(csrf))},
		"cross-site origin":  {"Origin": "https://evil.example", "X-CSRF-Token": csrf},
		"cross-site fetch":   {"Sec-Fetch-Site": "cross-site", "X-CSRF-Token": csrf},
		"origin, other port": {"Origin": "http://127.0.0.1:1", "X-CSRF-Token": csrf},
	} {
		call := refresh
		call.header = hdr
		if a := do(t, bc, h.url, call); a.status != 403 {
			t.Errorf("cookie command, %s: %d %s", name, a.status, a.body)
		}
	}
	call = refresh
	call.header = map[string]string{"Origin": origin, "X-CSRF-Token": csrf}
	if a := do(t, bc, h.url, call); a.status != 200 {
		t.Fatalf("cookie command with its csrf token: %d %s", a.status, a.body)
	}

	// Sign-out ends the session at the server, not only in the browser.
	saved := jar.Cookies(u)
	if a := do(t, bc, h.url, apiCall{method: "POST", path: "/api/logout", header: map[string]string{"Origin": origin, "X-CSRF-Token": csrf}}); a.status != 200 {
		t.Fatalf("logout: %d", a.status)
	}
	replay, _ := http.NewRequest("GET", h.url+"/api/edges", nil)
	for _, k := range saved {
		replay.AddCookie(k)
	}
	resp, err := c.Do(replay)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("a signed-out session cookie still works: %d", resp.StatusCode)
	}
}

// TestOperatorAPIErrors: bad input gets a typed error and changes nothing;
// a known route asked with another method gets 405 with Allow.
func TestOperatorAPIErrors(t *testing.T) {
	h := startHub(t, "", nil)
	e1 := startEdge(t, "e1", h.addr, nil)
	e1.startNode()
	waitFor(t, "n-e1 online", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return n.Connected })
	c := &http.Client{}
	auth := bearer(operatorToken)
	code := func(a apiAnswer) string {
		var m struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
			Rejection string `json:"rejection"`
		}
		json.Unmarshal([]byte(a.body), &m)
		if m.Rejection != "" {
			return m.Rejection
		}
		return m.Error.Code
	}
	for _, tc := range []struct {
		call   apiCall
		status int
		code   string
	}{
		{apiCall{method: "GET", path: "/api/nothing"}, 404, "not_found"},
		{apiCall{method: "GET", path: "/api/edges/ghost"}, 404, "not_found"},
		{apiCall{method: "GET", path: "/api/edges/e1/commands"}, 405, "method_not_allowed"},
		{apiCall{method: "DELETE", path: "/api/edges/e1"}, 405, "method_not_allowed"},
		{apiCall{method: "GET", path: "/api/edges/e3?refresh=1"}, 409, "edge_offline"},
		{apiCall{method: "GET", path: "/api/edges/e3?refresh=true"}, 409, "edge_offline"},
		// A query holds only the route's flags, once, as booleans: a typo
		// must not read as false (here: the cached view of an offline Edge).
		{apiCall{method: "GET", path: "/api/edges/e3?refresh=yes"}, 400, "invalid_query"},
		{apiCall{method: "GET", path: "/api/edges/e3?refersh=1"}, 400, "invalid_query"},
		{apiCall{method: "GET", path: "/api/edges/e3?refresh=1&refresh=0"}, 400, "invalid_query"},
		{apiCall{method: "GET", path: "/api/edges/e3?refresh=%zz"}, 400, "invalid_query"},
		{apiCall{method: "GET", path: "/api/edges?nodes=2"}, 400, "invalid_query"},
		{apiCall{method: "GET", path: "/api/edges?refresh=1"}, 400, "invalid_query"},
		{apiCall{method: "GET", path: "/api/events?nodes=1"}, 400, "invalid_query"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands?dry_run=1", body: `{"operation":"config.refresh"}`}, 400, "invalid_query"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"config.refresh","extra":1}`}, 400, "invalid_body"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":`}, 400, "invalid_body"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"config.refresh"}{}`}, 400, "invalid_body"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"config.refresh"}}`}, 400, "invalid_body"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"config.refresh"}]`}, 400, "invalid_body"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"config.refresh"} x`}, 400, "invalid_body"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"` + strings.Repeat("x", 20<<10) + `"}`}, 400, "invalid_body"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"node.schedule"}`}, 400, "unknown_operation"},
		{apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"node.drain","node_id":"ghost"}`}, 404, "not_found"},
		{apiCall{method: "POST", path: "/api/edges/ghost/commands", body: `{"operation":"config.refresh"}`}, 404, "not_found"},
		{apiCall{method: "POST", path: "/api/edges/e3/commands", body: `{"operation":"config.refresh"}`}, 409, "edge_offline"},
	} {
		tc.call.header = auth
		a := do(t, c, h.url, tc.call)
		if a.status != tc.status || code(a) != tc.code {
			t.Errorf("%s %.60s %.40s: %d %q, want %d %q (%s)", tc.call.method, tc.call.path, tc.call.body, a.status, code(a), tc.status, tc.code, a.body)
		}
	}
	// 405 names what the route does serve.
	if a := do(t, c, h.url, apiCall{method: "PUT", path: "/api/login", header: auth}); a.status != 405 || a.header.Get("Allow") != "POST" {
		t.Errorf("PUT /api/login: %d, Allow %q", a.status, a.header.Get("Allow"))
	}
	// A body that is not JSON by its declared type.
	req, _ := http.NewRequest("POST", h.url+"/api/edges/e1/commands", strings.NewReader(`{"operation":"config.refresh"}`))
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	req.Header.Set("Content-Type", "text/plain")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain body: %d", resp.StatusCode)
	}
	// Nothing above reached the Edge as a command.
	if v, _ := h.hub.Edge("e1"); v.ConfigRevision != 1 {
		t.Fatalf("a refused request changed the edge: revision %d", v.ConfigRevision)
	}
}

// TestStatusPageAssets: the page and its assets are served without a
// credential, under a strict content security policy, and carry no data.
func TestStatusPageAssets(t *testing.T) {
	h := startHub(t, "", nil)
	c := &http.Client{}
	for path, ctype := range map[string]string{"/": "text/html", "/app.js": "text/javascript", "/style.css": "text/css"} {
		a := do(t, c, h.url, apiCall{method: "GET", path: path})
		if a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), ctype) {
			t.Errorf("%s: %d %q", path, a.status, a.header.Get("Content-Type"))
		}
		csp := a.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		if a.header.Get("X-Content-Type-Options") != "nosniff" || a.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, a.header)
		}
		if strings.Contains(a.body, "e1") && path == "/" {
			t.Errorf("the page itself carries edge data")
		}
	}
	if a := do(t, c, h.url, apiCall{method: "GET", path: "/index.html"}); a.status != 404 {
		t.Errorf("/index.html: %d", a.status)
	}
}

// unwrapOnly is a middleware's writer that offers Flush only through
// Unwrap, as http.ResponseController expects of wrappers.
type unwrapOnly struct{ w http.ResponseWriter }

func (u unwrapOnly) Header() http.Header         { return u.w.Header() }
func (u unwrapOnly) WriteHeader(code int)        { u.w.WriteHeader(code) }
func (u unwrapOnly) Write(p []byte) (int, error) { return u.w.Write(p) }
func (u unwrapOnly) Unwrap() http.ResponseWriter { return u.w }

// TestEventStreamThroughUnwrap: the Handler mounted behind a middleware
// whose writer flushes only by Unwrap still streams events (it answered
// 500 "this server cannot stream"), and a writer that cannot flush at all
// still gets that 500.
func TestEventStreamThroughUnwrap(t *testing.T) {
	h := startHub(t, "", nil)
	for _, tc := range []struct {
		name   string
		wrap   func(http.ResponseWriter) http.ResponseWriter
		status int
	}{
		{"unwrap", func(w http.ResponseWriter) http.ResponseWriter { return unwrapOnly{w} }, http.StatusOK},
		{"no flush", func(w http.ResponseWriter) http.ResponseWriter { return struct{ http.ResponseWriter }{w} }, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.hub.Handler().ServeHTTP(tc.wrap(w), r)
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events/stream", nil)
			req.Header.Set("Authorization", "Bearer "+operatorToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status != http.StatusOK {
				return
			}
			// The stream's first line arrives while the stream stays open:
			// it was flushed.
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if err != nil || line != "retry: 2000\n" {
				t.Fatalf("first line %q, %v", line, err)
			}
		})
	}
}

// TestOperatorStreams: a command followed as SSE shows its phases in
// order; the event stream carries the Node's transitions.
func TestOperatorStreams(t *testing.T) {
	h := startHub(t, "", nil)
	e1 := startEdge(t, "e1", h.addr, nil)
	waitFor(t, "e1 connected", func() bool { v, _ := h.hub.Edge("e1"); return v.Connected })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/api/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := sseReader(resp.Body)
	e1.startNode()
	awaitEvent(t, "the events stream", events, "node_ready", `"node_id":"n-e1"`)

	cresp := commandStream(t, ctx, h.url, operatorToken, `{"operation":"node.capabilities","node_id":"n-e1"}`)
	next := sseReader(cresp.Body)
	var seen []string
	var result string
	for {
		typ, data, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal([]byte(data), &m)
		if typ == "phase" {
			seen = append(seen, m["phase"].(string))
			if m["phase"] == "succeeded" {
				result = data
			}
		} else {
			seen = append(seen, typ)
		}
	}
	if strings.Join(seen, ",") != "accepted,accepted,running,succeeded" {
		t.Fatalf("command stream: %v", seen)
	}
	if !strings.Contains(result, `"capabilities"`) || !strings.Contains(result, "p-e1") {
		t.Fatalf("capabilities result: %s", result)
	}
}

// awaitEvent reads the events of stream name until one of type typ whose
// data holds substr; the stream's end fails the test.
func awaitEvent(t *testing.T, name string, next func() (string, string, error), typ, substr string) {
	t.Helper()
	for {
		got, data, err := next()
		if err != nil {
			t.Fatalf("%s ended before a %s event with %s: %v", name, typ, substr, err)
		}
		if got == typ && strings.Contains(data, substr) {
			return
		}
	}
}

// sseReader returns the events of a text/event-stream body one by one.
func sseReader(r io.Reader) func() (typ, data string, err error) {
	br := bufio.NewReader(r)
	return func() (string, string, error) {
		var typ, data string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return "", "", err
			}
			line = strings.TrimRight(line, "\r\n")
			switch {
			case line == "":
				if data != "" || typ != "" {
					return typ, data, nil
				}
			case strings.HasPrefix(line, "event: "):
				typ = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				data += line[len("data: "):]
			}
		}
	}
}

// TestHubReload: Edges and operators change without a restart; a removed
// Edge is disconnected and leaves the view, a removed operator's bearer
// token and page session stop working at once.
func TestHubReload(t *testing.T) {
	cfg := func(edges []string, ops ...controlplane.Operator) controlplane.Config {
		c := controlplane.Config{Operators: ops, ProbeTimeout: 500 * time.Millisecond}
		for _, id := range edges {
			c.Edges = append(c.Edges, controlplane.EdgeRecord{ID: id, TokenHash: controlplane.HashToken(edgeToken(id))})
		}
		return c
	}
	alice := controlplane.Operator{Name: "alice", TokenHash: controlplane.HashToken(operatorToken)}
	const bobToken = "bob-token-0123456789abcdef0123456789"
	bob := controlplane.Operator{Name: "bob", TokenHash: controlplane.HashToken(bobToken)}
	h := startHub(t, "", func(c *controlplane.Config) { *c = cfg([]string{"e1", "e2"}, alice, bob) })
	startEdge(t, "e1", h.addr, nil)
	startEdge(t, "e2", h.addr, nil)
	waitFor(t, "both edges", func() bool {
		a, _ := h.hub.Edge("e1")
		b, _ := h.hub.Edge("e2")
		return a.Connected && b.Connected
	})
	jar, _ := cookiejar.New(nil)
	bc := &http.Client{Jar: jar}
	if a := do(t, bc, h.url, apiCall{method: "POST", path: "/api/login", body: `{"token":"` + bobToken + `"}`}); a.status != 200 {
		t.Fatalf("bob login: %d", a.status)
	}
	if err := h.hub.Reload(cfg([]string{"e/1"})); err == nil {
		t.Fatal("an invalid configuration was taken")
	}
	// Who may connect is fixed at New: a reload that would change it is
	// refused, never taken in part (e2 would have gone).
	mtls := cfg([]string{"e1"}, alice)
	mtls.OperatorMTLS = true
	tlsOn := cfg([]string{"e1"}, alice)
	tlsOn.TLS = &tls.Config{Certificates: []tls.Certificate{testpki.NewCA(t, "hub").Issue(t, testpki.Leaf{})}}
	for _, c := range []controlplane.Config{mtls, tlsOn} {
		if err := h.hub.Reload(c); !errors.Is(err, controlplane.ErrFixedAtNew) {
			t.Fatalf("a reload changing who may connect: %v, want ErrFixedAtNew", err)
		}
	}
	if b, _ := h.hub.Edge("e2"); !b.Connected {
		t.Fatal("a refused reload changed the hub")
	}
	// e2 and bob go, e4 comes.
	if err := h.hub.Reload(cfg([]string{"e1", "e4"}, alice)); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.hub.Edge("e2"); ok {
		t.Fatal("a removed edge is still in the view")
	}
	if e4, ok := h.hub.Edge("e4"); !ok || e4.Connected {
		t.Fatalf("the new edge: %+v %v", e4, ok)
	}
	if a, _ := h.hub.Edge("e1"); !a.Connected {
		t.Fatal("an unchanged edge was disturbed")
	}
	c := &http.Client{}
	call := apiCall{method: "GET", path: "/api/edges", header: bearer(bobToken)}
	if a := do(t, c, h.url, call); a.status != 401 {
		t.Fatalf("a removed operator's token: %d", a.status)
	}
	if a := do(t, bc, h.url, apiCall{method: "GET", path: "/api/edges"}); a.status != 401 {
		t.Fatalf("a removed operator's session: %d", a.status)
	}
	call.header = bearer(operatorToken)
	if a := do(t, c, h.url, call); a.status != 200 || strings.Contains(a.body, `"e2"`) {
		t.Fatalf("alice after the reload: %d %s", a.status, a.body)
	}
}

// TestHubReloadRotatesTLS: a reload with a renewed certificate (here, of
// another CA) serves it to the next Edge connections, with no restart.
func TestHubReloadRotatesTLS(t *testing.T) {
	oldCA, newCA := testpki.NewCA(t, "old"), testpki.NewCA(t, "new")
	cfg := func(ca *testpki.CA) controlplane.Config {
		return controlplane.Config{
			Edges:     []controlplane.EdgeRecord{{ID: "e1", TokenHash: controlplane.HashToken(edgeToken("e1"))}},
			Operators: []controlplane.Operator{{Name: "alice", TokenHash: controlplane.HashToken(operatorToken)}},
			TLS:       &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testpki.Leaf{})}},
		}
	}
	hub, err := controlplane.New(cfg(oldCA))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error, 1)
	go func() { done <- hub.ServeEdges(ln) }()
	defer func() { hub.Close(); <-done }()
	trusts := func(ca *testpki.CA) bool {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", NextProtos: []string{wire.ALPN}})
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	if !trusts(oldCA) || trusts(newCA) {
		t.Fatal("at start: not the configured certificate")
	}
	if err := hub.Reload(cfg(newCA)); err != nil {
		t.Fatal(err)
	}
	if !trusts(newCA) || trusts(oldCA) {
		t.Fatal("after the reload: not the renewed certificate")
	}
}

// TestOperatorMTLS: with OperatorMTLS, a client certificate the operator
// server verified signs an operator in by its common name, and being a
// credential the browser attaches by itself it needs the CSRF token for a
// command. A workload's certificate (one with a SPIFFE ID: an Edge's from
// the Edge CA, or one from the operator CA itself) is not an operator's.
func TestOperatorMTLS(t *testing.T) {
	edgeCA, err := identity.NewCA("iop.test", 0)
	if err != nil {
		t.Fatal(err)
	}
	opCA := testpki.NewCA(t, "operators")
	h := startHub(t, "", func(c *controlplane.Config) { c.OperatorMTLS = true })
	startEdge(t, "e1", h.addr, nil)
	waitFor(t, "e1 connected", func() bool { e, _ := h.hub.Edge("e1"); return e.Connected })

	// The operator server trusts both CAs, as one that shares a CA file
	// with the Edge listener would.
	roots := opCA.Pool.Clone()
	roots.AddCert(edgeCA.Cert)
	srv := httptest.NewUnstartedServer(h.hub.Handler())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{opCA.Issue(t, testpki.Leaf{})}, ClientCAs: roots, ClientAuth: tls.VerifyClientCertIfGiven}
	srv.StartTLS()
	defer srv.Close()
	client := func(cert tls.Certificate) *http.Client {
		tc := &tls.Config{RootCAs: opCA.Pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}}
		return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
	}
	edgeCert := workloadCert(t, edgeCA, identity.KindEdge, "e1", identity.Options{})
	list := apiCall{method: "GET", path: "/api/edges"}
	for name, cert := range map[string]tls.Certificate{
		"an Edge's certificate":                         edgeCert,
		"a workload's certificate from the operator CA": opCA.Issue(t, testpki.Leaf{CommonName: "svc", URIs: []string{"spiffe://iop.test/node/n1"}}),
	} {
		if a := do(t, client(cert), srv.URL, list); a.status != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, a.status)
		}
	}

	carol := client(opCA.Issue(t, testpki.Leaf{CommonName: "carol"}))
	a := do(t, carol, srv.URL, apiCall{method: "GET", path: "/api/session"})
	if a.status != 200 || a.json(t)["operator"] != "carol" {
		t.Fatalf("carol's session: %d %s", a.status, a.body)
	}
	csrf, _ := a.json(t)["csrf"].(string)
	if a := do(t, carol, srv.URL, list); a.status != 200 || !strings.Contains(a.body, `"e1"`) {
		t.Fatalf("carol lists the edges: %d %s", a.status, a.body)
	}
	refresh := apiCall{method: "POST", path: "/api/edges/e1/commands", body: `{"operation":"config.refresh"}`}
	if a := do(t, carol, srv.URL, refresh); a.status != http.StatusForbidden {
		t.Fatalf("a command by certificate without the CSRF token: %d, want 403", a.status)
	}
	refresh.header = map[string]string{"X-CSRF-Token": csrf}
	if a := do(t, carol, srv.URL, refresh); a.status != 200 || a.json(t)["outcome"] != "succeeded" {
		t.Fatalf("a command by certificate with the CSRF token: %d %s", a.status, a.body)
	}

	// An event stream opened with a certificate ends when it expires, not
	// at the next keep-alive (15 s; the deadline here is shorter).
	dave := client(opCA.Issue(t, testpki.Leaf{CommonName: "dave", NotAfter: time.Now().Add(2 * time.Second)}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events/stream", nil)
	resp, err := dave.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("dave's event stream: %d", resp.StatusCode)
	}
	for next := sseReader(resp.Body); ; {
		if _, _, err := next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("dave's event stream, as his certificate expires: %v, want its end", err)
		}
	}
}

// TestEventStreamEndsWithItsCredential: an open event stream lasts only
// as long as the credential that opened it still signs in. Signing out
// ends the session's stream; a reload that removes an operator ends its
// bearer token's and its session's streams, before the next event; a
// stream whose credential is untouched goes on and carries that event.
func TestEventStreamEndsWithItsCredential(t *testing.T) {
	const bobToken = "bob-token-0123456789abcdef0123456789"
	alice := controlplane.Operator{Name: "alice", TokenHash: controlplane.HashToken(operatorToken)}
	bob := controlplane.Operator{Name: "bob", TokenHash: controlplane.HashToken(bobToken)}
	var cfg controlplane.Config
	h := startHub(t, "", func(c *controlplane.Config) { c.Operators = []controlplane.Operator{alice, bob}; cfg = *c })
	e1 := startEdge(t, "e1", h.addr, nil)
	waitFor(t, "e1 connected", func() bool { v, _ := h.hub.Edge("e1"); return v.Connected })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// signIn returns a client holding token's page session, and its CSRF
	// token.
	signIn := func(token string) (*http.Client, string) {
		jar, _ := cookiejar.New(nil)
		c := &http.Client{Jar: jar}
		a := do(t, c, h.url, apiCall{method: "POST", path: "/api/login", body: `{"token":"` + token + `"}`})
		if a.status != 200 {
			t.Fatalf("login: %d %s", a.status, a.body)
		}
		csrf, _ := a.json(t)["csrf"].(string)
		return c, csrf
	}
	// open starts an event stream and returns its reader.
	open := func(c *http.Client, header map[string]string) func() (string, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", h.url+"/api/events/stream", nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 {
			t.Fatalf("event stream: %d", resp.StatusCode)
		}
		return sseReader(resp.Body)
	}
	// ends reads a stream to its end, failing on any event.
	ends := func(name string, next func() (string, string, error)) {
		t.Helper()
		typ, data, err := next()
		if err != io.EOF {
			t.Fatalf("%s: %q %s %v, want the stream to end", name, typ, data, err)
		}
	}
	aliceWeb, aliceCSRF := signIn(operatorToken)
	bobWeb, _ := signIn(bobToken)
	aliceSession := open(aliceWeb, nil)
	aliceBearer := open(http.DefaultClient, bearer(operatorToken))
	bobSession := open(bobWeb, nil)
	bobBearer := open(http.DefaultClient, bearer(bobToken))

	if a := do(t, aliceWeb, h.url, apiCall{method: "POST", path: "/api/logout", header: map[string]string{"X-CSRF-Token": aliceCSRF}}); a.status/100 != 2 {
		t.Fatalf("logout: %d %s", a.status, a.body)
	}
	ends("alice's session after she signed out", aliceSession)

	cfg.Operators = []controlplane.Operator{alice}
	if err := h.hub.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	e1.startNode() // the next event
	ends("bob's session after a reload removed him", bobSession)
	ends("bob's bearer stream after a reload removed him", bobBearer)
	awaitEvent(t, "alice's bearer stream", aliceBearer, "node_ready", `"node_id":"n-e1"`)
}

// TestCommandStream: a command's phases streamed to an operator are kept
// alive while the command is silent (a drain waiting on a held request
// reports nothing new), and the stream ends, before its terminal phase,
// when a reload removes the operator; the node stays draining.
// Before, the stream wrote nothing between phases, which a proxy's idle
// timeout cut, and outlived the operator's removal.
func TestCommandStream(t *testing.T) {
	const bobToken = "bob-token-0123456789abcdef0123456789"
	alice := controlplane.Operator{Name: "alice", TokenHash: controlplane.HashToken(operatorToken)}
	bob := controlplane.Operator{Name: "bob", TokenHash: controlplane.HashToken(bobToken)}
	var cfg controlplane.Config
	h := startHub(t, "", func(c *controlplane.Config) {
		c.Operators = []controlplane.Operator{alice, bob}
		c.KeepAlive = 100 * time.Millisecond
		cfg = *c
	})
	release := make(chan struct{})
	defer close(release)
	e1 := startEdge(t, "e1", h.addr, func(r *upstreamtest.Request) upstreamtest.Script {
		if strings.Contains(r.Prompt, "hold") {
			<-release
		}
		return upstreamtest.Echo(r)
	})
	e1.startNode()
	waitFor(t, "n-e1 online", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return onlineWithCapacity(n) })
	held := holdRequest(t, e1)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := commandStream(t, ctx, h.url, bobToken, `{"operation":"node.drain","node_id":"n-e1"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("drain: %d", resp.StatusCode)
	}
	// line reads the stream a line at a time, comments included.
	br := bufio.NewReader(resp.Body)
	line := func() (string, error) {
		l, err := br.ReadString('\n')
		return strings.TrimRight(l, "\r\n"), err
	}
	var phases []string
	for keepAlives := 0; keepAlives < 3; {
		l, err := line()
		if err != nil {
			t.Fatalf("after phases %v and %d keep-alives: %v", phases, keepAlives, err)
		}
		switch {
		case l == ": keep-alive":
			keepAlives++
		case strings.HasPrefix(l, "data: "):
			phases = append(phases, l)
		}
	}
	if !slices.ContainsFunc(phases, func(p string) bool { return strings.Contains(p, `"in_flight":1`) }) {
		t.Fatalf("phases before the keep-alives: %v, want the drain's progress with the held request", phases)
	}

	cfg.Operators = []controlplane.Operator{alice}
	if err := h.hub.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	for {
		l, err := line()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("bob's command stream after a reload removed him: %v", err)
		}
		if strings.HasPrefix(l, "data: ") {
			t.Fatalf("bob's command stream after a reload removed him: %q", l)
		}
	}
	if n, _ := nodeView(h.hub, "e1", "n-e1"); !n.Draining {
		t.Fatal("the node left draining with the command's stream")
	}
	release <- struct{}{}
	if code := <-held; code != 200 {
		t.Fatalf("the held request: %d", code)
	}
}
