package nodes_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/node"
)

// An Edge's registry and one Node in the same process: the Node dials,
// registers with its token, hosts the provider the Edge configured for it,
// and the Edge runs a request on the Node's exact generation.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Edge side: the Node record comes from edge.yaml.
	store, _ := nodes.NewStaticStore([]nodes.Record{{
		ID:        "gpu-box",
		TokenHash: nodes.HashToken("s3cret-node-token"),
		Providers: []nodes.ProviderSpec{{ID: "local-llm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"qwen"}, Capacity: 4}},
	}})
	reg, _ := nodes.New(nodes.Config{Store: store, Epoch: 1})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go reg.Serve(ln)
	defer reg.Close()
	events := reg.Subscribe()

	// Node side: node.yaml's allow-list holds the provider instance.
	model := executiontest.New("local-llm", "qwen")
	model.Reply = []string{"Hello", " from", " the Node"}
	rt, _ := node.New(node.Config{
		EdgeAddr:  ln.Addr().String(),
		NodeID:    "gpu-box",
		Token:     "s3cret-node-token",
		Providers: []node.Hosted{{Provider: model}},
	})
	nodeCtx, stopNode := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { rt.Run(nodeCtx); close(done) }()
	defer func() { stopNode(); <-done }()

	ev, _ := events.Next(ctx)
	fmt.Println(ev.Kind, ev.NodeID)

	run, err := reg.StartRun(ctx, "gpu-box", ev.Generation, &execution.RunRequest{
		RunID: "run-1", ProviderID: "local-llm", Target: "qwen",
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "hi"}}},
	})
	if err == nil {
		// The Node has taken the run once its first event came; one it
		// refused unopened (it is shutting down) may go elsewhere.
		err = run.Started(ctx)
	}
	if errors.Is(err, nodes.ErrNotStarted) {
		fmt.Println("not started: admit it again elsewhere")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		e, err := run.Next(ctx)
		if err != nil {
			break
		}
		switch e.Kind {
		case execution.EventDelta:
			fmt.Print(e.Text)
		case execution.EventCompleted:
			fmt.Println("\ncompleted:", e.StopReason)
		}
	}
	// Output:
	// ready gpu-box
	// Hello from the Node
	// completed: stop
}
