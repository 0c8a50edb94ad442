package nodes

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/iop-dev/iop/internal/feed"
)

// EventKind is the kind of a lifecycle event.
type EventKind uint8

// Lifecycle events. Each is published once, after the registry's
// authoritative transition.
const (
	// EventReady: a Node's connection became dispatch-ready.
	EventReady EventKind = iota + 1
	// EventProviderHealth: a ready Node reported a provider's status or
	// health change.
	EventProviderHealth
	// EventDisconnected: a ready connection ended; its generation is
	// fenced.
	EventDisconnected
	// EventConfigApplied: a ready Node applied a config update.
	EventConfigApplied
)

func (k EventKind) String() string {
	switch k {
	case EventReady:
		return "ready"
	case EventProviderHealth:
		return "provider_health"
	case EventDisconnected:
		return "disconnected"
	case EventConfigApplied:
		return "config_applied"
	}
	return "unknown"
}

// Event is one lifecycle transition.
type Event struct {
	// Seq increases by one per published event.
	Seq        uint64
	Kind       EventKind
	NodeID     string
	Generation uint64
	// Reason says why a connection ended (a wire close reason such as
	// "heartbeat_timeout", or "superseded").
	Reason string
	// Provider is the provider's new snapshot for EventProviderHealth.
	Provider *ProviderSnapshot
	// Revision is the applied config revision for EventConfigApplied and
	// EventReady.
	Revision uint64
	Time     time.Time
}

// ErrResync is returned by Subscription.Next after the subscriber fell
// behind and events were dropped: read a fresh Registry.Snapshot, then keep
// calling Next.
var ErrResync = errors.New("nodes: subscriber fell behind; resync from a snapshot")

// ErrNoEvent is returned by Poll when no event is waiting.
var ErrNoEvent = errors.New("nodes: no event waiting")

// ErrSubscriptionClosed is returned by Next after Close or registry close.
var ErrSubscriptionClosed = errors.New("nodes: subscription closed")

// hub fans events out to subscribers with bounded buffers. Publishing never
// blocks: a subscriber whose buffer is full loses its buffer and is told to
// resync.
type hub struct {
	mu     sync.Mutex
	seq    uint64
	subs   map[*Subscription]struct{}
	size   int
	closed bool
}

// Subscription receives lifecycle events in order.
type Subscription struct {
	h *hub
	s *feed.Sub[Event]
}

func newHub(size int) *hub {
	return &hub{subs: make(map[*Subscription]struct{}), size: size}
}

func (h *hub) subscribe() *Subscription {
	s := &Subscription{h: h, s: feed.NewSub[Event](h.size, ErrResync, ErrSubscriptionClosed)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.s.Shut()
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

// publish assigns the next sequence number and delivers e. Callers hold
// the registry lock, so events leave in transition order.
func (h *hub) publish(e Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	e.Seq = h.seq
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	for s := range h.subs {
		s.s.Push(e)
	}
}

// lastSeq is the Seq of the last published event.
func (h *hub) lastSeq() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seq
}

func (h *hub) close() {
	h.mu.Lock()
	subs := h.subs
	h.subs = map[*Subscription]struct{}{}
	h.closed = true
	h.mu.Unlock()
	for s := range subs {
		s.s.Shut()
	}
}

// Next returns the next event, waiting until one is published or ctx ends.
// It returns ErrResync once after events were dropped for this subscriber,
// and ErrSubscriptionClosed after Close.
func (s *Subscription) Next(ctx context.Context) (Event, error) { return s.s.Next(ctx) }

// Poll returns the next event if one is waiting, without blocking; it
// returns ErrNoEvent when none is.
func (s *Subscription) Poll() (Event, error) {
	e, ok, err := s.s.Poll()
	if !ok && err == nil {
		return Event{}, ErrNoEvent
	}
	return e, err
}

// Close stops the subscription.
func (s *Subscription) Close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
	s.s.Shut()
}
