// Package llmapi holds the client API formats the Edge speaks (OpenAI Chat
// Completions, Responses, Embeddings, Models) as pure functions over bytes
// and types, outside net/http: top-level JSON splicing for the tunnel path,
// conversion of requests to normalized runs, and projectors that turn a
// run's ordered events into a client format's buffered answer or stream.
package llmapi

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// ErrNotObject is returned for a body that is not a JSON object.
var ErrNotObject = errors.New("llmapi: body is not a JSON object")

// span is a value's byte range in a body.
type span struct{ start, end int }

// Fields records where some top-level keys' values sit in a JSON object, so
// that the tunnel path can read and rewrite them without decoding and
// re-encoding the whole body.
type Fields struct {
	body   []byte
	spans  map[string]span
	closer int // index of the object's closing brace
}

// Scan validates body as one JSON object and locates the values of the
// given top-level keys. A key that appears twice is an error: what the
// upstream would read is ambiguous, so it is refused.
func Scan(body []byte, keys ...string) (*Fields, error) {
	if !json.Valid(body) {
		return nil, errors.New("llmapi: body is not valid JSON")
	}
	f := &Fields{body: body, spans: make(map[string]span, len(keys))}
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, ErrNotObject
	}
	want := make(map[string]bool, len(keys))
	for _, k := range keys {
		want[k] = true
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
		key, err := strconv.Unquote(string(body[i:kEnd]))
		if err != nil {
			var s string
			if json.Unmarshal(body[i:kEnd], &s) != nil {
				return nil, errors.New("llmapi: bad key")
			}
			key = s
		}
		i = skipWS(body, kEnd)
		i = skipWS(body, i+1) // ':'
		vEnd := skipValue(body, i)
		for w := range want {
			if key != w && strings.EqualFold(key, w) {
				// Some upstreams decode keys case-insensitively; a "Model"
				// beside "model" could smuggle another value past us.
				return nil, errors.New("llmapi: key " + strconv.Quote(key) + " differs from " + strconv.Quote(w) + " only in case")
			}
		}
		if want[key] {
			if _, dup := f.spans[key]; dup {
				return nil, errors.New("llmapi: duplicate key " + strconv.Quote(key))
			}
			f.spans[key] = span{i, vEnd}
		}
		i = vEnd
	}
}

// Raw returns the raw JSON value of key, or nil when absent.
func (f *Fields) Raw(key string) []byte {
	s, ok := f.spans[key]
	if !ok {
		return nil
	}
	return f.body[s.start:s.end]
}

// String decodes key's value as a string; ok is false when absent or not
// a string.
func (f *Fields) String(key string) (string, bool) {
	raw := f.Raw(key)
	if raw == nil || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
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
	_, ok := f.spans[key]
	return ok
}

// Splice returns a copy of the body with key's value replaced by raw (or
// added, when absent). Only one key changes; every other byte is kept.
func (f *Fields) Splice(key string, raw []byte) []byte {
	if s, ok := f.spans[key]; ok {
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

// Quote returns s as a JSON string.
func Quote(s string) []byte {
	b, _ := json.Marshal(s)
	return b
}
