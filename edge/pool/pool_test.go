package pool

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	l1, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Second})
	if got := p.Load(c.Key, 1); got.InFlight != 2 {
		t.Fatalf("load %+v", got)
	}
	// Two more wait, in order.
	order := make(chan int, 2)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			l, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: 10 * time.Second})
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

func TestEndedContextTakesNoSlot(t *testing.T) {
	p := New()
	c := cand("n", "p", 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if l, err := p.Acquire(ctx, Request{Candidates: fixed(c), Timeout: time.Second}); !errors.Is(err, context.Canceled) || l != nil {
		t.Fatalf("Acquire with an ended context = %v, %v", l, err)
	}
	if got, s := p.Load(c.Key, 1), p.Stats(); got != (Load{}) || s.Granted != 0 {
		t.Fatalf("load %+v, stats %+v", got, s)
	}
}

func TestQueueTimeoutAndNoCandidate(t *testing.T) {
	p := New()
	c := cand("n", "p", 1, 1)
	l, _ := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Second})
	if _, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: 20 * time.Millisecond}); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("err %v", err)
	}
	if _, err := p.Acquire(context.Background(), Request{Candidates: fixed(), Timeout: time.Second}); !errors.Is(err, ErrNoCandidate) {
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
	l, _ := p.Acquire(context.Background(), Request{Candidates: cands, Timeout: time.Second})
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), Request{Candidates: cands, Timeout: time.Hour})
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
	l, _ := p.Acquire(context.Background(), Request{Candidates: fixed(old), Timeout: time.Second})
	// The Node reconnects: generation 2 has its full capacity at once.
	fresh := cand("n", "p", 2, 1)
	l2, err := p.Acquire(context.Background(), Request{Candidates: fixed(fresh), Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("new generation not admitted: %v", err)
	}
	l.Release() // the fenced lease's late release does not free generation 2's slot
	if got := p.Load(fresh.Key, 2); got.InFlight != 1 {
		t.Fatalf("load %+v", got)
	}
	l2.Release()
}

// TestStaleGenerationIsNeverGranted: a request holding a candidate list
// from before a reconnect names a generation the pool has seen replaced.
// Adopting it again would write off the current generation's lease and
// grant its one slot twice.
func TestStaleGenerationIsNeverGranted(t *testing.T) {
	p := New()
	fresh := cand("n", "p", 2, 1)
	l2, err := p.Acquire(context.Background(), Request{Candidates: fixed(fresh), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	stale := cand("n", "p", 1, 1)
	if l, err := p.Acquire(context.Background(), Request{Candidates: fixed(stale), Timeout: 20 * time.Millisecond}); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("stale generation: lease %+v, %v; want ErrQueueTimeout", l, err)
	}
	if got := p.Load(fresh.Key, 2); got.InFlight != 1 {
		t.Fatalf("generation 2 load %+v after a stale request, want its one lease", got)
	}
	// Its slot is still the current generation's: taken until released.
	if _, err := p.Acquire(context.Background(), Request{Candidates: fixed(fresh), Timeout: 20 * time.Millisecond}); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("generation 2 slot granted twice: %v", err)
	}
	l2.Release()
	if got := p.Load(fresh.Key, 2); got.InFlight != 0 || got.Queued != 0 {
		t.Fatalf("load %+v after the release", got)
	}
}

