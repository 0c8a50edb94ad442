package upstream

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
)

// events is a scripted llmapi.Decoder.
type events struct {
	evs      []llmapi.Event
	released bool
}

func (d *events) Next() (llmapi.Event, error) {
	if len(d.evs) == 0 {
		return llmapi.Event{}, io.EOF
	}
	e := d.evs[0]
	d.evs = d.evs[1:]
	return e, nil
}
func (d *events) Release()    { d.released = true }
func (d *events) Ready() bool { return len(d.evs) > 0 }

type recorder []execution.Event

func (r *recorder) WriteEvent(e execution.Event) error { *r = append(*r, e); return nil }

// TestRelay: canonical events become run events: deltas as they come
// (reasoning marked, a signature alone dropped), a tool call whole at its
// block's end, the usage once, last, before the result; the decoder is
// released.
func TestRelay(t *testing.T) {
	dec := &events{evs: []llmapi.Event{
		{Kind: llmapi.EvStart, ID: "a"},
		{Kind: llmapi.EvBlockStart, Index: 0, Block: llmapi.BlockThinking},
		{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockThinking, Text: "hmm"},
		{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockThinking, Signature: "sig"},
		{Kind: llmapi.EvBlockStop, Index: 0, Block: llmapi.BlockThinking},
		{Kind: llmapi.EvBlockStart, Index: 1, Block: llmapi.BlockText},
		{Kind: llmapi.EvDelta, Index: 1, Block: llmapi.BlockText, Text: "hi"},
		{Kind: llmapi.EvBlockStop, Index: 1, Block: llmapi.BlockText},
		{Kind: llmapi.EvBlockStart, Index: 2, Block: llmapi.BlockToolUse, ToolID: "t1", Name: "f"},
		{Kind: llmapi.EvDelta, Index: 2, Block: llmapi.BlockToolUse, Text: `{"a":`},
		{Kind: llmapi.EvDelta, Index: 2, Block: llmapi.BlockToolUse, Text: `1}`},
		{Kind: llmapi.EvBlockStop, Index: 2, Block: llmapi.BlockToolUse},
		{Kind: llmapi.EvBlockStart, Index: 3, Block: llmapi.BlockToolUse, ToolID: "t2", Name: "g"},
		{Kind: llmapi.EvBlockStop, Index: 3, Block: llmapi.BlockToolUse},
		{Kind: llmapi.EvUsage, Usage: llmapi.Usage{Input: 5, Output: 3, Cached: 2, Reasoning: 1}},
		{Kind: llmapi.EvStop, Reason: llmapi.StopToolUse},
	}}
	var got recorder
	res, err := Relay(context.Background(), dec, &got)
	if err != nil || res.StopReason != "tool_calls" || !dec.released {
		t.Fatalf("%+v %v, released %v", res, err, dec.released)
	}
	want := recorder{
		{Kind: execution.EventDelta, Text: "hmm", Reasoning: true},
		{Kind: execution.EventDelta, Text: "hi"},
		{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: "t1", Name: "f", Arguments: `{"a":1}`}},
		{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: "t2", Name: "g", Arguments: "{}"}},
		{Kind: execution.EventUsage, Usage: &execution.Usage{InputTokens: 5, OutputTokens: 3, CachedInputTokens: 2, ReasoningTokens: 1}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
}

// TestRelayFailures: an error event is the run's failure, classed by its
// type; once the run's context has ended, the failure is the context's;
// tool arguments past MaxAnswer fail the run.
func TestRelayFailures(t *testing.T) {
	errEvent := func(typ string) []llmapi.Event {
		return []llmapi.Event{{Kind: llmapi.EvError, Err: &llmapi.APIError{Status: 502, Type: typ, Message: "the provider failed mid-stream"}}}
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		evs   []llmapi.Event
		class execution.FailureClass
		note  string
	}{
		{"rate limit", context.Background(), errEvent("rate_limit"), execution.FailureRateLimited, "the provider failed mid-stream (rate_limit)"},
		{"overloaded", context.Background(), errEvent("overloaded"), execution.FailureUnavailable, "the provider failed mid-stream (overloaded)"},
		{"invalid request", context.Background(), errEvent("invalid_request"), execution.FailureInvalidRequest, "the provider failed mid-stream (invalid_request)"},
		{"api error", context.Background(), errEvent("api_error"), execution.FailureProvider, "the provider failed mid-stream"},
		{"canceled", canceled, errEvent("api_error"), execution.FailureCanceled, "canceled"},
		{"arguments too large", context.Background(), []llmapi.Event{
			{Kind: llmapi.EvBlockStart, Index: 0, Block: llmapi.BlockToolUse, ToolID: "t", Name: "f"},
			{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockToolUse, Text: strings.Repeat("x", MaxAnswer/2)},
			{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockToolUse, Text: strings.Repeat("x", MaxAnswer/2+1)},
		}, execution.FailureProvider, "tool call arguments too large"},
		{"no terminal", context.Background(), nil, execution.FailureProvider, "upstream answer broke off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got recorder
			_, err := Relay(tc.ctx, &events{evs: tc.evs}, &got)
			f, ok := errors.AsType[*execution.Failure](err)
			if !ok || f.Class != tc.class || f.Message != tc.note || len(got) != 0 {
				t.Fatalf("%v (events %+v), want %v: %s", err, got, tc.class, tc.note)
			}
		})
	}
}
