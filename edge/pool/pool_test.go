package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func cand(node, prov string, gen uint64, capacity int) Candidate {
	return Candidate{Key: Key{node, prov}, Generation: gen, Capacity: capacity, Weight: 1}
}

func fixed(cs ...Candidate) func() []Candidate { return func() []Candidate { return cs } }

func TestFIFOAndCapacity(t *testing.T) {
	p := New()
	c := cand("n", "p", 1, 2)
	l1, err := p.Acquire(context.Background(), fixed(c), false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := p.Acquire(context.Background(), fixed(c), false, time.Second)
	if got := p.Load(c.Key, 1); got.InFlight != 2 {
		t.Fatalf("load %+v", got)
	}
	// Two more wait, in order.
	order := make(chan int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			l, err := p.Acquire(context.Background(), fixed(c), false, 10*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			l.Release()
		})
		for p.Stats().Queued != i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	if got := p.Load(c.Key, 1); got.Queued != 2 {
		t.Fatalf("queued %+v", got)
	}
	l1.Release()
	if first := <-order; first != 0 {
		t.Fatalf("waiter %d served first", first)
	}
	l2.Release()
	l2.Release() // a second release does nothing
	wg.Wait()
	if s := p.Stats(); s.Granted != s.Released || s.DoubleRelease != 1 {
		t.Fatalf("stats %+v", s)
	}
	if got := p.Load(c.Key, 1); got != (Load{}) {
		t.Fatalf("load after all released %+v", got)
	}
}

func TestQueueTimeoutAndNoCandidate(t *testing.T) {
	p := New()
	c := cand("n", "p", 1, 1)
	l, _ := p.Acquire(context.Background(), fixed(c), false, time.Second)
	if _, err := p.Acquire(context.Background(), fixed(c), false, 20*time.Millisecond); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("err %v", err)
	}
	if _, err := p.Acquire(context.Background(), fixed(), false, time.Second); !errors.Is(err, ErrNoCandidate) {
		t.Fatalf("err %v", err)
	}
	l.Release()
	if s := p.Stats(); s.Queued != 0 {
		t.Fatalf("waiters left: %+v", s)
	}
}

func TestOfflineProviderFailsItsWaitersAtOnce(t *testing.T) {
	p := New()
	var mu sync.Mutex
	online := true
	c := cand("n", "p", 1, 1)
	cands := func() []Candidate {
		mu.Lock()
		defer mu.Unlock()
		if online {
			return []Candidate{c}
		}
		return nil
	}
	l, _ := p.Acquire(context.Background(), cands, false, time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), cands, false, time.Hour)
		done <- err
	}()
	for p.Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	online = false
	mu.Unlock()
	p.Kick()
	if err := <-done; !errors.Is(err, ErrNoCandidate) {
		t.Fatalf("err %v", err)
	}
	l.Release()
}

func TestNewGenerationRestoresCapacity(t *testing.T) {
	p := New()
	old := cand("n", "p", 1, 1)
	l, _ := p.Acquire(context.Background(), fixed(old), false, time.Second)
	// The Node reconnects: generation 2 has its full capacity at once.
	fresh := cand("n", "p", 2, 1)
	l2, err := p.Acquire(context.Background(), fixed(fresh), false, 20*time.Millisecond)
	if err != nil {
		t.Fatalf("new generation not admitted: %v", err)
	}
	l.Release() // the fenced lease's late release does not free generation 2's slot
	if got := p.Load(fresh.Key, 2); got.InFlight != 1 {
		t.Fatalf("load %+v", got)
	}
	l2.Release()
}

func TestWeighted(t *testing.T) {
	p := New()
	a, b := cand("n", "a", 1, 1000), cand("n", "b", 1, 1000)
	a.Weight, b.Weight = 9, 1
	counts := map[string]int{}
	for range 1000 {
		l, _ := p.Acquire(context.Background(), fixed(a, b), true, time.Second)
		counts[l.ProviderID]++
		l.Release()
	}
	if counts["a"] < 800 || counts["b"] < 40 {
		t.Fatalf("weighted choice %v", counts)
	}
	// Ordered: always the first with room.
	for range 10 {
		l, _ := p.Acquire(context.Background(), fixed(a, b), false, time.Second)
		if l.ProviderID != "a" {
			t.Fatalf("ordered picked %s", l.ProviderID)
		}
		l.Release()
	}
}

func TestClose(t *testing.T) {
	p := New()
	c := cand("n", "p", 1, 1)
	p.Acquire(context.Background(), fixed(c), false, time.Second)
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), fixed(c), false, time.Hour)
		done <- err
	}()
	for p.Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	p.Close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("err %v", err)
	}
}
