package controlplane

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/wire/iopv1"
)

// EdgeView is an Edge as the Hub last saw it. It is a view: the Edge owns
// every fact in it.
type EdgeView struct {
	ID string `json:"id"`
	// Connected: the Edge has a live, accepted connection to the Hub.
	Connected      bool       `json:"connected"`
	Generation     uint64     `json:"generation,omitempty"`
	Version        string     `json:"version,omitempty"`
	ConnectedAt    *time.Time `json:"connected_at,omitempty"`
	LastDisconnect string     `json:"last_disconnect,omitempty"`
	// StatusAt is when the Edge last answered a status; the Nodes are that
	// status with the lifecycle events relayed since applied on top. For
	// an Edge that is not connected they are its last known view.
	StatusAt *time.Time `json:"status_at,omitempty"`
	Routes   int        `json:"routes"`
	Queued   int        `json:"queued"`
	// MaxQueued is the most requests that may wait in the Edge's queue (0:
	// not reported); QueueFull counts those it turned away since it
	// started because its queue was full.
	MaxQueued int    `json:"max_queued,omitempty"`
	QueueFull uint64 `json:"queue_full"`
	// QueuedBytes is what the queued requests' bodies hold, and
	// MaxQueuedBytes the most they may (0: not reported).
	QueuedBytes    uint64     `json:"queued_bytes"`
	MaxQueuedBytes uint64     `json:"max_queued_bytes,omitempty"`
	ConfigRevision uint64     `json:"config_revision"`
	Nodes          []NodeView `json:"nodes"`
}

func (v EdgeView) clone() EdgeView {
	v.Nodes = slices.Clone(v.Nodes)
	for i := range v.Nodes {
		v.Nodes[i].Providers = slices.Clone(v.Nodes[i].Providers)
	}
	return v
}

// Edges returns every known Edge (configured, or enrolled since start),
// sorted by id.
func (h *Hub) Edges() []EdgeView {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]EdgeView, 0, len(h.edges))
	for _, es := range h.edges {
		out = append(out, es.view.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Edge returns one Edge's view.
func (h *Hub) Edge(id string) (EdgeView, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	es := h.edges[id]
	if es == nil {
		return EdgeView{}, false
	}
	return es.view.clone(), true
}

// Refresh asks a connected Edge for its status now and returns the view
// with it applied.
func (h *Hub) Refresh(ctx context.Context, id string) (EdgeView, error) {
	h.mu.Lock()
	es := h.edges[id]
	var c *edgeConn
	if es != nil {
		c = es.cur
	}
	h.mu.Unlock()
	switch {
	case es == nil:
		return EdgeView{}, ErrUnknownEdge
	case c == nil:
		return EdgeView{}, ErrEdgeOffline
	}
	if err := h.takeStatus(ctx, c); err != nil {
		return EdgeView{}, err
	}
	v, _ := h.Edge(id)
	return v, nil
}

// maxStatusNodes bounds the Nodes one status may carry.
const maxStatusNodes = 1 << 20

// takeStatus asks c's Edge for its status and applies it.
func (h *Hub) takeStatus(ctx context.Context, c *edgeConn) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(h.cfg.StatusTimeout, DefaultStatusTimeout))
	defer cancel()
	st, err := c.sess.OpenStream(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	stop := context.AfterFunc(ctx, func() { st.Reset(0) })
	defer stop()
	if err := st.WriteMessage(msg(&iopv1.EdgeStatusRequest{})); err != nil {
		return err
	}
	st.CloseWrite()
	env, err := st.ReadMessage(ctx)
	if err != nil {
		return fmt.Errorf("controlplane: status head: %w", err)
	}
	head := env.GetEdgeStatusResponse()
	if head == nil {
		return errors.New("controlplane: the edge answered a status with something else")
	}
	if head.GetNodeCount() > maxStatusNodes {
		return fmt.Errorf("controlplane: status announces %d nodes, above %d", head.GetNodeCount(), maxStatusNodes)
	}
	nodes, err := readSnapshots(st, int(head.GetNodeCount()))
	if err != nil {
		return err
	}
	h.applyStatus(c, head, nodes)
	return nil
}

// readSnapshots reads n length-prefixed EdgeNodeSnapshots and then
// requires the end of the stream.
func readSnapshots(r io.Reader, n int) ([]NodeView, error) {
	br := bufio.NewReaderSize(r, 32<<10)
	out := make([]NodeView, 0, min(n, 4096))
	buf := make([]byte, 0, 4096)
	for i := range n {
		size, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, fmt.Errorf("controlplane: status node %d: %w", i, noEOF(err))
		}
		if size > maxSnapshotBytes {
			return nil, fmt.Errorf("controlplane: status node %d is %d bytes, above %d", i, size, maxSnapshotBytes)
		}
		buf = slices.Grow(buf[:0], int(size))[:size]
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, fmt.Errorf("controlplane: status node %d: %w", i, noEOF(err))
		}
		var m iopv1.EdgeNodeSnapshot
		if err := proto.Unmarshal(buf, &m); err != nil {
			return nil, fmt.Errorf("controlplane: status node %d: %w", i, err)
		}
		if err := identity.CheckID(m.GetNodeId()); err != nil {
			return nil, fmt.Errorf("controlplane: status node %d: node id: %w", i, err)
		}
		out = append(out, nodeFromWire(&m))
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, errors.New("controlplane: status carries more than its announced nodes")
	}
	return out, nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// applyStatus replaces c's Edge's node view with a status, then re-applies
