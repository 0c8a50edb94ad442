package llmapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

var validCases = []string{
	``, ` `, `{}`, `[]`, `""`, `"a"`, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5e`, `1e+`, `1E-7`, `-12.50e+09`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `True`, ` null `, "\tnull\r\n", `null null`, `nullnull`,
	`{"a":1}`, `{"a" : [1, 2 ,{"b":null}] }`, `{"a":1,}`, `{"a"}`, `{"a":}`, `{a:1}`, `{"a":1 "b":2}`, `{,}`, `[,]`, `[1,]`, `[1 2]`,
	`[`, `]`, `{`, `}`, `[[]]`, `[[]`, `[{]}`, `{"a":[}`, `["a\"b"]`, `["\u00e9\ud83d\ude00"]`, `["\u00g0"]`, `["\u00e"]`, `["\x"]`,
	"[\"\x01\"]", "[\"\x7f\"]", "[\"\xff\xfe\"]", `"\/\b\f\n\r\t\\"`, `"abc`, `"abc\"`, `{"a":1}}`, `[]]`, `[1]x`, "\x00",
	`[-]`, `[--1]`, `[+1]`, `[1e5.3]`, `[0x10]`, `[Infinity]`, `[NaN]`, `{"":""}`, `{"a":{"b":{"c":[true,false,null]}}}`,
}

// longStringCases put each kind of byte a string's scan stops at (and
// one it must not stop at) at every offset of an 8-byte word, inside
// strings longer than a word, so the word-at-a-time scan is tested where
// its arithmetic can go wrong: the lowest flagged byte, borrows across
// bytes, and bytes from 0x80 up.
func longStringCases() []string {
	var cases []string
	for _, odd := range []string{`"`, `\"`, `\`, `\n`, `\u00e9`, `\u00`, `\x`, "\x00", "\x1f", "\x20", "\x7f", "\x80", "\xff", "\x21", "\x23", "\x5b", "\x5d"} {
		for pre := 0; pre < 17; pre++ {
			for _, post := range []string{"", "abcdefghijklmnop"} {
				s := strings.Repeat("a", pre) + odd + post
				cases = append(cases, `"`+s+`"`, `["`+s+`",1]`, `{"`+s+`":{"k":"`+s+`"}}`)
			}
		}
	}
	return cases
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, c := range append(longStringCases(), validCases...) {
		if got, want := Valid([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", c, got, want)
		}
	}
	// Nesting: encoding/json refuses more than 10000 open containers,
	// empty innermost ones included.
	for _, depth := range []int{9999, 10000, 10001} {
		for _, inner := range []string{"", "1", "{}"} {
			doc := strings.Repeat("[", depth) + inner + strings.Repeat("]", depth)
			if got, want := Valid([]byte(doc)), json.Valid([]byte(doc)); got != want {
				t.Errorf("depth %d around %q: Valid %v, encoding/json %v", depth, inner, got, want)
			}
		}
		doc := strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth)
		if got, want := Valid([]byte(doc)), json.Valid([]byte(doc)); got != want {
			t.Errorf("object depth %d: Valid %v, encoding/json %v", depth, got, want)
		}
	}
}

// FuzzValid holds Valid to encoding/json.Valid on arbitrary bytes.
func FuzzValid(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	for _, c := range longStringCases()[:40] {
		f.Add([]byte(c))
	}
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := Valid(b), json.Valid(b)
		if got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
		ok, found := ValidFind(b, "usage")
		if ok != want {
			t.Fatalf("ValidFind(%q) = %v, encoding/json says %v", b, ok, want)
		}
		if want && found != hasObjectKey(t, b, "usage") {
			t.Fatalf("ValidFind(%q) found %v, decoding says %v", b, found, !found)
		}
	})
}

// hasObjectKey is ValidFind's found the slow way: decode b and walk it.
// A key written with escapes decodes to the same key but is not found by
// ValidFind (it compares the key's bytes), so such keys are skipped here
// too: the test reports them as not found.
func hasObjectKey(t *testing.T, b []byte, key string) bool {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	// Walk the tokens: a key token is followed by its value's first token.
	depth := []bool{} // per open container: is it an object
	expectKey := false
	var lastKey string
	raw := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		inObject := len(depth) > 0 && depth[len(depth)-1]
		if inObject && expectKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				depth = depth[:len(depth)-1]
				expectKey = len(depth) > 0 && depth[len(depth)-1]
				continue
			}
			lastKey = tok.(string)
			// The key's bytes as written: found only when unescaped.
			off := int(dec.InputOffset())
			raw = off >= len(key)+2 && string(b[off-len(key)-2:off]) == `"`+key+`"`
			expectKey = false
			continue
		}
		if inObject && lastKey == key && raw {
			if d, ok := tok.(json.Delim); ok && d == '{' {
				return true
			}
		}
		lastKey, raw = "", false
		switch d, _ := tok.(json.Delim); d {
		case '{':
			depth = append(depth, true)
			expectKey = true
			continue
		case '[':
			depth = append(depth, false)
			continue
		case '}', ']':
			depth = depth[:len(depth)-1]
		}
		expectKey = len(depth) > 0 && depth[len(depth)-1]
	}
}

func TestValidFind(t *testing.T) {
	for _, c := range []struct {
		doc       string
		ok, found bool
	}{
		{`{"usage":{"prompt_tokens":1}}`, true, true},
		{`{"usage" : {}}`, true, true},
		{"{\n\t\"usage\":\t{}}", true, true},
		{`{"response":{"id":"r","usage":{"input_tokens":1}}}`, true, true},
		{`[{"a":[{"usage":{}}]}]`, true, true},
		{`{"usage":null}`, true, false},
		{`{"usage":[{}]}`, true, false},
		{`{"usage":"{"}`, true, false},
		{`{"text":"\"usage\":{"}`, true, false},
		{`{"usag":{}}`, true, false},
		{`{"usages":{}}`, true, false},
		{`{"\u0075sage":{}}`, true, false}, // escaped: not compared
		{`["usage",{}]`, true, false},
		{`{"usage":{}`, false, false},
		{`{"usage":{}}x`, false, false},
	} {
		ok, found := ValidFind([]byte(c.doc), "usage")
		if ok != c.ok || found != c.found {
			t.Errorf("ValidFind(%s) = %v, %v; want %v, %v", c.doc, ok, found, c.ok, c.found)
		}
		if ok != json.Valid([]byte(c.doc)) {
			t.Errorf("ValidFind(%s) ok = %v, encoding/json disagrees", c.doc, ok)
		}
		if c.ok && hasObjectKey(t, []byte(c.doc), "usage") != c.found {
			t.Errorf("hasObjectKey(%s) != %v", c.doc, c.found)
		}
	}
	if _, found := ValidFind([]byte(`{"":{}}`), ""); found {
		t.Error("an empty key was found")
	}
}

// BenchmarkValidChunk checks a Chat Completions stream chunk as the Edge
// does: once per event it relays.
func BenchmarkValidChunk(b *testing.B) {
	body := []byte(`{"choices":[{"delta":{"content":" token"},"finish_reason":null,"index":0,"logprobs":null}],"created":1700000000,"id":"chatcmpl-5f3c2a9e1b7d4c6a","model":"up","object":"chat.completion.chunk","system_fingerprint":"fp_upstreamtest"}`)
	b.SetBytes(int64(len(body)))
	b.Run("Valid", func(b *testing.B) {
		for b.Loop() {
			Valid(body)
		}
	})
	b.Run("ValidFind", func(b *testing.B) {
		for b.Loop() {
			ValidFind(body, "usage")
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			json.Valid(body)
		}
	})
}

// BenchmarkValidLong checks a request with a long prompt: almost all of
// its bytes are inside one string.
func BenchmarkValidLong(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100) + `"}]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		Valid(body)
	}
}

func BenchmarkValid(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the bench."},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":4,"total_tokens":14}}`)
	b.Run("llmapi", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			Valid(body)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			json.Valid(body)
		}
	})
}
