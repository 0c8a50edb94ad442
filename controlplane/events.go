package controlplane

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	eventfeed "github.com/iop-dev/iop/internal/feed"
	"github.com/iop-dev/iop/wire/iopv1"
)

// EventKind is the kind of a Hub event.
type EventKind string

// Hub events. Node events are relayed from an Edge after its authoritative
// transition, one per transition while the Edge is connected to the Hub.
const (
	EventEdgeConnected    EventKind = "edge_connected"
	EventEdgeDisconnected EventKind = "edge_disconnected"
	// EventEdgeResync: the Edge's own event feed fell behind; its view is
	// being re-taken from a status.
	EventEdgeResync       EventKind = "edge_resync"
	EventNodeReady        EventKind = "node_ready"
	EventNodeDisconnected EventKind = "node_disconnected"
	EventProviderChanged  EventKind = "provider_changed"
	EventConfigApplied    EventKind = "config_applied"
	// EventProviderCooling: a status showed that what of a provider cools
	// changed: the provider as a whole (it answered 503 or 529) or one of
	// its models (429) began cooling, or a cooldown ended. Provider
	// carries what cools now (CoolingUntil, CoolingModels); neither set
	// means nothing of it cools any more. A cooldown that was only
	// lengthened is not an event. The Hub derives these from its Edges'
	// statuses, which a linked Edge sends at once when a cooldown begins
	// or ends.
	EventProviderCooling EventKind = "provider_cooling"
)

func eventKindFrom(k iopv1.EdgeNodeEventKind) (EventKind, bool) {
	switch k {
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_READY:
		return EventNodeReady, true
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_DISCONNECTED:
		return EventNodeDisconnected, true
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_PROVIDER_CHANGED:
		return EventProviderChanged, true
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_CONFIG_APPLIED:
		return EventConfigApplied, true
	}
	return "", false
}

// Event is one Hub event.
type Event struct {
	// Seq increases by one per Hub event.
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Kind   EventKind `json:"kind"`
	EdgeID string    `json:"edge_id"`
	NodeID string    `json:"node_id,omitempty"`
	// Generation is the Edge's connection generation at the Hub for edge
	// events, the Node's at its Edge for node events.
	Generation uint64        `json:"generation,omitempty"`
	Reason     string        `json:"reason,omitempty"`
	Revision   uint64        `json:"revision,omitempty"`
	Provider   *ProviderView `json:"provider,omitempty"`
	// EdgeSeq is the event's sequence number at its Edge.
	EdgeSeq uint64 `json:"edge_seq,omitempty"`
}

// ErrResync is returned by Subscription.Next after the subscriber fell
// behind and events were dropped: take a fresh view (Edges), then keep
// calling Next.
var ErrResync = errors.New("controlplane: subscriber fell behind; resync from the view")

// ErrSubscriptionClosed is returned by Next after Close or Hub close.
var ErrSubscriptionClosed = errors.New("controlplane: subscription closed")

// feed fans Hub events out to subscribers with bounded buffers and keeps
// the most recent ones. Publishing never blocks.
type feed struct {
	mu     sync.Mutex
	seq    uint64
	subs   map[*Subscription]struct{}
	size   int
	recent []Event
	keep   int
	closed bool
}

func newFeed(size, keep int) *feed {
	return &feed{subs: map[*Subscription]struct{}{}, size: size, keep: keep}
}

func (f *feed) publish(e Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	e.Seq = f.seq
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	if len(f.recent) == f.keep {
		f.recent = slices.Delete(f.recent, 0, 1)
	}
	f.recent = append(f.recent, e)
	for s := range f.subs {
		s.s.Push(e)
	}
}

func (f *feed) close() {
	f.mu.Lock()
	subs := f.subs
	f.subs = map[*Subscription]struct{}{}
	f.closed = true
	f.mu.Unlock()
	for s := range subs {
		s.s.Shut()
	}
}

// Subscription receives Hub events in order.
type Subscription struct {
	f *feed
	s *eventfeed.Sub[Event]
}

// Subscribe returns a subscription to Hub events from now on.
func (h *Hub) Subscribe() *Subscription {
	s := &Subscription{f: h.events, s: eventfeed.NewSub[Event](h.events.size, ErrResync, ErrSubscriptionClosed)}
	h.events.mu.Lock()
	defer h.events.mu.Unlock()
	if h.events.closed {
		s.s.Shut()
	} else {
		h.events.subs[s] = struct{}{}
	}
	return s
}

// RecentEvents returns the most recent Hub events, oldest first.
func (h *Hub) RecentEvents() []Event {
	h.events.mu.Lock()
	defer h.events.mu.Unlock()
	return slices.Clone(h.events.recent)
}

// Next returns the next event, waiting until one arrives or ctx ends. After
// the subscriber fell behind it returns ErrResync once, then the events
// published after that.
func (s *Subscription) Next(ctx context.Context) (Event, error) { return s.s.Next(ctx) }

// Close ends the subscription.
func (s *Subscription) Close() {
	s.f.mu.Lock()
	delete(s.f.subs, s)
	s.f.mu.Unlock()
	s.s.Shut()
}
