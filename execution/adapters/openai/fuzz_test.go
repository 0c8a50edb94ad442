package openai

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
// failure of a provider's classes, or with well-formed events and a
// normalized stop reason.
func FuzzReadAnswer(f *testing.F) {
	f.Add([]byte(`{"choices":[{"message":{"content":"hi","reasoning_content":"r","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`))
	f.Add([]byte(`data: {"choices":[{"index":0,"delta":{"content":"a","tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{\"x\""}}]}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}` + "\n\n" + "data: [DONE]\n\n"))
	f.Add([]byte(`data: {"error":{"message":"busy","code":503}}` + "\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, read := range []func(context.Context, *bytes.Reader, *events) (execution.Result, error){
			func(ctx context.Context, r *bytes.Reader, w *events) (execution.Result, error) {
				return readChat(ctx, r, w)
			},
			func(ctx context.Context, r *bytes.Reader, w *events) (execution.Result, error) {
				return readChatStream(ctx, r, w)
			},
		} {
			var evs events
			res, err := read(context.Background(), bytes.NewReader(body), &evs)
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
				continue
			}
			for _, e := range evs {
				if (e.Kind == execution.EventToolCall) != (e.ToolCall != nil) || (e.Kind == execution.EventUsage) != (e.Usage != nil) {
					t.Fatalf("malformed event %+v", e)
				}
			}
			switch res.StopReason {
			case "stop", "length", "tool_calls", "content_filter":
			default:
				t.Fatalf("stop reason %q", res.StopReason)
			}
		}
	})
}
