package anthropic_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/anthropic"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

type sink struct{ events []execution.Event }

func (s *sink) WriteEvent(e execution.Event) error {
	s.events = append(s.events, e)
	return nil
}

func TestRun(t *testing.T) {
	t.Setenv("IOP_TEST_ANTHROPIC_KEY", "node-key")
	sc := upstreamtest.Script{
		Reasoning: []string{"hmm"},
		Text:      []string{"Bon", "jour"},
		ToolCalls: []upstreamtest.ToolCall{{ID: "toolu_1", Name: "a", Arguments: `{"x":1}`}, {ID: "toolu_2", Name: "b", Arguments: `{"y":[1,2]}`}},
		Usage:     upstreamtest.Usage{InputTokens: 20, OutputTokens: 9, CachedTokens: 4},
	}
	for _, stream := range []bool{false, true} {
		srv := upstreamtest.New(upstreamtest.Config{Reply: func(*upstreamtest.Request) upstreamtest.Script { return sc }})
		url := srv.Start()
		a, err := anthropic.New(anthropic.Config{ID: "claude", BaseURL: url, Credential: execution.EnvCredential("IOP_TEST_ANTHROPIC_KEY")})
		if err != nil {
			t.Fatal(err)
		}
		var s sink
		res, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "claude", Target: "claude-x", Options: execution.Options{Stream: stream},
			Input: execution.Input{System: "sys", Messages: []execution.Message{{Role: "user", Content: "hi"}}}}, &s)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		var text, thinking string
		var calls []execution.ToolCall
		var usage *execution.Usage
		for _, e := range s.events {
			switch e.Kind {
			case execution.EventDelta:
				if e.Reasoning {
					thinking += e.Text
				} else {
					text += e.Text
				}
			case execution.EventToolCall:
				calls = append(calls, *e.ToolCall)
			case execution.EventUsage:
				usage = e.Usage
			}
		}
		if text != "Bonjour" || thinking != "hmm" || res.StopReason != "tool_calls" {
			t.Fatalf("stream=%v: text %q thinking %q stop %q", stream, text, thinking, res.StopReason)
		}
		if d := cmp.Diff([]execution.ToolCall{{ID: "toolu_1", Name: "a", Arguments: `{"x":1}`}, {ID: "toolu_2", Name: "b", Arguments: `{"y":[1,2]}`}}, calls); d != "" {
			t.Errorf("stream=%v tool calls (-want +got):\n%s", stream, d)
		}
		if usage == nil || usage.InputTokens != 24 || usage.CachedInputTokens != 4 || usage.OutputTokens != 9 {
			t.Errorf("stream=%v usage %+v", stream, usage)
		}
		r := srv.Requests()[0]
		if r.Header.Get("X-Api-Key") != "node-key" || r.Header.Get("Anthropic-Version") != anthropic.Version || r.Header.Get("Authorization") != "" {
			t.Errorf("upstream headers %v", r.Header)
		}
	}
}

func TestErrorMidStream(t *testing.T) {
	srv := upstreamtest.New(upstreamtest.Config{Reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"a", "b", "c"}, ErrorAfter: 1}
	}})
	url := srv.Start()
	defer srv.Close()
	a, _ := anthropic.New(anthropic.Config{ID: "c", BaseURL: url})
	_, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "c", Target: "x", Options: execution.Options{Stream: true}}, &sink{})
	var f *execution.Failure
	if !errors.As(err, &f) || f.Class != execution.FailureProvider {
		t.Fatalf("err %v", err)
	}
}

type tunnelRec struct {
	status int
	body   bytes.Buffer
}

func (r *tunnelRec) WriteHead(status int, _ http.Header) error {
	r.status = status
	return nil
}

func (r *tunnelRec) Write(p []byte) (int, error) { return r.body.Write(p) }

