// Package tunnelhdr holds the header allow-lists of the raw provider
// tunnel, applied by the Edge before a request leaves and by the Node (the
// authority) before it reaches the upstream, and again on the way back.
package tunnelhdr

import (
	"net/http"
	"strings"
)

// requestHeaders may travel from a client to an upstream. Authorization,
// x-api-key, cookies, Host and hop-by-hop headers never do; the Node adds
// its own credential.
var requestHeaders = map[string]bool{
	"Content-Type":      true,
	"Accept":            true,
	"Anthropic-Version": true,
	"Anthropic-Beta":    true,
	"Openai-Beta":       true,
	"Idempotency-Key":   true,
}

// responseHeaders may travel back from an upstream to a client.
var responseHeaders = map[string]bool{
	"Content-Type":                   true,
	"Cache-Control":                  true,
	"Retry-After":                    true,
	"X-Request-Id":                   true,
	"Request-Id":                     true,
	"Openai-Processing-Ms":           true,
	"X-Ratelimit-Limit-Requests":     true,
	"X-Ratelimit-Limit-Tokens":       true,
	"X-Ratelimit-Remaining-Requests": true,
	"X-Ratelimit-Remaining-Tokens":   true,
	"X-Ratelimit-Reset-Requests":     true,
	"X-Ratelimit-Reset-Tokens":       true,
}

// maxHeaders bounds the headers relayed in either direction.
const (
	maxHeaders     = 64
	maxHeaderValue = 4 << 10
)

// FilterRequest returns the request headers allowed through to an upstream.
func FilterRequest(h http.Header) http.Header { return filter(h, requestHeaders) }

// FilterResponse returns the response headers allowed back to a client.
func FilterResponse(h http.Header) http.Header { return filter(h, responseHeaders) }

func filter(h http.Header, allow map[string]bool) http.Header {
	out := http.Header{}
	n := 0
	for k, vs := range h {
		ck := http.CanonicalHeaderKey(k)
		if !allow[ck] && !strings.HasPrefix(ck, "Anthropic-Ratelimit-") {
			continue
		}
		for _, v := range vs {
			if n >= maxHeaders || len(v) > maxHeaderValue || strings.ContainsAny(v, "\r\n\x00") {
				continue
			}
			out.Add(ck, v)
			n++
		}
	}
	return out
}
