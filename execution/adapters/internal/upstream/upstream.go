// Package upstream holds what every HTTP adapter shares: the header
// allow-lists of the raw tunnel, path allow-lists, the tunnel relay, and
// JSON requests with the Node's own credential.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/h1"
	"github.com/iop-dev/iop/internal/tunnelhdr"
)

// Route is one method and path an adapter's API allows through the tunnel.
// Path may end in "{id}" to allow one path segment of [A-Za-z0-9_-].
type Route struct {
	Method string
	Path   string
}

var idSegment = regexp.MustCompile(`^[A-Za-z0-9_-]{1,128}$`)

// Allowed reports whether method and path match one of routes exactly. A
// path with a query, a fragment, an escape, a dot segment or a doubled
// slash is never allowed.
func Allowed(routes []Route, method, path string) bool {
	if path == "" || path[0] != '/' || strings.ContainsAny(path, "?#%\\") || strings.Contains(path, "//") {
		return false
	}
	for _, seg := range strings.Split(path[1:], "/") {
		if seg == "." || seg == ".." || seg == "" {
			return false
		}
	}
	for _, r := range routes {
		if r.Method != method {
			continue
		}
		if prefix, ok := strings.CutSuffix(r.Path, "{id}"); ok {
			if rest, ok := strings.CutPrefix(path, prefix); ok && idSegment.MatchString(rest) {
				return true
			}
			continue
		}
		if r.Path == path {
			return true
		}
	}
	return false
}

// Client talks to one upstream base URL with the Node's credential. Make
// one with NewClient.
type Client struct {
	Base *url.URL
	base string // Base, formatted once
	HTTP *http.Client
	// rt, when set, is HTTP's transport, called directly: the client is
	// this package's own (no jar, no timeout, no redirect followed), so
	// http.Client.Do would only copy the header and wrap the error.
	rt http.RoundTripper
	// Auth sets the credential on a request (for example a Bearer token).
	Auth func(ctx context.Context, r *http.Request) error
	// v1, when set, replaces the "/v1" that begins a request's path (see
	// SetAPIPath).
	v1 string
}

// SetAPIPath says where the API whose paths begin with "/v1" lives under
// Base on this server: every such path is sent with p in place of its
// "/v1" ("/" puts the API at Base itself). Gemini's OpenAI-compatible
// API, for one, lives under /v1beta/openai. p must be an absolute path
// without query, fragment, dot segments or escapes.
func (c *Client) SetAPIPath(p string) error {
	if !validAPIPath(p) {
		return fmt.Errorf("upstream: API path %q must be an absolute path like /v1beta/openai: segments of letters, digits and - _ . ~, no dot segments, query or escapes", p)
	}
	c.v1 = strings.TrimSuffix(p, "/")
	if c.v1 == "" {
		c.v1 = "/" // the API at Base: the "/" that follows "/v1" stays
	}
	return nil
}

func validAPIPath(p string) bool {
	if p == "/" {
		return true
	}
	if !strings.HasPrefix(p, "/") {
		return false
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p[1:], "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, r := range seg {
			if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_.~", r)) {
				return false
			}
		}
	}
	return true
}

// NewClient parses base (scheme http or https, no query) and returns a
// Client. A nil httpClient means a dedicated one with no overall timeout
// (a run ends on its context only) over defaultTransport.
func NewClient(base string, httpClient *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("upstream: base URL %q must be http(s)://host[:port][/path] without credentials or query", base)
	}
	var rt http.RoundTripper
	if httpClient == nil {
		rt = defaultTransport(u)
		httpClient = &http.Client{Transport: rt}
	}
	// Never follow redirects: a 3xx from an upstream goes back as it is,
	// so a credential is never replayed to another host.
	c := *httpClient
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{Base: u, HTTP: &c, base: u.String(), rt: rt}, nil
}

// defaultTransport is the transport of a Client made without one. A plain
// http upstream no proxy applies to (a model server on the Node's machine
// or network) gets h1's transport, which runs an exchange on the caller's
// goroutine; https and proxied upstreams get net/http's. Neither has an
// overall or response-header timeout: prefill may be long, and the run's
// context decides.
func defaultTransport(base *url.URL) http.RoundTripper {
	if base.Scheme == "http" {
		if p, err := http.ProxyFromEnvironment(&http.Request{URL: base}); err == nil && p == nil {
			return &h1.Transport{MaxIdleConnsPerHost: 256}
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256
	tr.ResponseHeaderTimeout = 0
	return tr
}

// CloseIdleConnections closes the idle connections of the transport
// NewClient made; a caller's own client is left to its owner.
func (c *Client) CloseIdleConnections() {
	if c.rt != nil {
		c.HTTP.CloseIdleConnections()
	}
}

// URL joins path to the base.
func (c *Client) URL(path string) string {
	if c.v1 == "" {
		return c.base + path
	}
	rest, ok := strings.CutPrefix(path, "/v1")
	if !ok || (rest != "" && rest[0] != '/' && rest[0] != '?') {
		return c.base + path // not the API's path ("/v10/...", "/api/...")
	}
	prefix := c.v1
	if prefix == "/" { // the API at Base: its paths keep one "/"
		prefix = ""
		if !strings.HasPrefix(rest, "/") {
			rest = "/" + rest
		}
	}
	return c.base + prefix + rest
}

// Do sends a request with the Node's credential.
func (c *Client) Do(ctx context.Context, method, path string, header http.Header, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.URL(path), body)
	if err != nil {
		return nil, err
	}
	if len(header) > 0 {
		req.Header = make(http.Header, len(header)+1) // room for the credential
		for k, vs := range header {
			req.Header[k] = vs
		}
	}
	if c.Auth != nil {
		if err := c.Auth(ctx, req); err != nil {
			return nil, &execution.Failure{Class: execution.FailureUnavailable, Message: "upstream credential unavailable"}
		}
	}
	var resp *http.Response
	if c.rt != nil && c.HTTP.Transport == c.rt {
		resp, err = c.rt.RoundTrip(req)
	} else {
		resp, err = c.HTTP.Do(req)
	}
	if err != nil {
		return nil, transportFailure(ctx, err)
	}
	return resp, nil
}

func transportFailure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return execution.Classify(ctx, ctx.Err())
	}
	var f *execution.Failure
	if errors.As(err, &f) {
		return f
	}
	return &execution.Failure{Class: execution.FailureUnavailable, Message: "upstream unreachable"}
}

