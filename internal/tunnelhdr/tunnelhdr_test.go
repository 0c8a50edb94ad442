package tunnelhdr

import (
	"net/http"
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

func TestFilterResponse(t *testing.T) {
	out := FilterResponse(http.Header{
		"Set-Cookie":                             {"a=b"},
		"Content-Type":                           {"text/event-stream"},
		"Content-Length":                         {"10"},
		"X-Ratelimit-Remaining-Tokens":           {"100"},
		"Anthropic-Ratelimit-Requests-Remaining": {"5"},
	})
	if out.Get("Set-Cookie") != "" || out.Get("Content-Length") != "" {
		t.Errorf("forbidden response headers passed: %v", out)
	}
	if out.Get("Content-Type") == "" || out.Get("X-Ratelimit-Remaining-Tokens") == "" || out.Get("Anthropic-Ratelimit-Requests-Remaining") == "" {
		t.Errorf("allowed response headers lost: %v", out)
	}
}
