package ollama_test

import (
	"context"
	"fmt"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/ollama"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

// printer prints a run's output.
type printer struct{}

func (printer) WriteEvent(e execution.Event) error {
	if e.Kind == execution.EventDelta {
		fmt.Printf("delta %q\n", e.Text)
	}
	return nil
}

// A normalized run against Ollama's native chat API (here a fake server
// that speaks its real NDJSON stream), and the model list the adapter
// discovers when its Config names no models.
func Example() {
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"llama3.2:3b", "qwen3:8b"}, Reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"Hel", "lo."}}
	}})
	url := srv.Start()
	defer srv.Close()

	a, err := ollama.New(ollama.Config{ID: "ollama", BaseURL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	models, err := a.ListModels(context.Background())
	fmt.Println(models, err)
	res, err := a.Run(context.Background(), &execution.RunRequest{
		RunID: "r1", ProviderID: "ollama", Target: "qwen3:8b", Options: execution.Options{Stream: true},
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "Say hello."}}},
	}, printer{})
	fmt.Println(res.StopReason, err, srv.Requests()[1].API)
	// Output:
	// [llama3.2:3b qwen3:8b] <nil>
	// delta "Hel"
	// delta "lo."
	// stop <nil> ollama_chat
}
