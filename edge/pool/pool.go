// Package pool is the Edge's admission: it decides which request gets the
// next free slot of a provider's configured capacity, and hands out leases
// that hold those slots.
//
// A request names its candidates (provider slots it could run on, already
// filtered by route, capability and health) and waits until a candidate has
// a free slot or its queue timeout passes; among free candidates it takes
// the first, one at random by weight, or the least loaded
// (Request.Choose). Waiting requests are served by priority class, first
// come first served within a class, and every AgingStep a waiting request
// climbs one class, so that a low class is never starved. A long-context
// request also needs one of the provider's long-context slots.
// Request.MaxQueued bounds the queue's length and Request.MaxQueuedBytes
// the sizes its requests hold (their bodies): when a newcomer would pass
// either, the requests that would be served last make room for it if
// they all rank below it, and are refused with ErrQueueFull; otherwise
// the newcomer is. A lease is bound to the provider and to the
// Node connection generation it was granted under; Release is idempotent
// and frees the slot exactly once. When a provider's generation rises,
// the slots of the old generation are written off at once (its work is
// fenced) and the new generation starts with its full configured
// capacity; a candidate naming an older generation than the newest seen
// is stale and never granted.
//
// Admission stays cheap when the queue is deep: each class is a FIFO list,
// and since a class's earlier arrival has always aged at least as much,
// the serving order is a merge of the classes, never a sort of the queue.
// An arriving request is evaluated alone (the queued ones were already
// found without a free slot, and nothing was freed), and a release
// evaluates only the requests waiting for that slot, in order, while it
// has room. Anything else that can make room (a provider coming online, a
// new generation, a reload) is the owner's to signal with Kick, which
// re-evaluates the whole queue.
//
// The pool never dispatches, retries or moves a request once it holds a
// lease.
package pool

import (
	"context"
	"errors"
	"math/bits"
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
	// Generation is the Node connection the slot would belong to. A key's
	// generations only increase: a candidate older than the newest the
	// pool has seen for its key is stale, and never granted.
	Generation uint64
	// Capacity is how many requests the provider may hold at the
	// evaluation (0: none for now, the request waits): a change binds
	// every later evaluation, the queued requests' included. The Edge
	// passes the lower of its configuration's and the one the Node has
	// applied.
	Capacity int
	// Weight is the route's weight for this target (weighted routes):
	// below 1 counts as 1, above MaxWeight as MaxWeight.
	Weight int
	// LongContextCapacity is how many of Capacity may hold long-context
	// requests; 0 means no separate limit.
	LongContextCapacity int
	// Target is opaque to the pool (the route target it came from).
	Target any
}

// Request is what a caller asks admission for.
type Request struct {
	// Candidates is evaluated when the request arrives, while it waits
	// whenever a slot among its last candidates is freed, and on Kick.
	Candidates func() []Candidate
	// Choose says which free candidate the request takes.
	Choose Choice
	// Priority is the request's class: higher is served first.
	Priority int
	// LongContext marks a request that needs a long-context slot.
	LongContext bool
	// Timeout bounds the wait for a slot.
	Timeout time.Duration
	// MaxQueued bounds how many requests may wait at once, this one
	// included (0: no bound). When the queue is full, the request that
	// would be served last (the lowest effective class, the latest
	// arrival within it) is refused with ErrQueueFull to make room for a
	// newcomer of a higher class; a newcomer that would be served last
	// itself is refused instead.
	MaxQueued int
	// Size is what the request holds while it waits (the Edge: its
	// body's bytes), counted against MaxQueuedBytes.
	Size int64
	// MaxQueuedBytes bounds the Size of the waiting requests together,
	// this one included (0: no bound). Room is made as for MaxQueued:
	// the requests that would be served last, as many as it takes, are
	// refused for a newcomer that ranks above each of them; otherwise,
	// or when the newcomer alone is larger than the bound, the newcomer
	// is refused, and no one else.
	MaxQueuedBytes int64
}