// PostJSON posts v and returns the response, mapping HTTP error statuses
// to failures (the body of an error is read, bounded, and dropped: it may
// echo the prompt).
func (c *Client) PostJSON(ctx context.Context, path string, header http.Header, v any) (*http.Response, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &execution.Failure{Class: execution.FailureInvalidRequest, Message: "cannot encode request"}
	}
	h := http.Header{"Content-Type": {"application/json"}}
	for k, vs := range header {
		h[k] = vs
	}
	resp, err := c.Do(ctx, http.MethodPost, path, h, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	if err := StatusFailure(resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// StatusFailure returns nil for a 2xx response and otherwise drains and
// closes it and returns a classified failure.
func StatusFailure(resp *http.Response) error {
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return &execution.Failure{Class: StatusClass(resp.StatusCode), Message: fmt.Sprintf("upstream answered %d", resp.StatusCode)}
}

// MaxAnswer bounds what an adapter reads of one answer: a whole answer,
// or the tool call arguments a stream accumulates, all calls together.
const MaxAnswer = 64 << 20

// DecodeAnswer reads a whole JSON answer of at most limit bytes into v.
// The answer must be one JSON object with nothing after it: null, an
// array, a truncated or a trailing-garbage body is malformed, never an
// empty success. A failure is classed Provider with a short note, or is
// ctx's own once ctx has ended (a cancelled read is not the provider's
// fault).
func DecodeAnswer(ctx context.Context, body io.Reader, limit int64, v any) error {
	fail := func(note string) error {
		if ctx.Err() != nil {
			return execution.Classify(ctx, ctx.Err())
		}
		return &execution.Failure{Class: execution.FailureProvider, Message: note}
	}
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	switch {
	case err != nil:
		return fail("upstream body broken")
	case int64(len(b)) > limit:
		return fail("upstream answer too large")
	}
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' || json.Unmarshal(b, v) != nil {
		return fail("malformed upstream answer")
	}
	return nil
}

// StatusClass is the failure class of an upstream's error status, or of
// the status an error reported inside a stream stands for: 429 is rate
// limited, 503 and 529 (Anthropic's overloaded) unavailable, 400, 404
// and 422 an invalid request; anything else the provider's own failure.
func StatusClass(status int) execution.FailureClass {
	switch status {
	case http.StatusTooManyRequests:
		return execution.FailureRateLimited
	case http.StatusServiceUnavailable, 529:
		return execution.FailureUnavailable
	case http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity:
		return execution.FailureInvalidRequest
	}
	return execution.FailureProvider
}

// Tunnel relays one raw exchange: the route must be allowed, the headers are
// filtered both ways, and the body streams as the upstream writes it.
func (c *Client) Tunnel(ctx context.Context, routes []Route, req *execution.TunnelRequest, w execution.TunnelWriter) error {
	if !Allowed(routes, req.Method, req.Path) {
		return &execution.Failure{Class: execution.FailureInvalidRequest, Message: "route not allowed: " + req.Method + " " + pathForLog(req.Path)}
	}
	var body io.Reader = http.NoBody
	if req.Body != nil && req.Method != http.MethodGet {
		body = req.Body
	}
	resp, err := c.Do(ctx, req.Method, req.Path, tunnelhdr.FilterRequest(req.Header), body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := w.WriteHead(resp.StatusCode, resp.Header); err != nil { // the writer filters
		return err
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return execution.Classify(ctx, ctx.Err())
			}
			return &execution.Failure{Class: execution.FailureProvider, Message: "upstream body broken"}
		}
	}
}

// copyBufs holds the tunnel copy buffers: one per call would be 32 KiB
// of garbage per request.
var copyBufs = sync.Pool{New: func() any {
	b := make([]byte, 32<<10)
	return &b
}}

func pathForLog(p string) string {
	if len(p) > 64 {
		return p[:64] + "..."
	}
	return p
}

// BearerAuth sets "Authorization: Bearer <secret>" from cred (nil: none).
func BearerAuth(cred execution.Credential) func(context.Context, *http.Request) error {
	return headerAuth(cred, "Authorization", "Bearer ")
}

// HeaderAuth sets header to the secret from cred (nil: none).
func HeaderAuth(cred execution.Credential, header string) func(context.Context, *http.Request) error {
	return headerAuth(cred, header, "")
}

// headerAuth sets header from the call's leased secret when the context
// carries one, otherwise from cred (nil: no header).
func headerAuth(cred execution.Credential, header, prefix string) func(context.Context, *http.Request) error {
	return func(ctx context.Context, r *http.Request) error {
		if leased, ok := execution.LeasedSecret(ctx); ok {
			r.Header.Set(header, prefix+string(leased))
			return nil
		}
		if cred == nil {
			return nil
		}
		s, err := cred.Secret(ctx)
		if err != nil {
			return err
		}
		r.Header.Set(header, prefix+s)
		return nil
	}
}

// CheckGET is a health check: GET path must answer 2xx within ctx.
func (c *Client) CheckGET(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := StatusFailure(resp); err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	return nil
}
