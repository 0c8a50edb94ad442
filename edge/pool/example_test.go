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

// Two GPU boxes of different sizes behind one route: with LeastLoaded,
// each request takes the box with the smallest share of its capacity in
// flight, so both fill in step.
func Example_leastLoaded() {
	p := pool.New()
	defer p.Close()
	boxes := func() []pool.Candidate {
		return []pool.Candidate{
			{Key: pool.Key{NodeID: "big-box", ProviderID: "vllm"}, Generation: 1, Capacity: 4},
			{Key: pool.Key{NodeID: "small-box", ProviderID: "ollama"}, Generation: 1, Capacity: 2},
		}
	}
	var leases []*pool.Lease
	for range 6 {
		l, err := p.Acquire(context.Background(), pool.Request{Candidates: boxes, Choose: pool.LeastLoaded, Timeout: time.Minute})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(l.NodeID)
		leases = append(leases, l)
	}
	for _, l := range leases {
		l.Release()
	}
	// Output:
	// big-box
	// small-box
	// big-box
	// big-box
	// small-box
	// big-box
}
