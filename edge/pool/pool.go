// Package pool is the Edge's admission: it decides which request gets the
// next free slot of a provider's configured capacity, and hands out leases
// that hold those slots.
//
// A request names its candidates (provider slots it could run on, already
// filtered by route, capability and health) and waits until a candidate has
// a free slot or its queue timeout passes. Waiting requests are served by
// priority class, first come first served within a class, and every
// AgingStep a waiting request climbs one class, so that a low class is
// never starved. A long-context request also needs one of the provider's
// long-context slots. A lease is
// bound to the provider and to the Node connection generation it was
// granted under; Release is idempotent and frees the slot exactly once.
// When a provider's generation changes, the slots of the old generation are
// written off at once (its work is fenced) and the new generation starts
// with its full configured capacity.
//
// The pool never dispatches, retries or moves a request once it holds a
// lease.
package pool

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Key names one provider on one Node.
type Key struct {
	NodeID     string
	ProviderID string
}

// Candidate is one place a request could run, as known when it is
// evaluated.
type Candidate struct {
	Key
	// Generation is the Node connection the slot would belong to.
	Generation uint64
	// Capacity is the provider's configured capacity.
	Capacity int
	// Weight is the route's weight for this target (weighted routes).
	Weight int
	// LongContextCapacity is how many of Capacity may hold long-context
	// requests; 0 means no separate limit.
	LongContextCapacity int
	// Target is opaque to the pool (the route target it came from).
	Target any
}

// Request is what a caller asks admission for.
type Request struct {
	// Candidates is evaluated now and whenever capacity may have changed.
	Candidates func() []Candidate
	// Weighted chooses among free candidates by weight; otherwise the
	// first free candidate in order wins.
	Weighted bool
	// Priority is the request's class: higher is served first.
	Priority int
	// LongContext marks a request that needs a long-context slot.
	LongContext bool
	// Timeout bounds the wait for a slot.
	Timeout time.Duration
}

// DefaultAgingStep is how long a waiting request takes to climb one
// priority class.
const DefaultAgingStep = 10 * time.Second

// Errors returned by Acquire.
var (
	// ErrNoCandidate: no candidate is online and able to serve (so waiting
	// is pointless).
	ErrNoCandidate = errors.New("pool: no provider available for this request")
	// ErrQueueTimeout: candidates exist but none had a free slot in time.
	ErrQueueTimeout = errors.New("pool: queue timeout")
	// ErrClosed: the pool is closed.
	ErrClosed = errors.New("pool: closed")
)

// Pool is the admission state. It is safe for concurrent use.
type Pool struct {
	// AgingStep is how long a waiting request takes to climb one class.
	// Zero means DefaultAgingStep. Set it before use.
	AgingStep time.Duration

	mu      sync.Mutex
	slots   map[Key]*slot
	waiters []*waiter // in arrival order
	seq     uint64
	closed  bool

	granted, released, doubleRelease atomic.Uint64
}

type slot struct {
	gen          uint64
	inFlight     int
	longInFlight int
	queued       int
}

type waiter struct {
	req     Request
	arrived time.Time
	seq     uint64
	ready   chan grant
	last    []Key // keys counted in queued
	done    bool  // granted or refused by the scan under way
}

// grant is a waiter's outcome: a lease, or why there will be none.
type grant struct {
	l   *Lease
	err error
}

// New returns an empty pool.
func New() *Pool { return &Pool{slots: make(map[Key]*slot)} }

// Lease holds one slot. Release it exactly once on every terminal path;
// further Release calls do nothing.
type Lease struct {
	Candidate
	// LongContext says the lease also holds a long-context slot.
	LongContext bool
	p           *Pool
	released    atomic.Bool
	// Waited is how long the request queued.
	Waited time.Duration
}

// Release frees the slot (if its generation is still current) and lets the
// next queued request in. It is safe to call more than once.
func (l *Lease) Release() {
	if !l.released.CompareAndSwap(false, true) {
		l.p.doubleRelease.Add(1)
		return
	}
	l.p.release(l)
}

