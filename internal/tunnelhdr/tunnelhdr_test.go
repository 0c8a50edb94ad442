package tunnelhdr

import (
	"net/http"
	"strings"
	"testing"
)

func TestFilterRequestDropsCredentials(t *testing.T) {
	in := http.Header{
		"Authorization":       {"Bearer client-key"},
		"X-Api-Key":           {"client-key"},
		"Cookie":              {"session=1"},
		"Proxy-Authorization": {"Basic x"},
		"Connection":          {"keep-alive"},
		"Transfer-Encoding":   {"chunked"},
		"Host":                {"evil"},
		"Content-Type":        {"application/json"},
		"Anthropic-Version":   {"2023-06-01"},
		"Accept":              {"text/event-stream\r\nX-Injected: 1"},
	}
	out := FilterRequest(in)
	for _, k := range []string{"Authorization", "X-Api-Key", "Cookie", "Proxy-Authorization", "Connection", "Transfer-Encoding", "Host", "Accept"} {
		if out.Get(k) != "" {
			t.Errorf("%s passed: %q", k, out.Get(k))
		}
	}
	if out.Get("Content-Type") != "application/json" || out.Get("Anthropic-Version") != "2023-06-01" {
		t.Errorf("allowed headers lost: %v", out)
	}
}

func TestAllowedResponse(t *testing.T) {
	out := http.Header{}
	for k, v := range Allowed(http.Header{
		"Set-Cookie":                             {"a=b"},
		"Content-Type":                           {"text/event-stream"},
		"Content-Length":                         {"10"},
		"X-Ratelimit-Remaining-Tokens":           {"100"},
		"Anthropic-Ratelimit-Requests-Remaining": {"5"},
		"X-Request-Id":                           {"caf\xe9"}, // Latin-1: no protobuf string
	}, Response) {
		out.Add(k, v)
	}
	if out.Get("Set-Cookie") != "" || out.Get("Content-Length") != "" || out.Get("X-Request-Id") != "" {
		t.Errorf("forbidden response headers passed: %v", out)
	}
	if out.Get("Content-Type") == "" || out.Get("X-Ratelimit-Remaining-Tokens") == "" || out.Get("Anthropic-Ratelimit-Requests-Remaining") == "" {
		t.Errorf("allowed response headers lost: %v", out)
	}
}

func TestFilterKeepsCleanHeaderAndCopiesOthers(t *testing.T) {
	clean := http.Header{"Content-Type": {"application/json"}, "Accept": {"text/event-stream"}}
	if out := FilterRequest(clean); len(out) != 2 || &out["Accept"][0] != &clean["Accept"][0] {
		t.Fatalf("a clean header was copied or changed: %v", out)
	}
	// A non-canonical key, a forbidden key, a bad value, or too many
	// values: the result is a filtered copy and the input is untouched.
	many := http.Header{"Accept": make([]string, MaxHeaders+1)}
	for _, in := range []http.Header{
		{"content-type": {"application/json"}},
		{"Content-Type": {"application/json"}, "Cookie": {"a=b"}},
		{"Content-Type": {"a\nb"}},
		many,
	} {
		before := in.Clone()
		out := FilterRequest(in)
		if diff := len(in) - len(before); diff != 0 || out.Get("Cookie") != "" || strings.Contains(out.Get("Content-Type"), "\n") {
			t.Errorf("FilterRequest(%v) = %v", before, out)
		}
		n := 0
		for _, vs := range out {
			n += len(vs)
		}
		if n > MaxHeaders {
			t.Errorf("%d values passed", n)
		}
		if _, ok := in["Cookie"]; ok && len(in["Cookie"]) != 1 {
			t.Error("input changed")
		}
	}
	if out := FilterRequest(http.Header{"content-type": {"application/json"}}); out.Get("Content-Type") != "application/json" {
		t.Fatalf("non-canonical allowed key lost: %v", out)
	}
}

type pair struct{ name, value string }

func (p pair) GetName() string  { return p.name }
func (p pair) GetValue() string { return p.value }

func TestCollect(t *testing.T) {
	in := []pair{
		{"content-type", "application/json"},
		{"X-Ratelimit-Remaining-Tokens", "1"},
		{"Set-Cookie", "a=b"},
		{"x-ratelimit-remaining-tokens", "2"},
		{"Retry-After", "bad\r\nvalue"},
		{"Cache-Control", "no-store"},
	}
	h := Collect(in, Response)
	want := http.Header{"Content-Type": {"application/json"}, "X-Ratelimit-Remaining-Tokens": {"1", "2"}, "Cache-Control": {"no-store"}}
	if len(h) != len(want) {
		t.Fatalf("Collect = %v, want %v", h, want)
	}
	for k, vs := range want {
		if got := h[k]; strings.Join(got, "|") != strings.Join(vs, "|") {
			t.Errorf("%s = %q, want %q", k, got, vs)
		}
	}
	// Appending to one key never overwrites another's value.
	h["Content-Type"] = append(h["Content-Type"], "x")
	if h.Get("Cache-Control") != "no-store" {
		t.Fatal("values share storage")
	}
	many := make([]pair, MaxHeaders+10)
	for i := range many {
		many[i] = pair{"Accept", "v"}
	}
	if got := len(Collect(many, Request)["Accept"]); got != MaxHeaders {
		t.Fatalf("%d values kept, want %d", got, MaxHeaders)
	}
}
