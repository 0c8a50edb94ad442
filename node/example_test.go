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
