package ollama

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

// FuzzReadChat feeds /api/chat answers to the adapter's decoder: whatever
// the bytes, a run ends either with the provider's failure and no usage,
// or with well-formed events that end in the usage.
func FuzzReadChat(f *testing.F) {
	f.Add([]byte(`{"message":{"role":"assistant","content":"a","thinking":"t"},"done":false}` + "\n" +
		`{"message":{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]},"done":false}` + "\n" +
		`{"done":true,"done_reason":"stop","prompt_eval_count":3,"eval_count":2}` + "\n"))
	f.Add([]byte(`{"error":"model not found"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var evs events
		res, err := readChat(context.Background(), bytes.NewReader(body), &evs)
		if err != nil {
			var f *execution.Failure
			if !errors.As(err, &f) || f.Class != execution.FailureProvider {
				t.Fatalf("error %v, want the provider's failure", err)
			}
			for _, e := range evs {
				if e.Kind == execution.EventUsage {
					t.Fatal("usage written for a failed run")
				}
			}
			return
		}
		if len(evs) == 0 || evs[len(evs)-1].Kind != execution.EventUsage {
			t.Fatalf("a finished run's events do not end in its usage: %+v", evs)
		}
		for _, e := range evs {
			if (e.Kind == execution.EventToolCall) != (e.ToolCall != nil) || (e.Kind == execution.EventUsage) != (e.Usage != nil) {
				t.Fatalf("malformed event %+v", e)
			}
		}
		switch res.StopReason {
		case "stop", "length", "tool_calls":
		default:
			t.Fatalf("stop reason %q", res.StopReason)
		}
	})
}