// the events relayed after the status was taken.
func (h *Hub) applyStatus(c *edgeConn, head *iopv1.EdgeStatusResponse, nodes []NodeView) {
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	h.mu.Lock()
	es := h.edges[c.edgeID]
	if es == nil || es.cur != c {
		h.mu.Unlock()
		return // a stale connection's answer
	}
	before := es.view.Nodes
	now := time.Now().UTC()
	es.view.StatusAt = &now
	es.view.Routes, es.view.Queued, es.view.ConfigRevision = int(head.GetRouteCount()), int(head.GetQueued()), head.GetConfigRevision()
	es.view.MaxQueued, es.view.QueueFull = int(head.GetMaxQueued()), head.GetQueueFull()
	es.view.QueuedBytes, es.view.MaxQueuedBytes = head.GetQueuedBytes(), head.GetMaxQueuedBytes()
	es.view.Nodes = nodes
	es.viewSeq = head.GetEventSeq()
	kept := es.recent[:0]
	for _, ev := range es.recent {
		if ev.GetSeq() > es.viewSeq {
			applyToView(&es.view, ev)
			es.viewSeq = ev.GetSeq()
			kept = append(kept, ev)
		}
	}
	es.recent = kept
	cooling := coolingChanges(c.edgeID, before, es.view.Nodes)
	h.mu.Unlock()
	for _, ev := range cooling {
		h.events.publish(ev)
	}
}

// coolingChanges returns an EventProviderCooling for each provider whose
// cooling keys (the provider as a whole, and each model) differ between
// two views of one Edge's Nodes, both sorted by Node id. A provider seen
// for the first time counts as cooling nothing before; one that left is
// not reported (its Node's events say why).
func coolingChanges(edgeID string, before, after []NodeView) []Event {
	var out []Event
	for _, n := range after {
		var old []ProviderView
		if i, ok := slices.BinarySearchFunc(before, n.ID, func(b NodeView, id string) int { return cmp.Compare(b.ID, id) }); ok {
			old = before[i].Providers
		}
		for _, p := range n.Providers {
			var was ProviderView
			if j := slices.IndexFunc(old, func(o ProviderView) bool { return o.ID == p.ID }); j >= 0 {
				was = old[j]
			}
			if sameCoolingKeys(was, p) {
				continue
			}
			pv := p
			pv.CoolingModels = maps.Clone(p.CoolingModels)
			out = append(out, Event{Kind: EventProviderCooling, EdgeID: edgeID, NodeID: n.ID, Provider: &pv})
		}
	}
	return out
}

