// Package adaptertest holds what the adapters' tests share: an event
// recorder and the checks every run read from a provider's answer must
// pass, whatever the answer's bytes.
package adaptertest

import (
	"errors"
	"testing"

	"github.com/iop-dev/iop/execution"
)

// Events records the events a run writes.
type Events []execution.Event

// WriteEvent implements execution.EventWriter.
func (e *Events) WriteEvent(ev execution.Event) error {
	*e = append(*e, ev)
	return nil
}

// CheckRun checks how a run read from a provider's answer ended: with a
// failure of one of the classes a provider's answer can earn (never a
// plain error) and no usage written, or with well-formed events, a
// normalized stop reason and, when usageLast, the usage as its last
// event.
func CheckRun(t *testing.T, res execution.Result, err error, evs Events, usageLast bool) {
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
		if usageLast {
			for _, e := range evs {
				if e.Kind == execution.EventUsage {
					t.Fatal("usage written for a failed run")
				}
			}
		}
		return
	}
	for _, e := range evs {
		if (e.Kind == execution.EventToolCall) != (e.ToolCall != nil) || (e.Kind == execution.EventUsage) != (e.Usage != nil) {
			t.Fatalf("malformed event %+v", e)
		}
	}
	if usageLast && (len(evs) == 0 || evs[len(evs)-1].Kind != execution.EventUsage) {
		t.Fatalf("a finished run's events do not end in its usage: %+v", evs)
	}
	switch res.StopReason {
	case "stop", "length", "tool_calls", "content_filter":
	default:
		t.Fatalf("stop reason %q", res.StopReason)
	}
}
