// Package tunnelhdr holds the header allow-lists of the raw provider
// tunnel, applied by the Edge before a request leaves and by the Node (the
// authority) before it reaches the upstream, and again on the way back.
package tunnelhdr

import (
	"iter"
	"net/http"
	"strings"
	"unicode/utf8"
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

// MaxHeaders bounds the header values relayed in either direction;
// maxHeaderValue bounds each value.
const (
	MaxHeaders     = 64
	maxHeaderValue = 4 << 10
)

// Request returns the canonical form of a request header name and whether
// it may travel to an upstream.
func Request(name string) (string, bool) { return allowed(name, requestHeaders) }

// Response returns the canonical form of a response header name and
// whether it may travel back to a client.
func Response(name string) (string, bool) { return allowed(name, responseHeaders) }

// ValueOK reports whether a header value may be relayed: bounded, with no
// CR, LF or NUL, and UTF-8 (the wire carries it in a protobuf string,
// which must be: another value would fail the whole message).
func ValueOK(v string) bool {
	return len(v) <= maxHeaderValue && !strings.ContainsAny(v, "\r\n\x00") && utf8.ValidString(v)
}

func allowed(name string, allow map[string]bool) (string, bool) {
	ck := http.CanonicalHeaderKey(name)
	return ck, allow[ck] || strings.HasPrefix(ck, "Anthropic-Ratelimit-")
}

// FilterRequest returns the request headers allowed through to an
// upstream: h itself when every header in it is allowed already.
func FilterRequest(h http.Header) http.Header {
	if clean(h, Request) {
		return h
	}
	out := make(http.Header, min(len(h), 8))
	for k, v := range Allowed(h, Request) {
		out[k] = append(out[k], v)
	}
	return out
}

// Allowed yields, under their canonical names, the values of h that allow
// (Request or Response) permits and ValueOK accepts, at most MaxHeaders of
// them.
func Allowed(h http.Header, allow func(string) (string, bool)) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		n := 0
		for k, vs := range h {
			ck, ok := allow(k)
			if !ok {
				continue
			}
			for _, v := range vs {
				if n == MaxHeaders {
					return
				}
				if !ValueOK(v) {
					continue
				}
				n++
				if !yield(ck, v) {
					return
				}
			}
		}
	}
}

// clean reports whether Allowed would yield all of h, unchanged.
func clean(h http.Header, allow func(string) (string, bool)) bool {
	n := 0
	for k, vs := range h {
		if ck, ok := allow(k); !ok || ck != k {
			return false
		}
		for _, v := range vs {
			if !ValueOK(v) {
				return false
			}
			n++
		}
	}
	return n <= MaxHeaders
}

// Pair is a header name and value as the wire carries them.
type Pair interface {
	GetName() string
	GetValue() string
}

// Collect builds a header from wire pairs, keeping only those allow (Request
// or Response) permits with acceptable values, at most MaxHeaders. The
// values share one backing array.
func Collect[P Pair](pairs []P, allow func(string) (string, bool)) http.Header {
	h := make(http.Header, len(pairs))
	vals := make([]string, 0, min(len(pairs), MaxHeaders))
	n := 0
	for _, kv := range pairs {
		if n == MaxHeaders {
			break
		}
		k, ok := allow(kv.GetName())
		if !ok || !ValueOK(kv.GetValue()) {
			continue
		}
		n++
		if vs, seen := h[k]; seen {
			h[k] = append(vs, kv.GetValue()) // moves off the shared array
			continue
		}
		vals = append(vals, kv.GetValue())
		h[k] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	return h
}