// sameCoolingKeys reports whether a and b cool the same things, whatever
// until when.
func sameCoolingKeys(a, b ProviderView) bool {
	if (a.CoolingUntil == nil) != (b.CoolingUntil == nil) || len(a.CoolingModels) != len(b.CoolingModels) {
		return false
	}
	for m := range a.CoolingModels {
		if _, ok := b.CoolingModels[m]; !ok {
			return false
		}
	}
	return true
}

// maxReapply bounds the events kept to re-apply over the next status.
const maxReapply = 4096

// applyEvent applies and publishes one relayed lifecycle event.
func (h *Hub) applyEvent(c *edgeConn, ev *iopv1.EdgeNodeEvent) {
	switch ev.GetKind() {
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_RESYNC:
		h.events.publish(Event{Kind: EventEdgeResync, EdgeID: c.edgeID, Generation: c.gen})
		c.askStatus()
		return
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_STATUS_CHANGED:
		// Admission's state (a cooldown) changed: the status carries it.
		c.askStatus()
		return
	}
	kind, ok := eventKindFrom(ev.GetKind())
	if !ok || identity.CheckID(ev.GetNodeId()) != nil {
		return // an event this build does not know: the next status covers it
	}
	h.mu.Lock()
	es := h.edges[c.edgeID]
	if es == nil || es.cur != c {
		h.mu.Unlock()
		return
	}
	if ev.GetSeq() > es.viewSeq {
		applyToView(&es.view, ev)
		es.viewSeq = ev.GetSeq()
		if len(es.recent) < maxReapply {
			es.recent = append(es.recent, ev)
		} else {
			c.askStatus()
		}
	}
	h.mu.Unlock()
	out := Event{Kind: kind, EdgeID: c.edgeID, NodeID: ev.GetNodeId(), Generation: ev.GetGeneration(),
		Reason: ev.GetReason(), Revision: ev.GetRevision(), EdgeSeq: ev.GetSeq()}
	if p := ev.GetProvider(); p != nil {
		pv := providerFromWire(p)
		out.Provider = &pv
	}
	h.events.publish(out)
	// Capacity, pressure and node-level state come with a status: take
	// one now (requests coalesce while one is under way).
	c.askStatus()
}

// applyToView applies one event to a view, as the Edge's own rules would:
// a disconnected Node's providers keep their identity with status
// unavailable, health offline and zero figures.
func applyToView(v *EdgeView, ev *iopv1.EdgeNodeEvent) {
	i := slices.IndexFunc(v.Nodes, func(n NodeView) bool { return n.ID == ev.GetNodeId() })
	if i < 0 {
		return // a Node the last status did not list: the next one will
	}
	n := &v.Nodes[i]
	switch ev.GetKind() {
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_READY:
		n.Connected, n.Generation = true, ev.GetGeneration()
		n.AppliedRevision = ev.GetRevision()
		n.ConnectedAt = fromUnixMs(ev.GetTimeUnixMs())
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_DISCONNECTED:
		n.Connected, n.Generation, n.ConnectedAt = false, 0, nil
		n.LastDisconnect = ev.GetReason()
		n.AppliedRevision = 0
		for j := range n.Providers {
			p := &n.Providers[j]
			p.Status, p.Health = "unavailable", "offline"
			p.Capacity, p.LongContextCapacity, p.InFlight, p.LongContextInFlight, p.Queued = 0, 0, 0, 0, 0
			p.CoolingUntil, p.CoolingModels = nil, nil
		}
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_PROVIDER_CHANGED:
		if ev.GetProvider() == nil {
			return
		}
		pv := providerFromWire(ev.GetProvider())
		if j := slices.IndexFunc(n.Providers, func(p ProviderView) bool { return p.ID == pv.ID }); j >= 0 {
			// A registry event does not carry admission's cooldown: the
			// last status's stands until the next.
			pv.CoolingUntil = cmp.Or(pv.CoolingUntil, n.Providers[j].CoolingUntil)
			if pv.CoolingModels == nil {
				pv.CoolingModels = n.Providers[j].CoolingModels
			}
			n.Providers[j] = pv
		}
	case iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_CONFIG_APPLIED:
		n.AppliedRevision = ev.GetRevision()
	}
}
