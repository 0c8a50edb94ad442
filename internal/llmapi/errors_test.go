package llmapi_test

import (
	"strings"
	"testing"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
)

// TestFailureError: each run failure class has a status of its own and a
// message of the gateway's (the failure's own note, which may name a
// provider, never reaches the client); a run's deadline reads as the
// Edge's own deadline does; a missing failure is an internal error.
func TestFailureError(t *testing.T) {
	want := map[execution.FailureClass]int{
		execution.FailureCanceled: 499, execution.FailureDeadline: 504, execution.FailureProvider: 502,
		execution.FailureUnavailable: 503, execution.FailureInvalidRequest: 400, execution.FailureTransport: 503,
		execution.FailureInternal: 500, execution.FailureRateLimited: 429,
	}
	for c := execution.FailureCanceled; c <= execution.FailureRateLimited; c++ {
		e := llmapi.FailureError(&execution.Failure{Class: c, Message: `provider "secret-box" said no`})
		if e.Status != want[c] || e.Type == "" || e.Message == "" || strings.Contains(e.Message, "secret-box") {
			t.Errorf("%v: %+v", c, e)
		}
	}
	d := llmapi.FailureError(&execution.Failure{Class: execution.FailureDeadline})
	if d.Type != "timeout" || d.Message != "The request exceeded its deadline." {
		t.Errorf("deadline: %+v", d)
	}
	if e := llmapi.FailureError(nil); e.Status != 500 {
		t.Errorf("nil: %+v", e)
	}
	var ev llmapi.RunEvents
	evs := ev.Convert(execution.Event{Kind: execution.EventFailed})
	if len(evs) != 1 || evs[0].Kind != llmapi.EvError || evs[0].Err.Status != 500 {
		t.Errorf("a failed event without its failure: %+v", evs)
	}
}