// Choice is how a request chooses among its candidates with a free slot.
type Choice uint8

const (
	// First takes the first free candidate in order: a route's fallback
	// order.
	First Choice = iota
	// ByWeight chooses at random, in proportion to Candidate.Weight.
	ByWeight
	// LeastLoaded takes the free candidate with the smallest share of its
	// capacity in flight, the first in order among equals: load spreads
	// over providers of any size.
	LeastLoaded
)

// MaxWeight is the largest Candidate.Weight that counts as itself.
const MaxWeight = 1 << 20

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
	// ErrQueueFull: the queue was full (Request.MaxQueued,
	// Request.MaxQueuedBytes), and this request would have been served
	// after the ones that could have made room for it.
	ErrQueueFull = errors.New("pool: queue full")
	// ErrClosed: the pool is closed.
	ErrClosed = errors.New("pool: closed")
)

// Pool is the admission state. It is safe for concurrent use.
type Pool struct {
	// AgingStep is how long a waiting request takes to climb one class.
	// Zero means DefaultAgingStep. Set it before use; SetAgingStep
	// changes it later.
	AgingStep time.Duration

	mu      sync.Mutex
	slots   map[Key]*slot
	classes map[int]*class // the waiting requests, by priority class
	nwait   int            // how many wait, over every class
	qbytes  int64          // the Size they hold together
	seq     uint64
	closed  bool

	granted, released, doubleRelease, queueFull atomic.Uint64
}

type slot struct {
	gen          uint64
	capacity     int // as the latest evaluation found it
	inFlight     int
	longInFlight int
	queued       int
}

// class is one priority class's waiting requests, in arrival order: a
// class's order is also its order of effective priority, since an earlier
// arrival has aged at least as much.
type class struct {
	prio       int
	head, tail *waiter
}

type waiter struct {
	req     Request
	arrived time.Time
	seq     uint64
	// ready receives the outcome of a queued waiter; now holds the
	// outcome of one settled before it was queued (the usual case: a
	// free slot at once), which then needs no channel.
	ready chan grant
	now   grant
	last  []Key // keys counted in queued: the candidates it waits for

	cls        *class // nil while not queued
	prev, next *waiter
}

// grant is a waiter's outcome: a lease, or why there will be none.
type grant struct {
	l   *Lease
	err error
}

// New returns an empty pool.
func New() *Pool { return &Pool{slots: make(map[Key]*slot), classes: make(map[int]*class)} }

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
// ctx's error. With ctx already ended it takes no slot.
func (p *Pool) Acquire(ctx context.Context, req Request) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // a client gone before admission takes no one's slot
	}
	start := time.Now()
	w := &waiter{req: req, arrived: start}
	w.req.Size = max(req.Size, 0)
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	p.seq++
	w.seq = p.seq
	// Only the newcomer can be served now: every queued request was
	// already found without a free candidate, and nothing was freed.
	settled, adopted := p.evaluateLocked(w)
	if !settled && !w.req.fits(p.nwait, p.qbytes) && !p.makeRoomLocked(w, start) {
		p.refuseFullLocked(w)
		settled = true
	}
	if !settled {
		w.ready = make(chan grant, 1) // before anything else can settle it
		p.enqueueLocked(w)
	}
	if adopted {
		p.scanLocked()
	}
	p.mu.Unlock()
	if settled { // granted (or refused) at once: no channel, no timer
		return w.now.l, w.now.err
	}
	if g, ok := w.take(); ok { // settled by the scan just above
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
	if w.cls == nil {
		return false
	}
	p.setQueuedLocked(w, nil)
	p.unlinkLocked(w)
	return true
}

// fits reports whether r may join a queue of n requests holding bytes.
func (r *Request) fits(n int, bytes int64) bool {
	return (r.MaxQueued <= 0 || n < r.MaxQueued) && (r.MaxQueuedBytes <= 0 || bytes+r.Size <= r.MaxQueuedBytes)
}

