package controlplane_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
)

// A Hub with one enrolled Edge: the Edge dials in, the Hub shows the Node
// the Edge configured (offline: it never connected), and an operator
// command runs at the Edge. Serve Hub.Handler over HTTPS for the operator
// API and the status page.
func ExampleHub() {
	const edgeToken = "edge-token-0123456789abcdef0123"
	hub, err := controlplane.New(controlplane.Config{
		Edges:     []controlplane.EdgeRecord{{ID: "edge-a", TokenHash: controlplane.HashToken(edgeToken)}},
		Operators: []controlplane.Operator{{Name: "alice", TokenHash: controlplane.HashToken("op-token-0123456789abcdef0123")}},
	})
	if err != nil {
		panic(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	defer wg.Wait()
	defer hub.Close()
	wg.Go(func() { hub.ServeEdges(ln) })

	// The Edge side: an edge.Server reporting to the Hub.
	srv, _ := edge.New(edge.Config{Epoch: 1,
		Nodes: []nodes.Record{{ID: "gpu-box", TokenHash: nodes.HashToken("node-token-0123456789abcdef"), Providers: []nodes.ProviderSpec{
			{ID: "vllm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"qwen2.5-7b"}, Capacity: 4}}}},
		Routes: []edge.Route{{Model: "qwen", Targets: []edge.Target{{ProviderID: "vllm", Model: "qwen2.5-7b"}}}},
	})
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wg.Go(func() {
		srv.ConnectControlPlane(ctx, controlplane.ConnectorConfig{HubAddr: ln.Addr().String(), EdgeID: "edge-a", Token: edgeToken})
	})

	var view controlplane.EdgeView
	for view.StatusAt == nil {
		time.Sleep(10 * time.Millisecond)
		view, _ = hub.Edge("edge-a")
	}
	n := view.Nodes[0]
	fmt.Printf("%s: connected %v; node %s connected %v; provider %s %s\n",
		view.ID, view.Connected, n.ID, n.Connected, n.Providers[0].ID, n.Providers[0].Status)

	run, err := hub.Command(ctx, "edge-a", controlplane.Command{Operation: controlplane.OpProviderDisable, ProviderID: "vllm"})
	if err != nil {
		panic(err)
	}
	defer run.Close()
	phases, _ := run.Wait(ctx)
	for _, p := range phases {
		fmt.Println(p.Seq, p.Phase)
	}
	// Output:
	// edge-a: connected true; node gpu-box connected false; provider vllm unavailable
	// 1 accepted
	// 2 running
	// 3 succeeded
}
