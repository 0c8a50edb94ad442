package node_test

import (
	"context"
	"fmt"
	"time"

	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/node"
)

// A Node is configured with its Edge's address, its identity and the
// providers it is willing to host; Run keeps it connected until the context
// ends, reconnecting with backoff.
func ExampleRuntime() {
	rt, err := node.New(node.Config{
		EdgeAddr:  "127.0.0.1:1", // nothing listens here: the runtime keeps retrying
		NodeID:    "gpu-box",
		Token:     "s3cret-node-token",
		Providers: []node.Hosted{{Provider: executiontest.New("local-llm", "qwen")}},
		Backoff:   node.Backoff{Base: 10 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = rt.Run(ctx)
	fmt.Println(err, rt.Status().State)
	// Output: context deadline exceeded stopped
}

// Shutdown stops a Node gracefully, as a daemon does on SIGTERM: the Edge
// is told to send it nothing new and the work in flight gets the grace to
// finish; Run then returns ErrShutdown.
func ExampleRuntime_Shutdown() {
	rt, err := node.New(node.Config{
		EdgeAddr:  "127.0.0.1:1", // nothing listens here: the runtime keeps retrying
		NodeID:    "gpu-box",
		Token:     "s3cret-node-token",
		Providers: []node.Hosted{{Provider: executiontest.New("local-llm", "qwen")}},
		Backoff:   node.Backoff{Base: 10 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- rt.Run(context.Background()) }()
	time.Sleep(20 * time.Millisecond) // let it try to connect

	grace, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fmt.Println(rt.Shutdown(grace))
	fmt.Println(<-done, rt.Status().State)
	// Output:
	// <nil>
	// node: runtime shut down stopped
}