// makeRoomLocked refuses, with ErrQueueFull, the queued requests that
// would be served last, as many as it takes for the newcomer w to fit,
// when w would be served before each of them; it reports whether it did.
// When they cannot make room, it refuses none of them. w, just arrived,
// has its own class.
func (p *Pool) makeRoomLocked(w *waiter, now time.Time) bool {
	step := p.agingStep()
	// The next candidate of each class, from its tail: a class is served
	// last at its tail, which arrived last and so has aged least.
	var room [8]*waiter
	next := room[:0]
	for _, c := range p.classes {
		next = append(next, c.tail)
	}
	var out [4]*waiter
	victims := out[:0]
	n, bytes := p.nwait, p.qbytes
	for !w.req.fits(n, bytes) {
		last, lastEff := -1, 0
		for i, t := range next {
			if t == nil {
				continue
			}
			eff := t.effective(now, step)
			if last < 0 || eff < lastEff || (eff == lastEff && t.seq > next[last].seq) {
				last, lastEff = i, eff
			}
		}
		if last < 0 || lastEff >= w.req.Priority {
			return false
		}
		v := next[last]
		next[last] = v.prev
		victims = append(victims, v)
		n, bytes = n-1, bytes-v.req.Size
	}
	for _, v := range victims {
		p.refuseFullLocked(v)
	}
	return true
}

// refuseFullLocked settles w with ErrQueueFull and counts it.
func (p *Pool) refuseFullLocked(w *waiter) {
	p.queueFull.Add(1)
	p.settleLocked(w, grant{err: ErrQueueFull})
}

// effective is w's class at now: its own, plus one for each step it
// waited.
func (w *waiter) effective(now time.Time, step time.Duration) int {
	return w.req.Priority + int(now.Sub(w.arrived)/step)
}

// SetAgingStep changes AgingStep while the pool is in use. It applies to
// the requests already waiting too: each has climbed one class per new
// step it has waited.
func (p *Pool) SetAgingStep(d time.Duration) {
	p.mu.Lock()
	p.AgingStep = d
	p.mu.Unlock()
}

// agingStep is AgingStep or its default; p.mu is held.
func (p *Pool) agingStep() time.Duration {
	if p.AgingStep <= 0 {
		return DefaultAgingStep
	}
	return p.AgingStep
}

// enqueueLocked puts w at the end of its priority class.
func (p *Pool) enqueueLocked(w *waiter) {
	c := p.classes[w.req.Priority]
	if c == nil {
		if p.classes == nil {
			p.classes = make(map[int]*class)
		}
		c = &class{prio: w.req.Priority}
		p.classes[c.prio] = c
	}
	w.cls, w.prev, w.next = c, c.tail, nil
	if c.tail != nil {
		c.tail.next = w
	} else {
		c.head = w
	}
	c.tail = w
	p.nwait++
	p.qbytes += w.req.Size
}

// unlinkLocked takes w out of its class. w.next is left as it was, so
// that a walk in progress (eachInOrderLocked) goes on past w.
func (p *Pool) unlinkLocked(w *waiter) {
	c := w.cls
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		c.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		c.tail = w.prev
	}
	w.cls, w.prev = nil, nil
	if c.head == nil {
		delete(p.classes, c.prio)
	}
	p.nwait--
	p.qbytes -= w.req.Size
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

// queueKeysLocked records that w waits for cands' keys, keeping its
// record when the keys are the ones it already waits for.
func (p *Pool) queueKeysLocked(w *waiter, cands []Candidate) {
	if len(w.last) == len(cands) {
		same := true
		for i, c := range cands {
			if w.last[i] != c.Key {
				same = false
				break
			}
		}
		if same {
			return
		}
	}
	keys := make([]Key, len(cands))
	for i, c := range cands {
		keys[i] = c.Key
	}
	p.setQueuedLocked(w, keys)
}

