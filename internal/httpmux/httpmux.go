// Package httpmux tells which methods a net/http ServeMux serves a path
// with, so that a handler of last resort can answer 405 Method Not Allowed
// with an Allow header in its API's own error shape, where the mux's own
// answer would be plain text.
package httpmux

import (
	"net/http"
	"strings"
)

// methods are the ones probed, in the order an Allow header lists them.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// Allowed returns the methods mux serves r's path (and host) with, as an
// Allow header's value ("GET, HEAD"), or "" when it serves the path with
// none. A pattern without a method serves every method. mux should hold
// no catch-all pattern ("/"), or every path is served.
func Allowed(mux *http.ServeMux, r *http.Request) string {
	var allow []string
	for _, m := range methods {
		probe := *r
		probe.Method = m
		if _, pattern := mux.Handler(&probe); pattern != "" {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}