// TestTunnel: a tunnelled Messages request reaches the upstream with the
// Node's credential only (a client's own key or authorization never
// passes), with anthropic-version set when the client sent none and kept
// when it did, and the caller's header left as it was.
func TestTunnel(t *testing.T) {
	t.Setenv("IOP_TEST_ANTHROPIC_KEY", "node-key")
	srv := upstreamtest.New(upstreamtest.Config{Reply: func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Text: []string{"hi"}} }})
	url := srv.Start()
	t.Cleanup(srv.Close)
	a, err := anthropic.New(anthropic.Config{ID: "claude", BaseURL: url, Credential: execution.EnvCredential("IOP_TEST_ANTHROPIC_KEY")})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
	for _, version := range []string{"", "2023-01-01"} {
		h := http.Header{"Content-Type": {"application/json"}, "X-Api-Key": {"client-key"}, "Authorization": {"Bearer client-key"}}
		if version != "" {
			h.Set("Anthropic-Version", version)
		}
		before := h.Clone()
		var rec tunnelRec
		err := a.Tunnel(context.Background(), &execution.TunnelRequest{ProviderID: "claude", Method: "POST", Path: "/v1/messages", Header: h, Body: strings.NewReader(body)}, &rec)
		if err != nil || rec.status != http.StatusOK || !strings.Contains(rec.body.String(), `"text":"hi"`) {
			t.Fatalf("version %q: %v, status %d, body %s", version, err, rec.status, rec.body.String())
		}
		if diff := cmp.Diff(before, h); diff != "" {
			t.Errorf("the caller's header changed (-before +after):\n%s", diff)
		}
		reqs := srv.Requests()
		got := reqs[len(reqs)-1].Header
		want := version
		if want == "" {
			want = anthropic.Version
		}
		if got.Get("Anthropic-Version") != want || got.Get("X-Api-Key") != "node-key" || got.Get("Authorization") != "" {
			t.Errorf("version %q: upstream saw anthropic-version %q, x-api-key %q, authorization %q", version,
				got.Get("Anthropic-Version"), got.Get("X-Api-Key"), got.Get("Authorization"))
		}
	}
	var rec tunnelRec
	err = a.Tunnel(context.Background(), &execution.TunnelRequest{ProviderID: "claude", Method: "POST", Path: "/v1/messages/batches", Body: strings.NewReader(body)}, &rec)
	var f *execution.Failure
	if !errors.As(err, &f) || f.Class != execution.FailureInvalidRequest {
		t.Fatalf("a path outside Routes: %v", err)
	}
}

// sse renders events as a Messages stream.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		typ := e[strings.Index(e, `"type":"`)+8:]
		typ = typ[:strings.IndexByte(typ, '"')]
		b.WriteString("event: " + typ + "\ndata: " + e + "\n\n")
	}
	return b.String()
}

const (
	msgStart = `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}`
	msgStop  = `{"type":"message_stop"}`
)

