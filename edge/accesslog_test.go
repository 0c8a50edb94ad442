package edge_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/syncbuf"
)

// accessLines returns the access log's lines in buf, decoded.
func accessLines(t *testing.T, buf *syncbuf.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["@module"] == "edge.access" {
			out = append(out, m)
		}
	}
	return out
}

// TestAccessLog: with AccessLog on, every generation request gets one line
// as it ends, whether it was answered (tunnelled, translated, streamed)
// or refused before dispatch, naming what an operator needs to follow it
// (the Edge's request id and the provider's, which a tunnelled answer
// gives the client instead and a translated one keeps; model, key name,
// provider, node, status, outcome, timings, tokens) and never the key,
// the prompt or the answer. Off, the default, there is none; a reload turns it on and off.
func TestAccessLog(t *testing.T) {
	buf := &syncbuf.Buffer{}
	r := newRig(t, rigOpts{
		mutate: func(c *edge.Config) {
			c.Logger = hclog.New(&hclog.LoggerOptions{Name: "edge", Level: hclog.Info, Output: buf, JSONFormat: true})
		},
		// The provider's own request id, which a tunnelled answer
		// passes on to the client in place of the Edge's.
		reply: func(req *upstreamtest.Request) upstreamtest.Script {
			return upstreamtest.Script{Text: []string{"a fine answer"}, RequestID: "up-" + req.API}
		},
	})
	const prompt = "secret-prompt-words"
	r.post(t, apiKey, chatJSON("gpt-local", prompt))
	if n := len(accessLines(t, buf)); n != 0 {
		t.Fatalf("%d access lines with AccessLog off", n)
	}

	cfg := r.config(8)
	cfg.AccessLog = true
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	var rids, answers []string
	for _, model := range []string{"gpt-local", "via-anthropic"} {
		status, h, body := r.post(t, apiKey, chatJSON(model, prompt))
		var answer struct {
			Choices []struct {
				Message struct{ Content string }
			}
		}
		if err := json.Unmarshal([]byte(body), &answer); status != 200 || err != nil || len(answer.Choices) != 1 || answer.Choices[0].Message.Content == "" {
			t.Fatalf("%s: %d %s", model, status, body)
		}
		rids = append(rids, h.Get("Request-Id"))
		answers = append(answers, answer.Choices[0].Message.Content)
	}
	r.streamChat(t, "gpt-local")
	status, h, _ := r.post(t, "sk-wrong-key-0123456789abcdef0123456789", chatJSON("gpt-local", prompt))
	if status != 401 {
		t.Fatalf("wrong key: %d", status)
	}
	rids = append(rids, "", h.Get("X-Request-Id"))
	status, _, _ = r.post(t, apiKey, chatJSON("no-such-model", prompt))
	if status != 404 {
		t.Fatalf("unknown model: %d", status)
	}

	lines := accessLines(t, buf)
	if len(lines) != 5 {
		t.Fatalf("%d access lines, want 5:\n%s", len(lines), buf)
	}
	for i, want := range []map[string]any{
		{"request_id": rids[0], "provider_request_id": "up-chat", "api": "chat", "model": "gpt-local", "key": "alice", "status": 200.0, "outcome": "ok", "stream": false, "provider": "local", "node": "box", "input_tokens": 0.0, "output_tokens": 0.0},
		{"request_id": rids[1], "provider_request_id": "up-messages", "api": "chat", "model": "via-anthropic", "key": "alice", "status": 200.0, "outcome": "ok", "stream": false, "provider": "claude", "node": "box"},
		{"api": "chat", "model": "gpt-local", "key": "alice", "status": 200.0, "outcome": "ok", "stream": true, "provider": "local", "node": "box"},
		{"request_id": rids[3], "api": "chat", "model": "unknown", "status": 401.0, "outcome": "unauthenticated", "stream": false},
		{"api": "chat", "model": "unknown", "key": "alice", "status": 404.0, "outcome": "client_error"},
	} {
		got := lines[i]
		for k, v := range want {
			if k == "input_tokens" || k == "output_tokens" {
				if n, ok := got[k].(float64); !ok || n <= 0 {
					t.Errorf("line %d: %s = %v, want a reported count", i, k, got[k])
				}
				continue
			}
			if got[k] != v {
				t.Errorf("line %d: %s = %v, want %v", i, k, got[k], v)
			}
		}
		for _, k := range []string{"duration_ms", "bytes"} {
			if _, ok := got[k]; !ok {
				t.Errorf("line %d: no %s", i, k)
			}
		}
		_, dispatched := got["provider"]
		if _, ok := got["queued_ms"]; ok != dispatched {
			t.Errorf("line %d: generation without provider or the reverse: %v", i, got)
		}
		if _, ok := got["generation"]; ok != dispatched {
			t.Errorf("line %d: generation without provider or the reverse: %v", i, got)
		}
		if _, ok := got["first_byte_ms"]; !ok || got["bytes"].(float64) <= 0 {
			t.Errorf("line %d: first_byte_ms %v, bytes %v", i, got["first_byte_ms"], got["bytes"])
		}
		if i >= 3 {
			if _, ok := got["provider"]; ok {
				t.Errorf("line %d: a refused request names a provider: %v", i, got)
			}
		}
	}
	for i, l := range lines {
		if _, ok := l["provider_request_id"]; ok != (i < 3) { // the answered requests
			t.Errorf("line %d: provider_request_id %v", i, l["provider_request_id"])
		}
	}
	if _, ok := lines[3]["key"]; ok {
		t.Errorf("unauthenticated line names a key: %v", lines[3])
	}
	out := buf.String()
	for _, secret := range append([]string{apiKey, "sk-wrong-key", prompt}, answers...) {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}

	cfg.AccessLog = false
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	r.post(t, apiKey, chatJSON("gpt-local", prompt))
	if n := len(accessLines(t, buf)); n != 5 {
		t.Fatalf("%d access lines after turning it off, want 5", n)
	}
}
