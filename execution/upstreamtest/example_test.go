package upstreamtest_test

import (
	"context"
	"fmt"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

type printer struct{}

func (printer) WriteEvent(e execution.Event) error {
	switch e.Kind {
	case execution.EventDelta:
		fmt.Printf("delta %q\n", e.Text)
	case execution.EventToolCall:
		fmt.Printf("tool call %s(%s)\n", e.ToolCall.Name, e.ToolCall.Arguments)
	}
	return nil
}

// A scripted upstream drives an adapter through the real Chat Completions
// stream format: deltas, a tool call whose arguments arrive in fragments,
// and usage.
func Example() {
	srv := upstreamtest.New(upstreamtest.Config{Reply: func(r *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{
			Text:      []string{"Checking", " the weather."},
			ToolCalls: []upstreamtest.ToolCall{{ID: "call_1", Name: "weather", Arguments: `{"city":"Seoul"}`}},
		}
	}})
	url := srv.Start()
	defer srv.Close()

	a, _ := openai.New(openai.Config{ID: "local", BaseURL: url})
	res, err := a.Run(context.Background(), &execution.RunRequest{
		RunID: "r1", ProviderID: "local", Target: "fake-model", Options: execution.Options{Stream: true},
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "weather?"}}},
	}, printer{})
	fmt.Println(res.StopReason, err, srv.Requests()[0].IncludeUsage)
	// Output:
	// delta "Checking"
	// delta " the weather."
	// tool call weather({"city":"Seoul"})
	// tool_calls <nil> true
}