// TestAnswerFailures: an answer the adapter cannot use ends the run with
// a classified failure, never a partial success; an error event is
// classed as the status its type stands for, so an overloaded API is
// unavailable (retryable elsewhere), not the provider's own failure.
func TestAnswerFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream bool
		raw    string
		class  execution.FailureClass
		note   string
	}{
		{"malformed whole answer", false, `{"content":[`, execution.FailureProvider, "malformed answer"},
		{"whole answer not an object", false, `[1,2]`, execution.FailureProvider, "malformed answer"},
		{"whole answer null", false, `null`, execution.FailureProvider, "malformed answer"},
		{"stream without message_stop", true, sse(msgStart), execution.FailureProvider, "the provider's stream ended without a terminal"},
		{"malformed event", true, sse(msgStart) + "event: content_block_start\ndata: {\"type\":\n\n", execution.FailureProvider, "malformed stream event"},
		{"block started twice", true, sse(msgStart, `{"type":"content_block_start","index":0,"content_block":{"type":"text"}}`, `{"type":"content_block_start","index":0,"content_block":{"type":"text"}}`), execution.FailureProvider, "content_block_start out of order"},
		{"block before message_start", true, sse(`{"type":"content_block_start","index":0,"content_block":{"type":"text"}}`), execution.FailureProvider, "content_block_start out of order"},
		{"delta for an unknown block", true, sse(msgStart, `{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"x"}}`), execution.FailureProvider, "delta for a block that is not open"},
		{"tool input not an object", true, sse(msgStart, `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"[1]"}}`, `{"type":"content_block_stop","index":0}`, msgStop), execution.FailureProvider, `the provider returned arguments for tool "f" that are not a JSON object`},
		{"overloaded", true, sse(msgStart, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`), execution.FailureUnavailable, "the provider failed mid-stream (overloaded)"},
		{"rate limited", true, sse(`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`), execution.FailureRateLimited, "the provider failed mid-stream (rate_limit)"},
		{"invalid request", true, sse(`{"type":"error","error":{"type":"invalid_request_error","message":"no"}}`), execution.FailureInvalidRequest, "the provider failed mid-stream (invalid_request)"},
		{"api error", true, sse(msgStart, `{"type":"error","error":{"type":"api_error","message":"boom"}}`), execution.FailureProvider, "the provider failed mid-stream"},
		// A type the API does not document is not echoed, nor the message.
		{"unknown error type", true, sse(`{"type":"error","error":{"type":"secret sk-123","message":"x"}}`), execution.FailureProvider, "the provider failed mid-stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := upstreamtest.New(upstreamtest.Config{Reply: func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: tc.raw} }})
			url := srv.Start()
			defer srv.Close()
			a, _ := anthropic.New(anthropic.Config{ID: "c", BaseURL: url})
			var s sink
			_, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "c", Target: "x", Options: execution.Options{Stream: tc.stream}}, &s)
			var f *execution.Failure
			if !errors.As(err, &f) || f.Class != tc.class || f.Message != tc.note {
				t.Fatalf("err %v, want %v: %s", err, tc.class, tc.note)
			}
			for _, e := range s.events {
				if e.Kind == execution.EventUsage {
					t.Fatalf("usage written for a failed run: %+v", e.Usage)
				}
			}
		})
	}
}

// TestStreamUsageTotals: message_delta's usage is a running total; in
// newer API versions it totals the input as well, which then replaces
// message_start's.
func TestStreamUsageTotals(t *testing.T) {
	for _, tc := range []struct {
		name       string
		delta      string
		in, cached int64
		out        int64
	}{
		{"output only", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`, 3, 0, 7},
		{"input too", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":5,"cache_read_input_tokens":2,"cache_creation_input_tokens":1,"output_tokens":9}}`, 8, 2, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := upstreamtest.New(upstreamtest.Config{Reply: func(*upstreamtest.Request) upstreamtest.Script {
				return upstreamtest.Script{Raw: sse(msgStart, tc.delta, msgStop)}
			}})
			url := srv.Start()
			defer srv.Close()
			a, _ := anthropic.New(anthropic.Config{ID: "c", BaseURL: url})
			var s sink
			if _, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "c", Target: "x", Options: execution.Options{Stream: true}}, &s); err != nil {
				t.Fatal(err)
			}
			last := s.events[len(s.events)-1]
			want := execution.Usage{InputTokens: tc.in, CachedInputTokens: tc.cached, OutputTokens: tc.out}
			if last.Kind != execution.EventUsage || *last.Usage != want {
				t.Fatalf("last event %+v, want usage %+v", last, want)
			}
		})
	}
}

// TestAnswerOfTheOtherKind: a server that ignores the stream flag is read
// as what it sent (by its Content-Type), not as what was asked.
func TestAnswerOfTheOtherKind(t *testing.T) {
	whole := `{"content":[{"type":"text","text":"hi there"}],"stop_reason":"end_turn","usage":{"input_tokens":3,"output_tokens":2}}`
	stream := sse(msgStart,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi there"}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`, msgStop)
	for _, tc := range []struct {
		asked bool
		raw   string
	}{{false, stream}, {true, whole}} {
		srv := upstreamtest.New(upstreamtest.Config{Reply: func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: tc.raw} }})
		url := srv.Start()
		a, _ := anthropic.New(anthropic.Config{ID: "c", BaseURL: url})
		var s sink
		res, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "c", Target: "x", Options: execution.Options{Stream: tc.asked}}, &s)
		srv.Close()
		if err != nil || len(s.events) == 0 {
			t.Fatalf("stream asked %v: %v, %d events", tc.asked, err, len(s.events))
		}
		text := ""
		for _, e := range s.events {
			text += e.Text
		}
		last := s.events[len(s.events)-1]
		if text != "hi there" || res.StopReason != "stop" || last.Kind != execution.EventUsage || last.Usage.OutputTokens != 2 {
			t.Fatalf("stream asked %v: %v, %q %q %+v", tc.asked, err, text, res.StopReason, last)
		}
	}
}
