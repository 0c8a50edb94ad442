package edge

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/iop-dev/iop/internal/cors"
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

// corsExposed are the answer headers a page's script may read: the
// request ids both SDKs report, and the retry hints they obey.
const corsExposed = "Request-Id, X-Request-Id, Retry-After, Retry-After-Ms, X-Should-Retry, X-IOP-Token-Count"

// newCORSPolicy checks Config.CORSOrigins; nil for none.
func newCORSPolicy(origins []string) (*cors.Policy, error) {
	p, err := cors.NewPolicy(origins)
	if oe, ok := errors.AsType[*cors.OriginError](err); ok {
		return nil, fmt.Errorf("CORSOrigins[%d]: %w", oe.Index, err)
	}
	return p, err
}

// cors wraps the API's mux. served is the mux's patterns without its
// catch-all, to tell a preflight which methods a path takes.
func (s *Server) cors(next, served *http.ServeMux) http.Handler {
	return &cors.Handler{
		Policy: func() *cors.Policy { return s.snap.Load().cors },
		Prefix: "/v1/",
		Expose: corsExposed,
		Served: served,
		Next:   next,
	}
}
