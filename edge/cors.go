package edge

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/iop-dev/iop/internal/h1"
	"github.com/iop-dev/iop/internal/httpmux"
)

// Cross-origin requests (CORS). With Config.CORSOrigins empty, the
// default, the Edge sends no CORS header and a browser page on another
// origin cannot read its answers. With origins listed, a page on one of
// them may call the API under /v1/ directly (the OpenAI and Anthropic
// JavaScript SDKs in a browser): preflights are answered before
// authentication, since a browser sends them without credentials, and
// answers carry Access-Control-Allow-Origin and expose the headers a
// client reads. The API key still travels in a header and is checked as
// always; no answer allows credentials (cookies), which the API never
// uses. /healthz, /readyz and /metrics are for operators, not pages: they
// never carry CORS headers, so that no page reads them through a
// visitor's browser.

// corsMaxAge is how long, in seconds, a browser may cache a preflight's
// answer (Chromium caps it at 7200).
const corsMaxAge = "7200"

// corsExposed are the answer headers a page's script may read: the
// request ids both SDKs report, and the retry hints they obey.
const corsExposed = "Request-Id, X-Request-Id, Retry-After, Retry-After-Ms, X-Should-Retry, X-IOP-Token-Count"

// corsPolicy is a validated Config.CORSOrigins.
type corsPolicy struct {
	any     bool // "*": every origin
	origins map[string]bool
}

// newCORSPolicy checks origins (see Config.CORSOrigins); nil for none.
func newCORSPolicy(origins []string) (*corsPolicy, error) {
	if len(origins) == 0 {
		return nil, nil
	}
	p := &corsPolicy{origins: make(map[string]bool, len(origins))}
	for i, o := range origins {
		if o == "*" {
			if len(origins) > 1 {
				return nil, fmt.Errorf("CORSOrigins[%d]: \"*\" allows every origin and must stand alone", i)
			}
			p.any = true
			continue
		}
		if err := validOrigin(o); err != nil {
			return nil, fmt.Errorf("CORSOrigins[%d]: %w", i, err)
		}
		if p.origins[o] {
			return nil, fmt.Errorf("CORSOrigins[%d]: duplicate %q", i, o)
		}
		p.origins[o] = true
	}
	return p, nil
}

// validOrigin accepts an origin exactly as a browser sends it in the
// Origin header: http or https, a lower-case host, a port only when it is
// not the scheme's default, and nothing after. Any other spelling would
// never match, so it is refused rather than silently ignored; "null"
// (sandboxed frames, file pages) is refused because any page can send it.
func validOrigin(o string) error {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not an origin: %v", o, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: an origin is http:// or https:// and a host", o)
	case u.Host == "" || u.User != nil || u.Opaque != "":
		return fmt.Errorf("%q: an origin is scheme://host[:port]", o)
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(o, "#"):
		return fmt.Errorf("%q: an origin has no path, query or fragment (not even a trailing /)", o)
	case (u.Scheme == "http" && u.Port() == "80") || (u.Scheme == "https" && u.Port() == "443"):
		return fmt.Errorf("%q: browsers send the origin without its default port", o)
	case strings.HasSuffix(u.Host, ":"):
		return fmt.Errorf("%q: empty port", o)
	case o != strings.ToLower(o):
		return fmt.Errorf("%q: browsers send the origin in lower case", o)
	}
	return nil
}

func (p *corsPolicy) allows(origin string) bool {
	return p.any || p.origins[origin]
}

// cors wraps the API's mux. served is the mux's patterns without its
// catch-all, to tell a preflight which methods a path takes.
func (s *Server) cors(next, served *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := s.snap.Load().cors
		if p == nil || !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		origin := r.Header.Get("Origin")
		if origin == "" || !p.allows(origin) {
			if !p.any {
				// Listed origins get another answer: a cache must not
				// hand this one to them.
				h.Add("Vary", "Origin")
			}
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			// A preflight. One for a path the Edge does not serve, or
			// asking for headers that are not header names, is left to
			// the mux: 404 or 405, without CORS headers.
			allow := httpmux.Allowed(served, r)
			reqHeaders, ok := headerList(r.Header.Values("Access-Control-Request-Headers"))
			if allow == "" || !ok {
				next.ServeHTTP(w, r)
				return
			}
			h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
			setAllowOrigin(h, p, origin)
			h.Set("Access-Control-Allow-Methods", allow)
			if reqHeaders != "" {
				h.Set("Access-Control-Allow-Headers", reqHeaders)
			}
			h.Set("Access-Control-Max-Age", corsMaxAge)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if !p.any {
			h.Add("Vary", "Origin")
		}
		setAllowOrigin(h, p, origin)
		h.Set("Access-Control-Expose-Headers", corsExposed)
		next.ServeHTTP(w, r)
	})
}

func setAllowOrigin(h http.Header, p *corsPolicy, origin string) {
	if p.any {
		h.Set("Access-Control-Allow-Origin", "*")
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
}

// headerList checks a preflight's Access-Control-Request-Headers: a
// comma-separated list of header names, which an answer may allow
// back verbatim (the key travels in a header: Authorization or x-api-key,
// and the SDKs add their own). ok is false for anything but header names,
// or for a list over 4 KiB.
func headerList(values []string) (list string, ok bool) {
	list = strings.Join(values, ",")
	if len(list) > 4<<10 {
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
