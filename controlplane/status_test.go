package controlplane_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
)

// bigEdge is a Backend with many Nodes and no events.
type bigEdge struct {
	nodes []nodes.NodeSnapshot
	reg   *nodes.Registry
}

func (b *bigEdge) Status() controlplane.Status {
	return controlplane.Status{GeneratedAt: time.Now(), Routes: 3, Queued: 5, MaxQueued: 1024, QueueFull: 7, QueuedBytes: 5 << 10, MaxQueuedBytes: 256 << 20, ConfigRevision: 1, Nodes: b.nodes}
}
func (b *bigEdge) Subscribe() *nodes.Subscription { return b.reg.Subscribe() }
func (b *bigEdge) Command(controlplane.Command) (controlplane.Operation, error) {
	return nil, controlplane.Reject(controlplane.RejectUnknownOperation, "none")
}

// TestLargeStatus: a status of 10,000 Nodes travels as stream data, far
// beyond one frame or one message, and arrives whole.
func TestLargeStatus(t *testing.T) {
	const n = 10000
	big := &bigEdge{}
	for i := range n {
		big.nodes = append(big.nodes, nodes.NodeSnapshot{
			ID: fmt.Sprintf("node-%05d", i), Connected: i%2 == 0, Generation: uint64(i), ConfigRevision: 1,
			Providers: []nodes.ProviderSnapshot{{ID: fmt.Sprintf("p-%05d", i), Adapter: "ollama", Category: execution.CategoryLocal,
				Models: []string{"llama3.1:8b", "qwen2.5:7b"}, Status: nodes.StatusAvailable, Health: nodes.HealthHealthy, Capacity: 2, InFlight: i % 3}},
		})
	}
	st, _ := nodes.NewStaticStore(nil)
	reg, err := nodes.New(nodes.Config{Store: st, Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	big.reg = reg
	h := startHub(t, "", func(c *controlplane.Config) {
		c.Edges = append(c.Edges, controlplane.EdgeRecord{ID: "big", TokenHash: controlplane.HashToken(edgeToken("big"))})
	})
	c, err := controlplane.NewConnector(controlplane.ConnectorConfig{HubAddr: h.addr, EdgeID: "big", Token: edgeToken("big"), Backoff: fast}, big)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	waitFor(t, "the big status", func() bool { e, _ := h.hub.Edge("big"); return len(e.Nodes) == n })
	e, _ := h.hub.Edge("big")
	online := 0
	for i, v := range e.Nodes {
		if v.ID != fmt.Sprintf("node-%05d", i) || len(v.Providers) != 1 || v.Providers[0].InFlight != i%3 || len(v.Providers[0].Models) != 2 {
			t.Fatalf("node %d: %+v", i, v)
		}
		if v.Connected {
			online++
		}
	}
	if online != n/2 || e.Routes != 3 || e.Queued != 5 || e.MaxQueued != 1024 || e.QueueFull != 7 || e.QueuedBytes != 5<<10 || e.MaxQueuedBytes != 256<<20 {
		t.Fatalf("online %d routes %d, queued %d of %d (%d of %d bytes), %d turned away", online, e.Routes, e.Queued, e.MaxQueued, e.QueuedBytes, e.MaxQueuedBytes, e.QueueFull)
	}
}
