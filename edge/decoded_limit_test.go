package edge_test

import (
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/cli"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
)

// decodedLimit is the bound on a decoded answer these tests set (the
// Edge's own is 32 MiB).
const decodedLimit = 1 << 20

// bounded sets the rig's Server to decodedLimit.
func bounded(s *edge.Server) { edge.SetMaxDecoded(s, decodedLimit) }

// endlessText is an answer a little over the decoded limit, in 16 KiB
// deltas.
func endlessText() []string {
	chunk := strings.Repeat("a", 16<<10)
	out := make([]string, decodedLimit/len(chunk)+2)
	for i := range out {
		out[i] = chunk
	}
	return out
}

// TestDecodedAnswerBounded: an answer the Edge must decode and hold to
// render (translated from the provider's format, or rendered from a run,
// into a buffered body or a Responses stream) ends with a clear error once
// it passes the limit, instead of growing the Edge's memory for as long as
// the provider goes on. A Chat or Anthropic stream holds only its blocks
// and tool arguments, and passes text of any length, as the untranslated
// path does.
func TestDecodedAnswerBounded(t *testing.T) {
	anthropicHeaders := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	openaiHeaders := map[string]string{"Authorization": "Bearer " + apiKey}
	endless := func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Text: endlessText()} }
	t.Run("translated Responses stream", func(t *testing.T) {
		r := newRig(t, rigOpts{prepare: bounded, reply: endless})
		resp, body := r.do(t, "POST", "/v1/responses", `{"model":"via-chat","stream":true,"input":"x"}`, openaiHeaders)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		tail := body[strings.LastIndex(body, "event: "):]
		if !strings.HasPrefix(tail, "event: response.failed\n") || !strings.Contains(tail, "exceeds the gateway's 1 MiB limit") ||
			strings.Contains(body, "response.completed") || len(tail) > 4<<10 {
			t.Fatalf("stream of %d bytes ends with:\n%.300s", len(body), tail)
		}
		r.settled()
	})
	t.Run("translated Anthropic stream passes the limit", func(t *testing.T) {
		r := newRig(t, rigOpts{prepare: bounded, reply: endless})
		resp, body := r.do(t, "POST", "/v1/messages", `{"model":"gpt-local","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"x"}]}`, anthropicHeaders)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		tail := body[strings.LastIndex(body, "event: "):]
		if !strings.HasPrefix(tail, "event: message_stop\n") || strings.Contains(body, "event: error") || len(body) < decodedLimit {
			t.Fatalf("stream of %d bytes ends with:\n%.300s", len(body), tail)
		}
		r.settled()
	})
	t.Run("translated stream of tiny blocks", func(t *testing.T) {
		// Reasoning and text alternating a byte at a time: each byte is a
		// block of its own, and each block is charged what is kept for it.
		var raw strings.Builder
		for range decodedLimit/256/2 + 1 {
			raw.WriteString(`data: {"choices":[{"index":0,"delta":{"reasoning_content":"r"}}]}` + "\n\n")
			raw.WriteString(`data: {"choices":[{"index":0,"delta":{"content":"t"}}]}` + "\n\n")
		}
		raw.WriteString(`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
		cutAnthropicStream(t, raw.String())
	})
	t.Run("translated Anthropic stream of tool arguments", func(t *testing.T) {
		// A stream keeps a tool call's arguments (they are checked whole
		// at its end): those stay bounded.
		var raw strings.Builder
		raw.WriteString(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":\""}}]}}]}` + "\n\n")
		piece := strings.Repeat("a", 16<<10)
		for range decodedLimit/len(piece) + 2 {
			raw.WriteString(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"` + piece + `"}}]}}]}` + "\n\n")
		}
		raw.WriteString(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n")
		cutAnthropicStream(t, raw.String())
	})
	t.Run("translated whole answer", func(t *testing.T) {
		r := newRig(t, rigOpts{prepare: bounded, reply: endless})
		resp, body := r.do(t, "POST", "/v1/messages", `{"model":"gpt-local","max_tokens":50,"messages":[{"role":"user","content":"x"}]}`, anthropicHeaders)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"api_error"`) || !strings.Contains(body, "exceeds the gateway's 1 MiB limit") {
			t.Fatalf("%d %.300s", resp.StatusCode, body)
		}
		r.settled()
	})
	t.Run("run", func(t *testing.T) {
		if runtime.GOOS == "windows" {
			t.Skip("cli providers need a Unix host")
		}
		sh, err := exec.LookPath("sh")
		if err != nil {
			t.Skip("no sh")
		}
		// A command whose output passes the Edge's limit (and stays within
		// the adapter's own).
		a, err := cli.New(cli.Config{ID: "cli-yes", Argv: []string{sh, "-c", "yes | head -c 3000000"}, Models: []string{"cli-model"}})
		if err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOpts{prepare: bounded, hosted: []node.Hosted{{Provider: a}}, mutate: func(cfg *edge.Config) {
			cfg.Nodes[0].Providers = append(cfg.Nodes[0].Providers, nodes.ProviderSpec{ID: "cli-yes", Adapter: "cli", Category: execution.CategoryCLI, Models: []string{"cli-model"}, Capacity: 2})
			cfg.Routes = append(cfg.Routes, edge.Route{Model: "via-yes", Targets: []edge.Target{{ProviderID: "cli-yes", Model: "cli-model"}}})
		}})
		resp, body := r.do(t, "POST", "/v1/chat/completions", `{"model":"via-yes","messages":[{"role":"user","content":"x"}]}`, openaiHeaders)
		if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "exceeds the gateway's 1 MiB limit") {
			t.Fatalf("%d %.300s", resp.StatusCode, body)
		}
		// Streamed to a Chat client, the run's text is not held.
		stream := string(r.streamChat(t, "via-yes"))
		if !strings.HasSuffix(stream, "data: [DONE]\n\n") || len(stream) < 3000000 {
			t.Fatalf("stream of %d bytes ends with:\n%.300s", len(stream), stream[max(0, len(stream)-300):])
		}
		r.settled()
	})
}

// cutAnthropicStream streams raw (a Chat Completions stream from the
// upstream) to an Anthropic client and requires it to end with the error
// event of the decoded limit.
func cutAnthropicStream(t *testing.T, raw string) {
	t.Helper()
	r := newRig(t, rigOpts{prepare: bounded, reply: func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: raw} }})
	resp, body := r.do(t, "POST", "/v1/messages", `{"model":"gpt-local","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"x"}]}`,
		map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"})
	tail := body[strings.LastIndex(body, "event: "):]
	if resp.StatusCode != 200 || !strings.HasPrefix(tail, "event: error\n") || !strings.Contains(tail, "exceeds the gateway's 1 MiB limit") {
		t.Fatalf("%d: stream of %d bytes ends with:\n%.300s", resp.StatusCode, len(body), tail)
	}
	r.settled()
}