func (p *Pool) slotLocked(k Key) *slot {
	s := p.slots[k]
	if s == nil {
		if p.slots == nil {
			p.slots = make(map[Key]*slot)
		}
		s = &slot{}
		p.slots[k] = s
	}
	return s
}

// freeLocked reports whether c has a slot free for a request, adopting a
// new generation; adopted says it did (the slot's capacity came back).
func (p *Pool) freeLocked(c Candidate, long bool) (free, adopted bool) {
	s := p.slotLocked(c.Key)
	if c.Generation < s.gen {
		// A connection the pool has already seen replaced: adopting it
		// again would write off the current generation's leases and let
		// its capacity be granted twice.
		return false, false
	}
	if s.gen != c.Generation {
		// A new connection generation: the old one's work is fenced.
		s.gen = c.Generation
		s.inFlight, s.longInFlight = 0, 0
		adopted = true
	}
	s.capacity = c.Capacity
	if s.inFlight >= c.Capacity {
		return false, adopted
	}
	return !long || c.LongContextCapacity == 0 || s.longInFlight < c.LongContextCapacity, adopted
}

// eachInOrderLocked calls fn with each queued request in the order they
// are served: effective class (the class plus one per AgingStep waited)
// first, arrival second, until fn returns false. It merges the classes'
// queues, each already in that order, so it needs no sort. fn may take
// the request it was given (and only that one) out of the queue.
func (p *Pool) eachInOrderLocked(fn func(*waiter) bool) {
	if p.nwait == 0 {
		return
	}
	step := p.agingStep()
	now := time.Now()
	var room [8]*waiter
	heads := room[:0]
	for _, c := range p.classes {
		heads = append(heads, c.head)
	}
	for {
		best, bestEff := -1, 0
		for i, w := range heads {
			if w == nil {
				continue
			}
			eff := w.effective(now, step)
			if best < 0 || eff > bestEff || (eff == bestEff && w.seq < heads[best].seq) {
				best, bestEff = i, eff
			}
		}
		if best < 0 {
			return
		}
		w := heads[best]
		heads[best] = w.next
		if !fn(w) {
			return
		}
	}
}

// evaluateLocked grants w a free candidate slot, or refuses it when it has
// no candidate at all (its providers went offline: there is nothing to wait
// for); settled says it did either. Otherwise it records the candidates w
// waits for. adopted says a candidate brought a new connection generation,
// whose capacity other queued requests may be able to use.
func (p *Pool) evaluateLocked(w *waiter) (settled, adopted bool) {
	cands := w.req.Candidates()
	if len(cands) == 0 {
		p.settleLocked(w, grant{err: ErrNoCandidate})
		return true, false
	}
	var room [4]Candidate // the usual few candidates need no allocation
	free := room[:0]
	for _, c := range cands {
		ok, ad := p.freeLocked(c, w.req.LongContext)
		adopted = adopted || ad
		if ok {
			free = append(free, c)
		}
	}
	if len(free) == 0 {
		p.queueKeysLocked(w, cands)
		return false, adopted
	}
	c := free[0]
	switch w.req.Choose {
	case ByWeight:
		c = pickWeighted(free)
	case LeastLoaded:
		c = p.leastLoadedLocked(free)
	}
	s := p.slots[c.Key]
	s.inFlight++
	if w.req.LongContext {
		s.longInFlight++
	}
	p.granted.Add(1)
	p.settleLocked(w, grant{l: &Lease{Candidate: c, LongContext: w.req.LongContext, p: p}})
	return true, adopted
}

// settleLocked gives w its outcome and takes it out of the queue.
func (p *Pool) settleLocked(w *waiter, g grant) {
	p.setQueuedLocked(w, nil)
	if w.cls != nil {
		p.unlinkLocked(w)
	}
	if w.ready == nil { // not queued yet: Acquire reads it from now
		w.now = g
		return
	}
	w.ready <- g
}

