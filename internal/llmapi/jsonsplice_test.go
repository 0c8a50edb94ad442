package llmapi

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestScanSplice(t *testing.T) {
	body := []byte(` {"messages":[{"role":"user","content":"model \"x\" {}"}], "model" : "public-name","stream":true, "n":1} `)
	f, err := Scan(body, "model", "stream", "stream_options")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := f.String("model"); !ok || m != "public-name" {
		t.Fatalf("model %q %v", m, ok)
	}
	if s, _ := f.Bool("stream"); !s || f.Has("stream_options") {
		t.Fatal("stream fields")
	}
	out := f.Splice("model", Quote("upstream/qwen"))
	want := ` {"messages":[{"role":"user","content":"model \"x\" {}"}], "model" : "upstream/qwen","stream":true, "n":1} `
	if string(out) != want {
		t.Fatalf("splice:\n%s\nwant\n%s", out, want)
	}
	out2 := f.Splice("stream_options", []byte(`{"include_usage":true}`))
	var v map[string]any
	if err := json.Unmarshal(out2, &v); err != nil || v["stream_options"].(map[string]any)["include_usage"] != true {
		t.Fatalf("insert: %s %v", out2, err)
	}
	empty, _ := Scan([]byte(`{}`), "model")
	if got := string(empty.Splice("model", Quote("m"))); got != `{"model":"m"}` {
		t.Fatalf("insert into empty: %s", got)
	}
}

func TestScanRefuses(t *testing.T) {
	for _, b := range []string{`[]`, `"x"`, `{"model":"a","model":"b"}`, `{"model":"a","Model":"b"}`, `{"MODEL":"b"}`, `{"model":`, `{} {}`, ``} {
		if _, err := Scan([]byte(b), "model"); err == nil {
			t.Errorf("Scan(%q) accepted", b)
		}
	}
}

func FuzzScanSplice(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true}`))
	f.Add([]byte(`{"a":{"model":"inner"},"model":"outer"}`))
	f.Add([]byte(`{"model":"\u00e9\"","x":[1,{"y":"}"}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		fs, err := Scan(body, "model", "stream")
		if err != nil {
			return
		}
		out := fs.Splice("model", Quote("replaced"))
		var v map[string]json.RawMessage
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("splice made invalid JSON: %s", out)
		}
		var m string
		if json.Unmarshal(v["model"], &m) != nil || m != "replaced" {
			t.Fatalf("model after splice: %s", v["model"])
		}
		var before map[string]json.RawMessage
		json.Unmarshal(body, &before)
		for k := range before {
			if _, ok := v[k]; !ok {
				t.Fatalf("key %q lost", k)
			}
		}
	})
}

func TestScanRefusesUnicodeFoldedKey(t *testing.T) {
	// U+212A KELVIN SIGN folds to "k"; U+017F LATIN SMALL LETTER LONG S to "s".
	for _, b := range []string{`{"\u212aey":1}`, "{\"\u212aey\":1}", `{"\u017ftream":true}`, `{"k\u0065y":1,"key":2}`} {
		if _, err := Scan([]byte(b), "key", "stream"); err == nil {
			t.Errorf("Scan(%s) accepted", b)
		}
	}
	f, err := Scan([]byte(`{"k\u0065y":"v\u00e9","other":1}`), "key")
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := f.String("key"); !ok || v != "vé" {
		t.Fatalf("escaped key: %q %v", v, ok)
	}
}

