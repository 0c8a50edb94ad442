package anthropic_test

import (
	"context"
	"fmt"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/anthropic"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

// apiKey is a credential held in memory (a Node reads its keys from files
// or the environment: execution.FileCredential, EnvCredential).
type apiKey string

func (k apiKey) Secret(context.Context) (string, error) { return string(k), nil }

// printer prints a run's output.
type printer struct{}

func (printer) WriteEvent(e execution.Event) error {
	switch e.Kind {
	case execution.EventDelta:
		fmt.Printf("delta %q\n", e.Text)
	case execution.EventUsage:
		fmt.Printf("usage in %d, out %d\n", e.Usage.InputTokens, e.Usage.OutputTokens)
	}
	return nil
}

// A normalized run against a Messages API server (here a fake one that
// speaks the real stream format): the adapter sends the key as x-api-key
// and the anthropic-version header, and turns the stream's text deltas
// and usage into run events.
func Example() {
	srv := upstreamtest.New(upstreamtest.Config{Reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"Bonjour", " !"}, Usage: upstreamtest.Usage{InputTokens: 12, OutputTokens: 3}}
	}})
	url := srv.Start()
	defer srv.Close()

	a, err := anthropic.New(anthropic.Config{ID: "claude", BaseURL: url, Credential: apiKey("sk-ant-example"), Models: []string{"claude-x"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := a.Run(context.Background(), &execution.RunRequest{
		RunID: "r1", ProviderID: "claude", Target: "claude-x", Options: execution.Options{Stream: true},
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "Say hello in French."}}},
	}, printer{})
	fmt.Println(res.StopReason, err)
	q := srv.Requests()[0]
	fmt.Println(q.API, q.Header.Get("Anthropic-Version"), q.Header.Get("X-Api-Key"))
	// Output:
	// delta "Bonjour"
	// delta " !"
	// usage in 12, out 3
	// stop <nil>
	// messages 2023-06-01 sk-ant-example
}
