package llmapi

import (
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

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, c := range validCases {
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
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
	})
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