// TestScanAllocatesNothing holds Scan to its documented cost: keys without
// escapes are compared as views of the body (one heap string per key was
// 12 allocations per request on the Edge). Keys with escapes are decoded,
// as TestScanRefusesUnicodeFoldedKey checks.
func TestScanAllocatesNothing(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false,"temperature":0.2,"max_tokens":16}`)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := Scan(body, "model", "stream", "stream_options"); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("Scan allocated %v times per call, want 0", n)
	}
}

// TestStringIs: a value is compared as the string it decodes to, escapes
// and all; anything that is no string is no match.
func TestStringIs(t *testing.T) {
	body := []byte(`{"plain":"m1","escaped":"m\u0031","quote":"a\"b","number":1,"null":null,"object":{"m":"m1"}}`)
	f, err := Scan(body, "plain", "escaped", "quote", "number", "null", "object", "absent")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, want string
		is        bool
	}{
		{"plain", "m1", true}, {"plain", "m", false}, {"plain", "m12", false}, {"escaped", "m1", true}, {"escaped", `m\u0031`, false},
		{"quote", `a"b`, true}, {"number", "1", false}, {"null", "", false}, {"object", "m1", false}, {"absent", "", false},
	} {
		if got := f.StringIs(c.key, c.want); got != c.is {
			t.Errorf("StringIs(%q, %q) = %v", c.key, c.want, got)
		}
	}
	if n := testing.AllocsPerRun(100, func() { f.StringIs("plain", "m1") }); n != 0 {
		t.Errorf("StringIs of a plain value allocated %v times", n)
	}
}

// FuzzQuote holds Quote to encoding/json for any string. The seeds (run by
// every go test) cover names that take its fast path and names that do
// not: escapes, HTML characters, control bytes, non-ASCII, bad UTF-8.
func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "gpt-4o", "qwen2.5:7b-instruct", "org/model@v1", "a b~", `quo"te`, `back\slash`,
		"<html>", "a&b", "tab\there", "\x00\x1f\x7f", "ünïcode", "\u2028", "bad\xffutf8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := Quote(s); string(got) != string(want) {
			t.Fatalf("Quote(%q) = %s, want %s", s, got, want)
		}
		// StringIs matches a value exactly when it decodes to s (bad
		// UTF-8 is quoted as U+FFFD, and so decodes to another string).
		var decoded string
		json.Unmarshal(want, &decoded)
		if f, err := Scan([]byte(`{"k":`+string(want)+`}`), "k"); err != nil || f.StringIs("k", s) != (decoded == s) || !f.StringIs("k", decoded) {
			t.Fatalf("StringIs of %s against %q: %v", want, s, err)
		}
		checkDeltaEvents(t, s)
	})
}

// checkDeltaEvents holds the renderers' hand-written delta events to the
// bytes of the map form they replace, with s as the text, the id and the
// model.
func checkDeltaEvents(t *testing.T, s string) {
	t.Helper()
	ar := &AnthropicRenderer{}
	for _, d := range [][2]string{{"text_delta", "text"}, {"thinking_delta", "thinking"}, {"signature_delta", "signature"}, {"input_json_delta", "partial_json"}} {
		for _, index := range []int{0, 7, 1234} {
			got := ar.delta([]byte("prefix"), index, d[0], d[1], s)
			want := ar.ev([]byte("prefix"), "content_block_delta", map[string]any{"index": index, "delta": map[string]any{"type": d[0], d[1]: s}})
			if string(got) != string(want) {
				t.Fatalf("%s of %q:\n got %s\nwant %s", d[0], s, got, want)
			}
		}
	}
	for _, cr := range []*ChatRenderer{{ID: "chatcmpl-1", Model: "m", Created: 1700000000}, {ID: s, Model: s, Created: -5}} {
		for _, field := range []string{"content", "reasoning_content"} {
			got, want := cr.textChunk(field, s), cr.chunk(map[string]any{field: s}, nil)
			if string(got) != string(want) {
				t.Fatalf("%s chunk of %q:\n got %s\nwant %s", field, s, got, want)
			}
		}
	}
}

func TestDeltaEvents(t *testing.T) {
	for _, s := range []string{"", "tok ", "Hello, world.", `{"a": [1, 2]}`, "<b>&</b>", "line\nbreak\ttab", "\x00\x1f\x7f", "ünïcode 漢字 🙂", "\u2028\u2029", "bad\xffutf8", `quo"te \ back`} {
		checkDeltaEvents(t, s)
	}
}

// BenchmarkScanLong scans a request with a long prompt for the keys the
// Edge reads: the check and the walk both go through one long string.
func BenchmarkScanLong(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100) + `"}],"stream":true}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Scan(body, "model", "stream"); err != nil {
			b.Fatal(err)
		}
	}
}
