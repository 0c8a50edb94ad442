// Package cors answers cross-origin (CORS) requests for an HTTP API that
// browser pages on listed origins may call directly: preflights are
// answered before the API's own handlers (a browser sends them without
// credentials), and answers carry Access-Control-Allow-Origin and expose
// the headers a page's script may read. No answer allows credentials
// (cookies); an API key travels in a header the page sets itself.
//
// The package is kept apart from the Edge so that its decoder of
// untrusted header lists is fuzzed in a small test binary.
package cors

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/iop-dev/iop/internal/h1"
	"github.com/iop-dev/iop/internal/httpmux"
)

// MaxAge is how long, in seconds, a browser may cache a preflight's answer
// (Chromium caps it at 7200).
const MaxAge = "7200"

// maxHeaderList bounds a preflight's Access-Control-Request-Headers.
const maxHeaderList = 4 << 10

// Policy is a validated list of origins. The nil *Policy allows none.
type Policy struct {
	any     bool // "*": every origin
	origins map[string]bool
}

// OriginError says why an entry of an origin list was refused.
type OriginError struct {
	Index  int    // the entry's place in the list
	Origin string // the entry as given
	Reason string
}

func (e *OriginError) Error() string { return fmt.Sprintf("%q: %s", e.Origin, e.Reason) }

// NewPolicy checks origins: each exactly as a browser sends it in the
// Origin header (http or https, a lower-case host, a port only when not
// the scheme's default, nothing after), or "*" alone for every origin.
// Any other spelling would never match, so it is refused with an
// *OriginError rather than ignored; so is "null" (sandboxed frames, file
// pages), which any page can send. An empty list gives the nil Policy.
func NewPolicy(origins []string) (*Policy, error) {
	if len(origins) == 0 {
		return nil, nil
	}
	p := &Policy{origins: make(map[string]bool, len(origins))}
	for i, o := range origins {
		if o == "*" {
			if len(origins) > 1 {
				return nil, &OriginError{i, o, "allows every origin and must stand alone"}
			}
			p.any = true
			continue
		}
		if reason := checkOrigin(o); reason != "" {
			return nil, &OriginError{i, o, reason}
		}
		if p.origins[o] {
			return nil, &OriginError{i, o, "duplicate"}
		}
		p.origins[o] = true
	}
	return p, nil
}

// checkOrigin returns why o is not an origin as browsers send it, or "".
func checkOrigin(o string) string {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return fmt.Sprintf("not an origin: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "an origin is http:// or https:// and a host"
	case u.Host == "" || u.User != nil || u.Opaque != "":
		return "an origin is scheme://host[:port]"
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(o, "#"):
		return "an origin has no path, query or fragment (not even a trailing /)"
	case (u.Scheme == "http" && u.Port() == "80") || (u.Scheme == "https" && u.Port() == "443"):
		return "browsers send the origin without its default port"
	case strings.HasSuffix(u.Host, ":"):
		return "empty port"
	case o != strings.ToLower(o):
		return "browsers send the origin in lower case"
	}
	return ""
}

func (p *Policy) allows(origin string) bool {
	return p.any || p.origins[origin]
}

// Handler adds CORS to Next for the paths under Prefix. Paths elsewhere
// (an operator's /metrics, say) never carry CORS headers, so that no page
// reads them through a visitor's browser.
type Handler struct {
	// Policy returns the policy in force, read on every request so that
	// a reload applies to new requests; nil means no CORS headers.
	Policy func() *Policy
	// Prefix is the path prefix CORS applies under, such as "/v1/".
	Prefix string
	// Expose is the Access-Control-Expose-Headers value: the answer
	// headers a page's script may read.
	Expose string
	// Served is Next's patterns without a catch-all (see
	// httpmux.Allowed): a preflight is answered with the methods it
	// serves the path with, and one for a path it does not serve is left
	// to Next.
	Served *http.ServeMux
	// Next serves every request that is not an answered preflight.
	Next http.Handler
}

func (c *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := c.Policy()
	if p == nil || !strings.HasPrefix(r.URL.Path, c.Prefix) {
		c.Next.ServeHTTP(w, r)
		return
	}
	h := w.Header()
	origin := r.Header.Get("Origin")
	if origin == "" || !p.allows(origin) {
		if !p.any {
			// Listed origins get another answer: a cache must not hand
			// this one to them.
			h.Add("Vary", "Origin")
		}
		c.Next.ServeHTTP(w, r)
		return
	}
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		// A preflight. One for a path Next does not serve, or asking for
		// headers that are not header names, is left to Next (404 or
		// 405, without CORS headers).
		allow := httpmux.Allowed(c.Served, r)
		reqHeaders, ok := HeaderList(r.Header.Values("Access-Control-Request-Headers"))
		if allow == "" || !ok {
			c.Next.ServeHTTP(w, r)
			return
		}
		h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
		setAllowOrigin(h, p, origin)
		h.Set("Access-Control-Allow-Methods", allow)
		if reqHeaders != "" {
			h.Set("Access-Control-Allow-Headers", reqHeaders)
		}
		h.Set("Access-Control-Max-Age", MaxAge)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if !p.any {
		h.Add("Vary", "Origin")
	}
	setAllowOrigin(h, p, origin)
	h.Set("Access-Control-Expose-Headers", c.Expose)
	c.Next.ServeHTTP(w, r)
}

func setAllowOrigin(h http.Header, p *Policy, origin string) {
	if p.any {
		h.Set("Access-Control-Allow-Origin", "*")
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
}

// HeaderList checks a preflight's Access-Control-Request-Headers values:
// comma-separated header names, which an answer may allow back (an API key
// travels in a header, and SDKs add their own). It returns them lower-cased
// and joined by ", " (empty names dropped); ok is false, and list empty,
// for anything but header names or for a list over 4 KiB.
func HeaderList(values []string) (list string, ok bool) {
	list = strings.Join(values, ",")
	if len(list) > maxHeaderList {
		return "", false
	}
	var names []string
	for name := range strings.SplitSeq(list, ",") {
		name = strings.Trim(name, " \t")
		if name == "" {
			continue
		}
		if !h1.IsToken(name) {
			return "", false
		}
		names = append(names, strings.ToLower(name))
	}
	return strings.Join(names, ", "), true
}
