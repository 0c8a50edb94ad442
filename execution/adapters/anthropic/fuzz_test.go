package anthropic

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/iop-dev/iop/execution"
)

type events []execution.Event

func (e *events) WriteEvent(ev execution.Event) error {
	*e = append(*e, ev)
	return nil
}

// FuzzReadAnswer feeds a provider's answer, whole and as a stream, to the
// adapter's decoders: whatever the bytes, a run ends either with a
// classified failure and no usage, or with well-formed events that end
// in the usage.
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte(`{"content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":2}}`))
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"f\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	f.Add([]byte("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, read := range []func(context.Context, *bytes.Reader, *events) (execution.Result, error){
			func(ctx context.Context, r *bytes.Reader, w *events) (execution.Result, error) {
				return readMessage(ctx, r, w)
			},
			func(ctx context.Context, r *bytes.Reader, w *events) (execution.Result, error) {
				return readStream(ctx, r, w)
			},
		} {
			var evs events
			res, err := read(context.Background(), bytes.NewReader(body), &evs)
			checkRun(t, res, err, evs)
		}
	})
}

func checkRun(t *testing.T, res execution.Result, err error, evs events) {
	t.Helper()
	if err != nil {
		var f *execution.Failure
		if !errors.As(err, &f) {
			t.Fatalf("unclassified error %v", err)
		}
		switch f.Class {
		case execution.FailureProvider, execution.FailureUnavailable, execution.FailureRateLimited, execution.FailureInvalidRequest:
		default:
			t.Fatalf("failure class %v for a provider's answer", f.Class)
		}
		for _, e := range evs {
			if e.Kind == execution.EventUsage {
				t.Fatal("usage written for a failed run")
			}
		}
		return
	}
	if len(evs) == 0 || evs[len(evs)-1].Kind != execution.EventUsage || evs[len(evs)-1].Usage == nil {
		t.Fatalf("a finished run's events do not end in its usage: %+v", evs)
	}
	for _, e := range evs {
		if e.Kind == execution.EventToolCall && e.ToolCall == nil {
			t.Fatal("tool call event without its call")
		}
	}
	switch res.StopReason {
	case "stop", "length", "tool_calls", "content_filter":
	default:
		t.Fatalf("stop reason %q", res.StopReason)
	}
}