// scanLocked re-evaluates every queued request in order. A pass that saw a
// new generation's capacity come back runs once more, for the requests it
// had passed before.
func (p *Pool) scanLocked() {
	// At most two passes: requests that disagree about a generation (one
	// holding a stale candidate list) must not make it run forever.
	for range 2 {
		adopted := false
		p.eachInOrderLocked(func(w *waiter) bool {
			_, ad := p.evaluateLocked(w)
			adopted = adopted || ad
			return true
		})
		if !adopted {
			return
		}
	}
}

// scanReleasedLocked serves the queue after l's slot was freed. Every
// queued request was found without a free candidate when it was last
// evaluated, and only l's slot has changed since, so only the requests
// waiting for it are evaluated, in order, while it has room.
func (p *Pool) scanReleasedLocked(l *Lease) {
	s := p.slots[l.Key] // slots are never removed: the pointer holds
	if s == nil {
		return
	}
	adopted := false
	p.eachInOrderLocked(func(w *waiter) bool {
		// The slot's capacity as last found, not l's: the configuration
		// may have changed since l was granted.
		if s.gen != l.Generation || s.inFlight >= s.capacity {
			return false // no room left (or none was freed: a fenced lease)
		}
		if !slices.Contains(w.last, l.Key) {
			return true
		}
		_, adopted = p.evaluateLocked(w)
		return !adopted
	})
	if adopted {
		p.scanLocked()
	}
}

// leastLoadedLocked returns the candidate of cs (each with a free slot,
// so a capacity above zero) with the smallest share of its capacity in
// flight, the first among equals.
func (p *Pool) leastLoadedLocked(cs []Candidate) Candidate {
	best, bestIn := cs[0], p.slots[cs[0].Key].inFlight
	for _, c := range cs[1:] {
		in := p.slots[c.Key].inFlight
		if lessShare(in, c.Capacity, bestIn, best.Capacity) {
			best, bestIn = c, in
		}
	}
	return best
}

// lessShare reports whether a/ca < b/cb (a, b >= 0; ca, cb > 0) exactly,
// without division: a*cb < b*ca, in 128 bits, so no capacity overflows
// it.
func lessShare(a, ca, b, cb int) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(cb))
	h2, l2 := bits.Mul64(uint64(b), uint64(ca))
	return h1 < h2 || h1 == h2 && l1 < l2
}

func pickWeighted(cs []Candidate) Candidate {
	var total uint64 // at most len(cs) * MaxWeight: no overflow
	for _, c := range cs {
		total += weight(c)
	}
	n := rand.Uint64N(total)
	for _, c := range cs {
		w := weight(c)
		if n < w {
			return c
		}
		n -= w
	}
	return cs[len(cs)-1]
}

// weight is c's Weight within 1..MaxWeight.
func weight(c Candidate) uint64 { return uint64(min(max(c.Weight, 1), MaxWeight)) }

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
	p.scanReleasedLocked(l)
}

// Kick re-evaluates every queued request, after something other than a
// release may have made room (a provider came online or changed its
// generation, config changed). Without it, a request waits for the slots
// it last found full.
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
// Release calls (which did nothing); QueueFull counts the requests
// refused with ErrQueueFull. Queued is how many wait now, and
// QueuedBytes the Size they hold.
type Stats struct {
	Granted, Released, DoubleRelease, QueueFull uint64
	Queued                                      int
	QueuedBytes                                 int64
}

// Stats returns the lease counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	q, qb := p.nwait, p.qbytes
	p.mu.Unlock()
	return Stats{Granted: p.granted.Load(), Released: p.released.Load(), DoubleRelease: p.doubleRelease.Load(), QueueFull: p.queueFull.Load(), Queued: q, QueuedBytes: qb}
}

// Close fails every queued request and every later Acquire with ErrClosed.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.classes {
		for w := c.head; w != nil; {
			next := w.next
			p.settleLocked(w, grant{err: ErrClosed})
			w = next
		}
	}
}