// Acquire waits for a free slot among req.Candidates(). It returns
// ErrNoCandidate at once (or as soon as it happens while waiting) when no
// candidate is left to wait for, ErrQueueTimeout after req.Timeout, or
// ctx's error.
func (p *Pool) Acquire(ctx context.Context, req Request) (*Lease, error) {
	start := time.Now()
	w := &waiter{req: req, arrived: start, ready: make(chan grant, 1)}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.seq++
	w.seq = p.seq
	p.waiters = append(p.waiters, w)
	p.scanLocked()
	p.mu.Unlock()
	if g, ok := w.take(); ok { // granted (or refused) at once: no timer
		return g.l, g.err
	}

	t := time.NewTimer(req.Timeout)
	defer t.Stop()
	var err error
	select {
	case g := <-w.ready:
		if g.l != nil {
			g.l.Waited = time.Since(start)
		}
		return g.l, g.err
	case <-t.C:
		err = ErrQueueTimeout
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.mu.Lock()
	p.removeLocked(w)
	p.mu.Unlock()
	if g, ok := w.take(); ok && g.l != nil {
		// Granted just as we gave up: hand the slot back.
		g.l.Release()
	}
	return nil, err
}

func (w *waiter) take() (grant, bool) {
	select {
	case g := <-w.ready:
		return g, true
	default:
		return grant{}, false
	}
}

// removeLocked takes w out of the queue; it reports whether w was there.
func (p *Pool) removeLocked(w *waiter) bool {
	for i, x := range p.waiters {
		if x == w {
			p.setQueuedLocked(w, nil)
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return true
		}
	}
	return false
}

func (p *Pool) setQueuedLocked(w *waiter, keys []Key) {
	for _, k := range w.last {
		if s := p.slots[k]; s != nil {
			s.queued--
		}
	}
	w.last = keys
	for _, k := range keys {
		p.slotLocked(k).queued++
	}
}

func (p *Pool) slotLocked(k Key) *slot {
	s := p.slots[k]
	if s == nil {
		s = &slot{}
		p.slots[k] = s
	}
	return s
}

// freeLocked reports whether c has a slot free for a request, adopting a
// new generation.
func (p *Pool) freeLocked(c Candidate, long bool) bool {
	s := p.slotLocked(c.Key)
	if s.gen != c.Generation {
		// A new connection generation: the old one's work is fenced.
		s.gen = c.Generation
		s.inFlight, s.longInFlight = 0, 0
	}
	if s.inFlight >= c.Capacity {
		return false
	}
	return !long || c.LongContextCapacity == 0 || s.longInFlight < c.LongContextCapacity
}

// order sorts the waiters for a scan: effective class (the class plus one
// per AgingStep waited) first, arrival second.
func (p *Pool) orderLocked() []*waiter {
	step := p.AgingStep
	if step <= 0 {
		step = DefaultAgingStep
	}
	if len(p.waiters) == 1 {
		return p.waiters
	}
	now := time.Now()
	eff := func(w *waiter) int { return w.req.Priority + int(now.Sub(w.arrived)/step) }
	out := slices.Clone(p.waiters)
	slices.SortStableFunc(out, func(a, b *waiter) int {
		if ea, eb := eff(a), eff(b); ea != eb {
			return eb - ea
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return out
}

// scanLocked grants free slots to waiters in priority order, and fails at
// once the waiters left with no candidate at all (their providers went
// offline: there is nothing to wait for).
func (p *Pool) scanLocked() {
	if len(p.waiters) == 0 {
		return
	}
	done := 0
	for _, w := range p.orderLocked() {
		cands := w.req.Candidates()
		if len(cands) == 0 {
			p.setQueuedLocked(w, nil)
			w.ready <- grant{err: ErrNoCandidate}
			w.done = true
			done++
			continue
		}
		var room [4]Candidate // the usual few candidates need no allocation
		free := room[:0]
		for _, c := range cands {
			if p.freeLocked(c, w.req.LongContext) {
				free = append(free, c)
			}
		}
		if len(free) == 0 {
			keys := make([]Key, len(cands)) // kept in w.last
			for i, c := range cands {
				keys[i] = c.Key
			}
			p.setQueuedLocked(w, keys)
			continue
		}
		c := free[0]
		if w.req.Weighted {
			c = pickWeighted(free)
		}
		p.setQueuedLocked(w, nil)
		s := p.slots[c.Key]
		s.inFlight++
		if w.req.LongContext {
			s.longInFlight++
		}
		p.granted.Add(1)
		w.ready <- grant{l: &Lease{Candidate: c, LongContext: w.req.LongContext, p: p}}
		w.done = true
		done++
	}
	if done == 0 {
		return
	}
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		if !w.done {
			kept = append(kept, w)
		}
	}
	clear(p.waiters[len(kept):])
	p.waiters = kept
}

func pickWeighted(cs []Candidate) Candidate {
	total := 0
	for _, c := range cs {
		total += max(c.Weight, 1)
	}
	n := rand.IntN(total)
	for _, c := range cs {
		n -= max(c.Weight, 1)
		if n < 0 {
			return c
		}
	}
	return cs[len(cs)-1]
}

func (p *Pool) release(l *Lease) {
	p.released.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s := p.slots[l.Key]; s != nil && s.gen == l.Generation && s.inFlight > 0 {
		s.inFlight--
		if l.LongContext && s.longInFlight > 0 {
			s.longInFlight--
		}
	}
	p.scanLocked()
}

// Kick re-evaluates every queued request, after something other than a
// release may have made room (a provider came online, config changed).
func (p *Pool) Kick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scanLocked()
}

// Load is one provider's admission figures.
type Load struct {
	InFlight            int
	LongContextInFlight int
	Queued              int
}

// Load returns the figures for k under generation gen (zero if gen is not
// the one the pool tracks).
func (p *Pool) Load(k Key, gen uint64) Load {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slots[k]
	if s == nil {
		return Load{}
	}
	l := Load{Queued: s.queued}
	if s.gen == gen {
		l.InFlight, l.LongContextInFlight = s.inFlight, s.longInFlight
	}
	return l
}

// Stats counts leases: granted, released (first calls) and repeated
// Release calls (which did nothing).
type Stats struct {
	Granted, Released, DoubleRelease uint64
	Queued                           int
}

// Stats returns the lease counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	q := len(p.waiters)
	p.mu.Unlock()
	return Stats{Granted: p.granted.Load(), Released: p.released.Load(), DoubleRelease: p.doubleRelease.Load(), Queued: q}
}

// Close fails every queued request and every later Acquire with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, w := range p.waiters {
		p.setQueuedLocked(w, nil)
		w.ready <- grant{err: ErrClosed}
	}
	p.waiters = nil
}