// TestReleaseUnderRaisedCapacity: a lease granted under capacity 1 is
// released after the capacity went up to 3 and two more were granted.
// The slot it frees is the third of three, and the request waiting for it
// is served then, not left to wait beside it.
func TestReleaseUnderRaisedCapacity(t *testing.T) {
	p := New()
	var capacity atomic.Int64
	capacity.Store(1)
	cands := func() []Candidate { return []Candidate{cand("n", "p", 1, int(capacity.Load()))} }
	first, err := p.Acquire(context.Background(), Request{Candidates: cands, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	capacity.Store(3)
	for range 2 {
		if _, err := p.Acquire(context.Background(), Request{Candidates: cands, Timeout: time.Second}); err != nil {
			t.Fatalf("under the raised capacity: %v", err)
		}
	}
	got := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), Request{Candidates: cands, Timeout: time.Minute})
		got <- err
	}()
	for p.Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	first.Release() // serves the queue before it returns
	if q := p.Stats().Queued; q != 0 {
		t.Fatalf("%d still queued after a slot of three was freed with two in flight", q)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

func TestWeighted(t *testing.T) {
	p := New()
	a, b := cand("n", "a", 1, 1000), cand("n", "b", 1, 1000)
	a.Weight, b.Weight = 9, 1
	counts := map[string]int{}
	for range 1000 {
		l, _ := p.Acquire(context.Background(), Request{Candidates: fixed(a, b), Choose: ByWeight, Timeout: time.Second})
		counts[l.ProviderID]++
		l.Release()
	}
	if counts["a"] < 800 || counts["b"] < 40 {
		t.Fatalf("weighted choice %v", counts)
	}
	// Ordered: always the first with room.
	for range 10 {
		l, _ := p.Acquire(context.Background(), Request{Candidates: fixed(a, b), Timeout: time.Second})
		if l.ProviderID != "a" {
			t.Fatalf("ordered picked %s", l.ProviderID)
		}
		l.Release()
	}
}

// TestLeastLoaded: each request takes the free candidate with the
// smallest share of its capacity in flight, the first among equals, so
// a provider of capacity 4 and one of 2 fill in step.
func TestLeastLoaded(t *testing.T) {
	p := New()
	a, b := cand("n", "a", 1, 4), cand("n", "b", 1, 2)
	var got []string
	var leases []*Lease
	for range 6 {
		l, err := p.Acquire(context.Background(), Request{Candidates: fixed(a, b), Choose: LeastLoaded, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, l.ProviderID)
		leases = append(leases, l)
	}
	// 0/4 = 0/2: a; 1/4 > 0/2: b; 1/4 < 1/2: a; 2/4 = 1/2: a; 3/4 > 1/2: b;
	// b full: a.
	if want := "a,b,a,a,b,a"; strings.Join(got, ",") != want {
		t.Fatalf("least loaded chose %s, want %s", strings.Join(got, ","), want)
	}
	leases[0].Release() // a: 3/4
	leases[1].Release() // b: 1/2, the smaller share
	l, err := p.Acquire(context.Background(), Request{Candidates: fixed(a, b), Choose: LeastLoaded, Timeout: time.Second})
	if err != nil || l.ProviderID != "b" {
		t.Fatalf("with a at 3/4 and b at 1/2: %v %v, want b", l, err)
	}
	leases[0], leases[1] = nil, l
	for _, l := range leases {
		if l != nil {
			l.Release()
		}
	}
	if s := p.Stats(); s.Granted != s.Released {
		t.Fatalf("stats %+v", s)
	}
}

// TestChoiceArithmetic: choosing by weight or by load never overflows,
// whatever the candidates' weights and capacities. A weight sum past the
// int range made the weighted choice panic with the pool's lock held,
// and every later Acquire hung; a share compared through an overflowed
// product chose the fuller provider.
func TestChoiceArithmetic(t *testing.T) {
	p := New()
	huge, small := cand("n", "huge", 1, 8), cand("n", "small", 1, 8)
	huge.Weight, small.Weight = math.MaxInt, math.MaxInt
	for range 20 {
		l, err := p.Acquire(context.Background(), Request{Candidates: fixed(huge, small), Choose: ByWeight, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		l.Release()
	}
	// A weight above MaxWeight counts as MaxWeight: a MaxWeight-to-1
	// choice, not one of 2^62 to 1.
	small.Weight = 1
	counts := map[string]int{}
	for range 2000 {
		l, _ := p.Acquire(context.Background(), Request{Candidates: fixed(huge, small), Choose: ByWeight, Timeout: time.Second})
		counts[l.ProviderID]++
		l.Release()
	}
	if counts["huge"] < 1990 {
		t.Fatalf("weighted choice %v", counts)
	}

	big, four := cand("n", "big", 1, math.MaxInt), cand("n", "four", 1, 4)
	var held []*Lease
	for range 2 {
		l, err := p.Acquire(context.Background(), Request{Candidates: fixed(four), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	// four holds 2/4, big 0/MaxInt: big.
	l, err := p.Acquire(context.Background(), Request{Candidates: fixed(big, four), Choose: LeastLoaded, Timeout: time.Second})
	if err != nil || l.ProviderID != "big" {
		t.Fatalf("least loaded with four at 2/4 and big empty: %v %v, want big", l, err)
	}
	// big holds 1/MaxInt, four 2/4: big again.
	l2, err := p.Acquire(context.Background(), Request{Candidates: fixed(four, big), Choose: LeastLoaded, Timeout: time.Second})
	if err != nil || l2.ProviderID != "big" {
		t.Fatalf("least loaded with four at 2/4 and big at 1/MaxInt: %v %v, want big", l2, err)
	}
	for _, l := range append(held, l, l2) {
		l.Release()
	}
	if s := p.Stats(); s.Granted != s.Released {
		t.Fatalf("stats %+v", s)
	}
}

func TestClose(t *testing.T) {
	p := New()
	c := cand("n", "p", 1, 1)
	p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Second})
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Hour})
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

func TestPriorityAndAging(t *testing.T) {
	p := &Pool{AgingStep: time.Hour}
	p.slots = map[Key]*slot{}
	c := cand("n", "p", 1, 1)
	hold, _ := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Second})
	order := make(chan string, 3)
	var wg sync.WaitGroup
	enqueue := func(name string, prio int) {
		n := p.Stats().Queued
		wg.Go(func() {
			l, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), Priority: prio, Timeout: 10 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			order <- name
			l.Release()
		})
		for p.Stats().Queued == n {
			time.Sleep(time.Millisecond)
		}
	}
	enqueue("low", 0)
	enqueue("high-1", 2)
	enqueue("high-2", 2)
	hold.Release()
	wg.Wait()
	close(order)
	var got []string
	for n := range order {
		got = append(got, n)
	}
	if strings.Join(got, ",") != "high-1,high-2,low" {
		t.Fatalf("served %v, want high class first (FIFO inside it), then low", got)
	}

	// Aging: a low request that waited long enough outranks a fresh high.
	p2 := &Pool{AgingStep: 20 * time.Millisecond, slots: map[Key]*slot{}}
	hold, _ = p2.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Second})
	first := make(chan string, 2)
	var wg2 sync.WaitGroup
	wg2.Go(func() {
		l, _ := p2.Acquire(context.Background(), Request{Candidates: fixed(c), Priority: 0, Timeout: 10 * time.Second})
		first <- "low"
		l.Release()
	})
	for p2.Stats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // five aging steps: the low request is now above class 2
	wg2.Go(func() {
		l, _ := p2.Acquire(context.Background(), Request{Candidates: fixed(c), Priority: 2, Timeout: 10 * time.Second})
		first <- "high"
		l.Release()
	})
	for p2.Stats().Queued != 2 {
		time.Sleep(time.Millisecond)
	}
	hold.Release()
	wg2.Wait()
	if got := <-first; got != "low" {
		t.Fatalf("%s served first; an aged low request must not starve", got)
	}
}

