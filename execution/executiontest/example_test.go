package executiontest_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
)

// text collects a run's output.
type text struct{ strings.Builder }

func (t *text) WriteEvent(e execution.Event) error {
	if e.Kind == execution.EventDelta {
		t.WriteString(e.Text)
	}
	return nil
}

// A scripted provider streams its reply; a blocking one holds its run
// until the caller cancels it, which is how code that hosts or
// dispatches runs is tested for cancellation.
func Example() {
	p := executiontest.New("local", "m")
	p.Reply = []string{"Hel", "lo"}
	p.StopReason = "stop"
	req := &execution.RunRequest{RunID: "r1", ProviderID: "local", Target: "m"}
	var out text
	res, err := p.Run(context.Background(), req, &out)
	fmt.Println(out.String(), res.StopReason, err)

	slow := executiontest.New("slow", "m")
	slow.Block = true
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-slow.Started() // the run has begun: cancel it
		cancel()
	}()
	_, err = slow.Run(ctx, req, &out)
	fmt.Println(err, <-slow.Ended(), slow.Runs())
	// Output:
	// Hello stop <nil>
	// context canceled context canceled 1
}
