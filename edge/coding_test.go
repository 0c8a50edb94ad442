package edge_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// compressed returns body in coding ("gzip" or "deflate", as zlib).
func compressed(t *testing.T, coding, body string) []byte {
	t.Helper()
	var out bytes.Buffer
	var w io.WriteCloser = gzip.NewWriter(&out)
	if coding == "deflate" {
		w = zlib.NewWriter(&out)
	}
	io.WriteString(w, body)
	w.Close()
	return out.Bytes()
}

// TestCompressedRequestBody: a request body sent with Content-Encoding
// gzip or deflate is decoded and served, relayed or translated; the
// provider is sent plain JSON. Another coding (zstd, which some agents
// send to OpenAI's own backend) is refused with 415 in the client's
// format, a body that does not decode with 400, and one that decodes
// beyond the body limit with 413, however small it came; none of those
// reaches the provider.
func TestCompressedRequestBody(t *testing.T) {
	r := newRig(t, rigOpts{maxBody: 4 << 10})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	// post sends body with Content-Encoding coding.
	post := func(path, coding string, body []byte, header map[string]string) (int, string) {
		t.Helper()
		h := map[string]string{"Content-Type": "application/json", "Content-Encoding": coding}
		for k, v := range header {
			h[k] = v
		}
		resp, out := r.do(t, "POST", path, string(body), h)
		return resp.StatusCode, out
	}
	chat := `{"model":"gpt-local","messages":[{"role":"user","content":"squeezed"}]}`
	messages := `{"model":"via-chat","max_tokens":20,"messages":[{"role":"user","content":"squeezed"}]}`
	for _, tc := range []struct{ path, coding, body string }{
		{"/v1/chat/completions", "gzip", chat},
		{"/v1/chat/completions", "deflate", chat},
		{"/v1/messages", "gzip", messages},
	} {
		header := oa
		if tc.path == "/v1/messages" {
			header = an
		}
		before := len(r.calls())
		status, out := post(tc.path, tc.coding, compressed(t, tc.coding, tc.body), header)
		if status != 200 || !strings.Contains(out, "squeezed") {
			t.Fatalf("%s with %s: %d %s", tc.path, tc.coding, status, out)
		}
		calls := r.calls()
		if len(calls) != before+1 {
			t.Fatalf("%s with %s: %d upstream calls", tc.path, tc.coding, len(calls)-before)
		}
		if c := calls[len(calls)-1]; !json.Valid(c.Body) || c.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%s with %s: the provider was sent %q (Content-Encoding %q)", tc.path, tc.coding, c.Body, c.Header.Get("Content-Encoding"))
		}
	}

	before := len(r.calls())
	bomb := compressed(t, "gzip", `{"model":"gpt-local","messages":[{"role":"user","content":"`+strings.Repeat("x", 1<<20)+`"}]}`)
	for _, tc := range []struct {
		name, path, coding string
		body               []byte
		header             map[string]string
		status             int
		want               string
	}{
		{"zstd", "/v1/chat/completions", "zstd", []byte(chat), oa, 415, `"code":"unsupported_content_encoding"`},
		{"zstd to Anthropic's API", "/v1/messages", "zstd", []byte(messages), an, 415, `"type":"invalid_request_error"`},
		{"two codings", "/v1/chat/completions", "gzip, deflate", compressed(t, "gzip", chat), oa, 415, `more than one`},
		{"not gzip", "/v1/chat/completions", "gzip", []byte(chat), oa, 400, `does not decode`},
		{"a bomb", "/v1/chat/completions", "gzip", bomb, oa, 413, `"code":"request_too_large"`},
		{"a bomb to Anthropic's API", "/v1/messages", "gzip", bomb, an, 413, `"type":"request_too_large"`},
	} {
		status, out := post(tc.path, tc.coding, tc.body, tc.header)
		if status != tc.status || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %d %s", tc.name, status, out)
		}
	}
	if len(bomb) > 4<<10 {
		t.Fatalf("the bomb is %d bytes, past the limit before it is decoded", len(bomb))
	}
	if n := len(r.calls()) - before; n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}
	r.settled()
}
