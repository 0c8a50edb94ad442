package pool_test

import (
	"context"
	"fmt"
	"time"

	"github.com/iop-dev/iop/edge/pool"
)

// One provider with one slot, and two requests waiting for it: the
// higher priority class is served first, although it came second.
func Example() {
	p := pool.New()
	defer p.Close()
	ctx := context.Background()
	box := func() []pool.Candidate {
		return []pool.Candidate{{Key: pool.Key{NodeID: "gpu-box", ProviderID: "vllm"}, Generation: 1, Capacity: 1}}
	}
	first, err := p.Acquire(ctx, pool.Request{Candidates: box, Timeout: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("running on", first.NodeID, first.ProviderID)

	type grant struct {
		name  string
		lease *pool.Lease
	}
	served := make(chan grant)
	for _, w := range []struct {
		name     string
		priority int
	}{{"batch", 0}, {"interactive", 1}} {
		queued := p.Stats().Queued
		go func() {
			l, err := p.Acquire(ctx, pool.Request{Candidates: box, Priority: w.priority, Timeout: time.Minute})
			if err != nil {
				served <- grant{name: err.Error()}
				return
			}
			served <- grant{w.name, l}
		}()
		for p.Stats().Queued == queued { // until it waits in the queue
			time.Sleep(time.Millisecond)
		}
	}
	first.Release() // frees the slot: the queue's best takes it
	for _, when := range []string{"next:", "then:"} {
		g := <-served
		fmt.Println(when, g.name)
		if g.lease != nil {
			g.lease.Release()
		}
	}
	s := p.Stats()
	fmt.Println("granted", s.Granted, "released", s.Released)
	// Output:
	// running on gpu-box vllm
	// next: interactive
	// then: batch
	// granted 3 released 3
}
