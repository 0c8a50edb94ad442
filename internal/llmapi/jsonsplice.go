// Package llmapi holds the client API formats the Edge speaks (OpenAI Chat
// Completions, Responses, Embeddings, Models) as pure functions over bytes
// and types, outside net/http: top-level JSON splicing for the tunnel path,
// conversion of requests to normalized runs, and projectors that turn a
// run's ordered events into a client format's buffered answer or stream.
package llmapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// ErrNotObject is returned for a body that is valid JSON but not an
// object; ErrNotJSON for one that is not valid JSON at all.
var (
	ErrNotObject = errors.New("llmapi: body is not a JSON object")
	ErrNotJSON   = errors.New("llmapi: body is not valid JSON")
)

// span is a value's byte range in a body; end is 0 when the key is absent.
type span struct{ start, end int }

// Fields records where some top-level keys' values sit in a JSON object, so
// that the tunnel path can read and rewrite them without decoding and
// re-encoding the whole body. It is a value: scanning allocates nothing.
type Fields struct {
	body   []byte
	keys   []string
	spans  [MaxScanKeys]span // parallel to keys
	closer int               // index of the object's closing brace
}

// MaxScanKeys is the most keys one Scan locates.
const MaxScanKeys = 8

// Scan validates body as one JSON object and locates the values of the
// given top-level keys (at most MaxScanKeys). A key that appears twice is
// an error: what the upstream would read is ambiguous, so it is refused;
// so is a key that differs from a wanted one only in case.
func Scan(body []byte, keys ...string) (Fields, error) {
	if len(keys) > MaxScanKeys {
		return Fields{}, errors.New("llmapi: Scan takes at most " + strconv.Itoa(MaxScanKeys) + " keys")
	}
	if !Valid(body) {
		return Fields{}, ErrNotJSON
	}
	return scanValid(body, keys)
}

// scanValid is Scan for a body known to be valid JSON: a value Raw cut
// from a scanned body (whose check covered it), with at most MaxScanKeys
// keys. The walk relies on validity and must never see anything else.
func scanValid(body []byte, keys []string) (Fields, error) {
	f := Fields{body: body, keys: keys}
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return Fields{}, ErrNotObject
	}
	i++
	for {
		i = skipWS(body, i)
		if body[i] == '}' {
			f.closer = i
			return f, nil
		}
		if body[i] == ',' {
			i = skipWS(body, i+1)
		}
		kEnd := skipString(body, i)
		raw := body[i+1 : kEnd-1]
		i = skipWS(body, kEnd)
		i = skipWS(body, i+1) // ':'
		vEnd := skipValue(body, i)
		key := unsafeString(raw) // compared only, never kept
		if bytes.IndexByte(raw, '\\') >= 0 {
			k, err := unquote(body[kEnd-len(raw)-2 : kEnd])
			if err != nil {
				return Fields{}, errors.New("llmapi: bad key")
			}
			key = k
		}
		for n, w := range keys {
			if key == w {
				if f.spans[n].end != 0 {
					return Fields{}, errors.New("llmapi: duplicate key " + strconv.Quote(w))
				}
				f.spans[n] = span{i, vEnd}
			} else if len(key) >= len(w) && len(key) <= 3*len(w) && strings.EqualFold(key, w) {
				// Some upstreams decode keys case-insensitively; a "Model"
				// beside "model" could smuggle another value past us. (The
				// wanted keys are ASCII: a key that folds to one is at least
				// as long and at most three times as long, as with "\u212a"
				// for "k".)
				return Fields{}, errors.New("llmapi: key " + strconv.Quote(key) + " differs from " + strconv.Quote(w) + " only in case")
			}
		}
		i = vEnd
	}
}

// unquote decodes a JSON string literal. It is a function of its own so
// that the string escapes to the heap only when a key has escapes: Scan
// takes every other key as a view of the body, allocating nothing.
func unquote(lit []byte) (string, error) {
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

// unsafeString views b as a string without copying; the caller must not
// keep it past b's lifetime or while b changes.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (f *Fields) span(key string) (span, bool) {
	for n, k := range f.keys {
		if k == key {
			return f.spans[n], f.spans[n].end != 0
		}
	}
	return span{}, false
}

// Raw returns the raw JSON value of key, or nil when absent.
func (f *Fields) Raw(key string) []byte {
	s, ok := f.span(key)
	if !ok {
		return nil
	}
	return f.body[s.start:s.end]
}

// String decodes key's value as a string; ok is false when absent or not
// a string.
func (f *Fields) String(key string) (string, bool) {
	raw := f.Raw(key)
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// StringIs reports whether key's value is the JSON string want. A value
// without escapes is compared where it lies, allocating nothing.
func (f *Fields) StringIs(key, want string) bool { return stringIs(f.Raw(key), want) }

func stringIs(raw []byte, want string) bool {
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	if inner := raw[1 : len(raw)-1]; bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == want
	}
	s, err := unquote(raw)
	return err == nil && s == want
}

// Bool decodes key's value as a boolean; absent or null is false.
func (f *Fields) Bool(key string) (v bool, ok bool) {
	switch string(f.Raw(key)) {
	case "true":
		return true, true
	case "false", "null", "":
		return false, true
	}
	return false, false
}

// Has reports whether key is present.
func (f *Fields) Has(key string) bool {
	_, ok := f.span(key)
	return ok
}

// Splice returns a copy of the body with key's value replaced by raw (or
// added, when absent). Only one key changes; every other byte is kept.
func (f *Fields) Splice(key string, raw []byte) []byte {
	if s, ok := f.span(key); ok {
		out := make([]byte, 0, len(f.body)-(s.end-s.start)+len(raw))
		out = append(out, f.body[:s.start]...)
		out = append(out, raw...)
		return append(out, f.body[s.end:]...)
	}
	// Insert before the closing brace.
	head := f.body[:f.closer]
	sep := []byte(",")
	if j := lastNonWS(head); j >= 0 && head[j] == '{' {
		sep = nil
	}
	k, _ := json.Marshal(key)
	out := make([]byte, 0, len(f.body)+len(k)+len(raw)+2)
	out = append(out, head...)
	out = append(out, sep...)
	out = append(out, k...)
	out = append(out, ':')
	out = append(out, raw...)
	return append(out, f.body[f.closer:]...)
}

func lastNonWS(b []byte) int {
	for j := len(b) - 1; j >= 0; j-- {
		switch b[j] {
		case ' ', '\t', '\n', '\r':
		default:
			return j
		}
	}
	return -1
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string starting at i (the body is
// known valid).
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		j = stringStop(b, j) // a valid body has no control character in a string
		if j >= len(b) {
			break
		}
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value starting at i.
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// Quote returns s as a JSON string, escaped as encoding/json escapes it.
func Quote(s string) []byte {
	return appendQuoted(make([]byte, 0, len(s)+2), s)
}

// appendQuoted appends s as a JSON string, escaped as encoding/json
// escapes it.
func appendQuoted(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return append(dst, b...)
		}
	}
	// Printable ASCII with nothing to escape (a model name, a token of
	// English text, as a rule): quoted as it is.
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
