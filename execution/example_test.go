package execution_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/iop-dev/iop/execution"
)

// shout is a provider of its own: it answers the last message in capitals,
// a word per delta. A real one calls its model here; a Node hosts it
// beside the built-in adapters (node.Config.Providers).
type shout struct{}

func (shout) Info() execution.Info {
	return execution.Info{ID: "shout", Adapter: "shout", Category: execution.CategoryLocal, Models: []string{"shout-1"}, Capacity: 4}
}

func (shout) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	msgs := req.Input.Messages
	if len(msgs) == 0 {
		return execution.Result{}, execution.Failf(execution.FailureInvalidRequest, "no messages")
	}
	words := strings.Fields(strings.ToUpper(msgs[len(msgs)-1].Content))
	for i, word := range words {
		if err := ctx.Err(); err != nil {
			return execution.Result{}, err // the host classifies it: Canceled or Deadline
		}
		if i > 0 {
			word = " " + word
		}
		if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: word}); err != nil {
			return execution.Result{}, err // the consumer is gone
		}
	}
	u := execution.Usage{InputTokens: int64(len(msgs)), OutputTokens: int64(len(words))}
	if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: &u}); err != nil {
		return execution.Result{}, err
	}
	return execution.Result{StopReason: "stop"}, nil
}

// printer is an EventWriter that prints what it is given, as a host would
// relay it.
type printer struct{}

func (printer) WriteEvent(e execution.Event) error {
	switch e.Kind {
	case execution.EventDelta:
		fmt.Printf("delta %q\n", e.Text)
	case execution.EventUsage:
		fmt.Printf("usage in=%d out=%d\n", e.Usage.InputTokens, e.Usage.OutputTokens)
	}
	return nil
}

// A provider implements Info and Run; the host (a Node) sends Started
// before Run and the one terminal after it, from what Run returns.
func Example_provider() {
	var p execution.Provider = shout{}
	if err := p.Info().Validate(); err != nil {
		fmt.Println(err)
		return
	}
	req := &execution.RunRequest{
		RunID: "run-1", ProviderID: "shout", Target: "shout-1",
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "hello there"}}},
	}
	if err := req.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := req.Context(context.Background())
	defer cancel()
	res, err := p.Run(ctx, req, printer{})
	fmt.Println("result:", res.StopReason, err)

	// A failed run ends in one classified failure, never in raw upstream
	// text.
	_, err = p.Run(ctx, &execution.RunRequest{RunID: "run-2", ProviderID: "shout", Target: "shout-1"}, printer{})
	fmt.Println("failure:", execution.Classify(ctx, err).Class)

	// Output:
	// delta "HELLO"
	// delta " THERE"
	// usage in=1 out=2
	// result: stop <nil>
	// failure: invalid_request
}