func TestLongContextSlots(t *testing.T) {
	p := New()
	c := cand("n", "p", 1, 4)
	c.LongContextCapacity = 1
	long1, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), LongContext: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), LongContext: true, Timeout: 20 * time.Millisecond}); !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("second long-context request: %v", err)
	}
	short, err := p.Acquire(context.Background(), Request{Candidates: fixed(c), Timeout: time.Second})
	if err != nil {
		t.Fatalf("a short request behind a full long-context slot: %v", err)
	}
	if l := p.Load(c.Key, 1); l.InFlight != 2 || l.LongContextInFlight != 1 {
		t.Fatalf("load %+v", l)
	}
	long1.Release()
	short.Release()
	if l := p.Load(c.Key, 1); l != (Load{}) {
		t.Fatalf("load %+v", l)
	}
}

// TestPropertyLeases runs thousands of random admissions and terminals on
// concurrent goroutines: releases at random times (some twice), cancels,
// timeouts, generation changes (a Node reconnecting) and capacity changes
// (a reload). It checks that capacity is never exceeded and that, once
// everything has ended, every lease was released exactly once and every
// provider is back to its full configured capacity.
func TestPropertyLeases(t *testing.T) {
	p := &Pool{AgingStep: 5 * time.Millisecond, slots: map[Key]*slot{}}
	keys := []Key{{"n1", "a"}, {"n1", "b"}, {"n2", "c"}}
	var mu sync.Mutex
	gens := map[Key]uint64{keys[0]: 1, keys[1]: 1, keys[2]: 1}
	caps := map[Key]int{keys[0]: 2, keys[1]: 3, keys[2]: 1}
	online := map[Key]bool{keys[0]: true, keys[1]: true, keys[2]: true}
	state := func(k Key) (uint64, int, bool) {
		mu.Lock()
		defer mu.Unlock()
		return gens[k], caps[k], online[k]
	}
	candsFor := func(subset []Key) func() []Candidate {
		return func() []Candidate {
			var out []Candidate
			for _, k := range subset {
				g, c, on := state(k)
				if on {
					out = append(out, Candidate{Key: k, Generation: g, Capacity: c, LongContextCapacity: 1, Weight: 1})
				}
			}
			return out
		}
	}
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	// chaosMu covers a change of state together with the Kick that
	// follows it, the way the Edge's registry events do: between the two
	// a queued request may rightly see room it was not yet offered.
	var chaosMu sync.Mutex
	chaos.Go(func() { // Nodes reconnect, go offline, get reloaded
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			k := keys[i%len(keys)]
			chaosMu.Lock()
			mu.Lock()
			switch i % 8 {
			case 0:
				gens[k]++ // reconnect: a new generation
			case 1, 2:
				online[k] = !online[k] // offline, then back
			case 3:
				caps[k] = 1 + i%3 // reload
			}
			mu.Unlock()
			p.Kick()
			chaosMu.Unlock()
		}
	})
	chaos.Go(func() { // invariant: no request waits while one of its slots is free
		for {
			select {
			case <-stop:
				return
			default:
			}
			chaosMu.Lock()
			p.mu.Lock()
			if w := p.servableLocked(); w != nil {
				t.Errorf("request %d (class %d) waits with a free candidate slot", w.seq, w.req.Priority)
			}
			p.mu.Unlock()
			chaosMu.Unlock()
			time.Sleep(100 * time.Microsecond)
		}
	})
	chaos.Go(func() { // invariant: never more in flight than configured
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, k := range keys {
				g, c, _ := state(k)
				if l := p.Load(k, g); l.InFlight > max(c, 3) || l.LongContextInFlight > 1 {
					t.Errorf("%v: %+v beyond capacity %d", k, l, c)
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	// A provider whose one slot stays taken for the whole run: every
	// request sent only to it waits out its queue timeout (or its client
	// leaves), so those outcomes are covered whatever the timing.
	held := Key{"n3", "held"}
	heldCands := func() []Candidate {
		return []Candidate{{Key: held, Generation: 1, Capacity: 1, LongContextCapacity: 1, Weight: 1}}
	}
	holder, err := p.Acquire(context.Background(), Request{Candidates: heldCands, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4000
	var outcomes sync.Map // error text -> *atomic.Int64
	count := func(k string) {
		v, _ := outcomes.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			subset := keys[i%3 : min(3, i%3+1+i%2)]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%7 == 0 {
				go cancel() // the client leaves while queued
			}
			cands := candsFor(subset)
			if i%13 == 0 {
				cands = heldCands
			}
			l, err := p.Acquire(ctx, Request{Candidates: cands, Priority: i % 3, LongContext: i%5 == 0, Choose: Choice(i % 3), Timeout: time.Duration(1+i%4) * 5 * time.Millisecond,
				// Half of them bound the queue's length, half its bytes, in
				// every combination (and may displace others).
				MaxQueued: 32 * (i % 2), Size: int64(i%50) * 10, MaxQueuedBytes: int64(i%4/2) * 3000})
			if err != nil {
				count(err.Error())
				return
			}
			count("admitted")
			time.Sleep(time.Duration(i%3) * 100 * time.Microsecond) // the request runs
			l.Release()
			if i%11 == 0 {
				l.Release() // a second terminal path releases again: no effect
			}
		})
	}
	wg.Wait()
	close(stop)
	chaos.Wait()
	holder.Release()
	if l := p.Load(held, 1); l != (Load{}) {
		t.Errorf("held provider after everything ended: %+v", l)
	}
	s := p.Stats()
	if s.Granted != s.Released || s.Queued != 0 || s.QueuedBytes != 0 {
		t.Fatalf("leases: %+v", s)
	}
	for _, k := range []string{"admitted", ErrQueueTimeout.Error(), ErrNoCandidate.Error(), ErrQueueFull.Error(), context.Canceled.Error()} {
		v, ok := outcomes.Load(k)
		if !ok || v.(*atomic.Int64).Load() < 5 {
			t.Errorf("outcome %q (almost) never happened; the run did not cover it", k)
		}
	}
	for _, k := range keys {
		g, c, _ := state(k)
		if l := p.Load(k, g); l.InFlight != 0 || l.LongContextInFlight != 0 || l.Queued != 0 {
			t.Errorf("%v: %+v after everything ended (capacity %d)", k, l, c)
		}
	}
	outcomes.Range(func(k, v any) bool {
		t.Logf("%-30s %d", k, v.(*atomic.Int64).Load())
		return true
	})
	t.Logf("double releases ignored: %d", s.DoubleRelease)
}

// servableLocked returns a queued request that one of its candidates has a
// slot free for (a new generation's counts as free), or nil. No scan may
// leave one behind: it would wait out its timeout beside a free slot.
func (p *Pool) servableLocked() *waiter {
	for _, c := range p.classes {
		for w := c.head; w != nil; w = w.next {
			for _, cd := range w.req.Candidates() {
				s := p.slots[cd.Key]
				if s == nil || s.gen != cd.Generation {
					return w
				}
				if s.inFlight < cd.Capacity && (!w.req.LongContext || cd.LongContextCapacity == 0 || s.longInFlight < cd.LongContextCapacity) {
					return w
				}
			}
		}
	}
	return nil
}

// TestReleaseServesWhoWaitsForThatSlot: a release offers its slot to the
// requests waiting for it, in order, passing over a higher class that
// waits for another provider; a request whose candidates include both is
// served by whichever frees first.
func TestReleaseServesWhoWaitsForThatSlot(t *testing.T) {
	p := New()
	a, b := cand("n", "a", 1, 1), cand("n", "b", 1, 1)
	la, _ := p.Acquire(context.Background(), Request{Candidates: fixed(a), Timeout: time.Second})
	lb, _ := p.Acquire(context.Background(), Request{Candidates: fixed(b), Timeout: time.Second})
	served := make(chan string, 3)
	var wg sync.WaitGroup
	wait := func(name string, prio int, cs ...Candidate) {
		n := p.Stats().Queued
		wg.Go(func() {
			l, err := p.Acquire(context.Background(), Request{Candidates: fixed(cs...), Priority: prio, Timeout: 10 * time.Second})
			if err != nil {
				if !errors.Is(err, ErrClosed) { // low-b ends with the pool
					t.Error(name, err)
				}
				return
			}
			served <- name + "@" + l.ProviderID
			// Held until the end, so each release serves exactly one.
		})
		for p.Stats().Queued == n {
			time.Sleep(time.Millisecond)
		}
	}
	wait("high-a", 5, a)
	wait("low-b", 0, b)
	wait("mid-ab", 1, a, b)
	lb.Release()
	if got := <-served; got != "mid-ab@b" {
		t.Fatalf("b's slot went to %s, want mid-ab (first in order among those waiting for b)", got)
	}
	if q := p.Stats().Queued; q != 2 {
		t.Fatalf("%d queued after one release, want 2", q)
	}
	la.Release()
	if got := <-served; got != "high-a@a" {
		t.Fatalf("a's slot went to %s, want high-a", got)
	}
	if q := p.Stats().Queued; q != 1 {
		t.Fatalf("%d queued, want low-b still waiting", q)
	}
	p.Close()
	wg.Wait()
}

// TestKickEndsWhenCandidatesDisagree: two queued requests that hold
// different generations for one provider (one list is stale) make every
// evaluation adopt a generation; a scan still ends.
func TestKickEndsWhenCandidatesDisagree(t *testing.T) {
	p := New()
	g1, g2 := cand("n", "p", 1, 1), cand("n", "p", 2, 1)
	g1.Capacity, g2.Capacity = 0, 0 // nothing is ever free: both wait
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, c := range []Candidate{g1, g2} {
		n := p.Stats().Queued
		wg.Go(func() { p.Acquire(ctx, Request{Candidates: fixed(c), Timeout: time.Minute}) })
		for p.Stats().Queued == n {
			time.Sleep(time.Millisecond)
		}
	}
	done := make(chan struct{})
	go func() { p.Kick(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Kick did not return")
	}
	cancel()
	wg.Wait()
}

// TestQueueBound: with MaxQueued waiting, a newcomer that would be served
// last is refused with ErrQueueFull at once; one of a higher class takes
// the place of the request that would be served last (the lowest class's
// latest arrival), which is refused instead. Aging counts: a low request
// that waited long enough is not displaced by a fresh higher one.
// queueRig holds the one slot of candidate c of a pool and queues named
// requests for it, each in its own goroutine, recording how each ends.
type queueRig struct {
	t    *testing.T
	c    Candidate
	hold *Lease
	out  chan queueOutcome
	wg   sync.WaitGroup
}

type queueOutcome struct {
	name string
	err  error
}

func newQueueRig(t *testing.T, p *Pool) *queueRig {
	t.Helper()
	q := &queueRig{t: t, c: cand("n", "p", 1, 1), out: make(chan queueOutcome, 16)}
	var err error
	if q.hold, err = p.Acquire(context.Background(), Request{Candidates: fixed(q.c), Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	return q
}

// enqueue starts name's Acquire of req on p and waits until it queued, or
// until the pool refused someone.
func (q *queueRig) enqueue(p *Pool, name string, req Request) {
	q.t.Helper()
	req.Candidates, req.Timeout = fixed(q.c), 10*time.Second
	before := p.Stats()
	q.wg.Go(func() {
		l, err := p.Acquire(context.Background(), req)
		q.out <- queueOutcome{name, err}
		if l != nil {
			l.Release()
		}
	})
	for s := p.Stats(); s.Queued == before.Queued && s.QueueFull == before.QueueFull; s = p.Stats() {
		time.Sleep(time.Millisecond)
	}
}

// refused reads the next outcomes, one per name, each of which must be a
// refusal, and compares their names as a set (refused together, they
// return in any order).
func (q *queueRig) refused(want ...string) {
	q.t.Helper()
	var got []string
	for range want {
		o := <-q.out
		if !errors.Is(o.err, ErrQueueFull) {
			q.t.Fatalf("%s: %v, want ErrQueueFull", o.name, o.err)
		}
		got = append(got, o.name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		q.t.Fatalf("refused %v, want %v", got, want)
	}
}

// serve releases the held slot and returns the names of the n queued
// requests in the order they were served, after all of them ended.
func (q *queueRig) serve(n int) string {
	q.t.Helper()
	q.hold.Release()
	var served []string
	for range n {
		o := <-q.out
		if o.err != nil {
			q.t.Fatalf("%s: %v", o.name, o.err)
		}
		served = append(served, o.name)
	}
	q.wg.Wait()
	return strings.Join(served, ",")
}

// TestQueueBytes: MaxQueuedBytes bounds what the waiting requests hold
// together. A newcomer that would pass it is refused, unless the requests
// that would be served last all rank below it and refusing them makes
// room; it displaces as many as it takes, and none when they cannot make
// room. One larger than the bound alone never waits.
func TestQueueBytes(t *testing.T) {
	p := &Pool{AgingStep: time.Hour, slots: map[Key]*slot{}}
	q := newQueueRig(t, p)
	enqueue := func(name string, prio int, size int64) {
		t.Helper()
		q.enqueue(p, name, Request{Priority: prio, Size: size, MaxQueuedBytes: 100})
	}
	queued := func(n int, bytes int64) {
		t.Helper()
		if s := p.Stats(); s.Queued != n || s.QueuedBytes != bytes {
			t.Fatalf("queued %d holding %d bytes, want %d holding %d", s.Queued, s.QueuedBytes, n, bytes)
		}
	}
	enqueue("a", 0, 40)
	enqueue("b", 0, 40)
	enqueue("c", 0, 30) // 110 > 100, and it would be served last
	q.refused("c")
	enqueue("d", 0, 20) // exactly 100
	queued(3, 100)
	enqueue("huge", 5, 101) // larger than the bound alone: no one is displaced
	q.refused("huge")
	queued(3, 100)
	enqueue("x", 2, 50) // d then b make room: 40 + 50
	q.refused("d", "b")
	queued(2, 90)
	enqueue("y", 1, 60) // a (40) is not enough, and x ranks above y
	q.refused("y")
	queued(2, 90)
	enqueue("z", 1, 60) // the same, after nothing changed
	q.refused("z")
	enqueue("e", 1, 10)
	queued(3, 100)
	if got := q.serve(3); got != "x,e,a" {
		t.Fatalf("served %s, want x,e,a", got)
	}
	if s := p.Stats(); s.Granted != s.Released || s.Queued != 0 || s.QueuedBytes != 0 || s.QueueFull != 6 {
		t.Fatalf("stats after %+v, want nothing queued and 6 refused", s)
	}
}

func TestQueueBound(t *testing.T) {
	p := &Pool{AgingStep: time.Hour, slots: map[Key]*slot{}}
	q := newQueueRig(t, p)
	enqueue := func(p *Pool, name string, prio int) {
		t.Helper()
		q.enqueue(p, name, Request{Priority: prio, MaxQueued: 3})
	}
	enqueue(p, "low-1", 0)
	enqueue(p, "low-2", 0)
	enqueue(p, "mid-1", 1)
	enqueue(p, "low-3", 0) // served last: refused itself
	q.refused("low-3")
	enqueue(p, "high", 2) // takes low-2's place, the latest of the lowest class
	q.refused("low-2")
	enqueue(p, "mid-2", 1) // takes low-1's place
	q.refused("low-1")
	enqueue(p, "mid-3", 1) // would come after mid-2, in the lowest class left
	q.refused("mid-3")
	if s := p.Stats(); s.Queued != 3 || s.QueueFull != 4 {
		t.Fatalf("stats %+v, want 3 queued and 4 refused", s)
	}
	if got := q.serve(3); got != "high,mid-1,mid-2" {
		t.Fatalf("served %s", got)
	}
	if s := p.Stats(); s.Granted != s.Released || s.Queued != 0 {
		t.Fatalf("stats after %+v", s)
	}

	// Aging: three low requests that waited five steps rank above a fresh
	// class-2 request, which is refused.
	p2 := &Pool{AgingStep: 20 * time.Millisecond, slots: map[Key]*slot{}}
	q = newQueueRig(t, p2)
	for _, name := range []string{"aged-1", "aged-2", "aged-3"} {
		enqueue(p2, name, 0)
	}
	time.Sleep(100 * time.Millisecond)
	enqueue(p2, "fresh-high", 2)
	q.refused("fresh-high")
	q.serve(3)
}
