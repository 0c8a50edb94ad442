package controlplane

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/internal/acceptloop"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// Defaults applied when a Config field is zero.
const (
	DefaultStatusInterval = 10 * time.Second
	DefaultStatusTimeout  = 10 * time.Second
	DefaultCommandTimeout = 10 * time.Minute
	DefaultProbeTimeout   = 5 * time.Second
	DefaultHelloTimeout   = 10 * time.Second
	DefaultMaxPending     = 256
	DefaultEventBuffer    = 256
	DefaultRecentEvents   = 200
	DefaultKeepAlive      = 15 * time.Second
)

// EdgeRecord is an Edge the Hub enrolls.
type EdgeRecord struct {
	ID string
	// TokenHash is the SHA-256 of the Edge's token (HashToken). Zero means
	// the Edge must present a verified client certificate naming its ID
	// (see Config.TrustDomain for how a certificate names an Edge).
	TokenHash [32]byte
}

// Operator is a person or tool allowed to use the operator API.
type Operator struct {
	Name string
	// TokenHash is the SHA-256 of the operator's bearer token.
	TokenHash [32]byte
}

// HashToken returns the value to store in EdgeRecord.TokenHash or
// Operator.TokenHash. The token itself is never stored.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// Config configures a Hub. Each field's comment says what its zero value
// means.
type Config struct {
	// Edges are the Edges the Hub enrolls.
	Edges []EdgeRecord
	// AllowUnknownEdges also enrolls an Edge that is not in Edges when its
	// verified client certificate (TLS must require one) names its edge
	// id. False means unknown Edges are rejected.
	AllowUnknownEdges bool
	// TLS makes ServeEdges require TLS 1.3 (ALPN iop/1); with ClientCAs
	// it requires mutual TLS. Nil means plaintext.
	TLS *tls.Config
	// Wire tunes the Edge sessions. Nil means wire defaults.
	Wire *wire.Config
	// TrustDomain turns on managed mode for Edges: every Edge must present
	// a client certificate, verified against TLS.ClientCAs, whose SPIFFE
	// ID is spiffe://<TrustDomain>/edge/<edge id> (package edge/identity
	// issues them; identity.CheckTrustDomain says which names it
	// accepts), in addition to its token when its record has one.
	// Empty means a certificate may name an Edge by common name or DNS
	// name, and only Edges without a token need one; a workload's
	// certificate (one with a SPIFFE ID) names only the Edge its ID
	// names, of any trust domain, so a Node's never passes for an Edge.
	TrustDomain string
	// Operators may use the operator API with their bearer token, or sign
	// in to the status page with it.
	Operators []Operator
	// OperatorMTLS also accepts a verified client certificate on the
	// operator HTTPS server as an operator, named by its common name. A
	// certificate without a common name, or with a SPIFFE ID (a
	// workload's, as package edge/identity issues to Edges and Nodes),
	// is not an operator's.
	OperatorMTLS bool
	// StatusInterval is how often each connected Edge is asked for its
	// status. Zero means DefaultStatusInterval.
	StatusInterval time.Duration
	// StatusTimeout bounds one status answer. Zero means
	// DefaultStatusTimeout.
	StatusTimeout time.Duration
	// CommandTimeout bounds one command. Zero means DefaultCommandTimeout.
	CommandTimeout time.Duration
	// ProbeTimeout bounds the ping of a live connection when the same
	// edge id says hello again. Zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// HelloTimeout bounds everything from TCP accept to an accepted hello.
	// Zero means DefaultHelloTimeout.
	HelloTimeout time.Duration
	// MaxPending caps connections that have not said hello yet. Zero
	// means DefaultMaxPending.
	MaxPending int
	// EventBuffer is each event subscriber's buffer; one that falls
	// further behind is told to resync. Zero means DefaultEventBuffer.
	EventBuffer int
	// RecentEvents is how many events RecentEvents keeps. Zero means
	// DefaultRecentEvents.
	RecentEvents int
	// KeepAlive is how often a silent operator stream (the events, a
	// command's phases) gets an SSE comment, so that proxies keep it
	// open. Zero means DefaultKeepAlive.
	KeepAlive time.Duration
	// Logger receives Hub events (ids and reasons, never tokens). Nil
	// means silent.
	Logger hclog.Logger
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	seen := map[string]bool{}
	for i, e := range c.Edges {
		if err := identity.CheckID(e.ID); err != nil {
			return fmt.Errorf("controlplane: config: Edges[%d].ID: %w", i, err)
		}
		if seen[e.ID] {
			return fmt.Errorf("controlplane: config: Edges[%d]: duplicate id %q", i, e.ID)
		}
		seen[e.ID] = true
		if e.TokenHash == ([32]byte{}) && (c.TLS == nil || c.TLS.ClientCAs == nil) {
			return fmt.Errorf("controlplane: config: Edges[%d] (%s) has no TokenHash and TLS does not verify client certificates", i, e.ID)
		}
	}
	if c.TrustDomain != "" {
		if err := identity.CheckTrustDomain(c.TrustDomain); err != nil {
			return fmt.Errorf("controlplane: config: TrustDomain: %w", err)
		}
		if c.TLS == nil || c.TLS.ClientCAs == nil {
			return errors.New("controlplane: config: TrustDomain needs TLS with ClientCAs (Edges prove their identity with a certificate)")
		}
	}
	if c.AllowUnknownEdges && (c.TLS == nil || c.TLS.ClientCAs == nil) {
		return errors.New("controlplane: config: AllowUnknownEdges needs TLS with ClientCAs (unknown Edges prove their id with a certificate)")
	}
	names := map[string]bool{}
	hashes := map[[32]byte]int{} // token hash -> index of the operator holding it
	for i, o := range c.Operators {
		if o.Name == "" || o.TokenHash == ([32]byte{}) {
			return fmt.Errorf("controlplane: config: Operators[%d]: Name and TokenHash are required", i)
		}
		if names[o.Name] {
			return fmt.Errorf("controlplane: config: Operators[%d]: duplicate name %q", i, o.Name)
		}
		names[o.Name] = true
		// One token under two names would be audited as whichever the
		// comparison met last.
		if j, dup := hashes[o.TokenHash]; dup {
			return fmt.Errorf("controlplane: config: Operators[%d] (%s): same token as Operators[%d] (%s); each operator needs its own", i, o.Name, j, c.Operators[j].Name)
		}
		hashes[o.TokenHash] = i
	}
	if c.StatusInterval < 0 || c.StatusTimeout < 0 || c.CommandTimeout < 0 || c.ProbeTimeout < 0 || c.HelloTimeout < 0 || c.MaxPending < 0 || c.EventBuffer < 0 || c.RecentEvents < 0 || c.KeepAlive < 0 {
		return errors.New("controlplane: config: negative interval, timeout or size")
	}
	return c.Wire.Validate()
}

// ErrClosed is returned by ServeEdges after Close.
var ErrClosed = errors.New("controlplane: hub closed")

// ErrFixedAtNew is returned by Reload for a configuration that changes
// who may connect (see Reload): that takes a restart.
var ErrFixedAtNew = errors.New("controlplane: reload cannot change a setting fixed at New")

// ErrUnknownEdge: no Edge with that id is known to the Hub.
var ErrUnknownEdge = errors.New("controlplane: unknown edge")

// ErrEdgeOffline: the Edge is not connected to the Hub.
var ErrEdgeOffline = errors.New("controlplane: edge not connected")

// Hub is the Control Plane: Edges dial it and say hello; it keeps a view of
// every Edge, its Nodes and providers (from status answers and relayed
// lifecycle events), relays operator commands for each Edge to resolve and
// run, and serves operators (Handler). It keeps a view only: it never
// connects to a Node, never schedules work, and stores no Edge
// configuration or registry state as a source of truth.
type Hub struct {
	cfg    Config
	tls    atomic.Pointer[tls.Config] // cfg.TLS, then each Reload's
	log    hclog.Logger
	epoch  uint32
	ctx    context.Context
	cancel context.CancelFunc
	events *feed
	ops    *operators
	wg     sync.WaitGroup

	mu        sync.Mutex
	closed    bool
	edges     map[string]*edgeState
	records   map[string]EdgeRecord
	counter   uint32
	pending   int
	listeners map[net.Listener]struct{}
	sessions  map[*wire.Session]struct{}

	// testHookHello, when set, is called at stages of a hello (tests).
	testHookHello func(stage string)
}

// edgeState is the Hub's state for one Edge id. Fields are guarded by the
// Hub's mu.
type edgeState struct {
	id      string
	cur     *edgeConn
	probing bool
	view    EdgeView
	// viewSeq is the Edge event seq the node view reflects; recent holds
	// the events applied since, to re-apply over a fresher status.
	viewSeq uint64
	recent  []*iopv1.EdgeNodeEvent
}

// New returns a Hub for cfg. It serves nothing until ServeEdges and
// Handler.
func New(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	h := &Hub{
		cfg:       cfg,
		log:       log,
		epoch:     uint32(time.Now().Unix()),
		events:    newFeed(cmp.Or(cfg.EventBuffer, DefaultEventBuffer), cmp.Or(cfg.RecentEvents, DefaultRecentEvents)),
		edges:     map[string]*edgeState{},
		records:   map[string]EdgeRecord{},
		listeners: map[net.Listener]struct{}{},
		sessions:  map[*wire.Session]struct{}{},
	}
	h.tls.Store(cfg.TLS)
	h.ops = newOperators(cfg.Operators, cfg.OperatorMTLS)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	for _, e := range cfg.Edges {
		h.records[e.ID] = e
		h.edges[e.ID] = &edgeState{id: e.ID, view: EdgeView{ID: e.ID, Nodes: []NodeView{}}}
	}
	return h, nil
}

// ServeEdges accepts Edge connections on ln until Close, and then returns
// ErrClosed. Each connection is served on a goroutine the Hub owns.
func (h *Hub) ServeEdges(ln net.Listener) error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	h.listeners[ln] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.listeners, ln)
		h.mu.Unlock()
	}()
	return acceptloop.Serve(ln, h.log, h.ctx.Done(), ErrClosed, func(nc net.Conn) error {
		h.mu.Lock()
		if h.closed || h.pending >= cmp.Or(h.cfg.MaxPending, DefaultMaxPending) {
			closed := h.closed
			h.mu.Unlock()
			nc.Close()
			if closed {
				return ErrClosed
			}
			h.log.Warn("too many connections without hello; closing one", "remote", nc.RemoteAddr())
			return nil
		}
		h.pending++
		h.wg.Go(func() { h.serveConn(nc) })
		h.mu.Unlock()
		return nil
	})
}

// Close stops accepting, closes every Edge session and ends every event
// subscription. It waits for the Hub's goroutines.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		h.wg.Wait()
		return nil
	}
	h.closed = true
	h.cancel()
	for ln := range h.listeners {
		ln.Close()
	}
	var sessions []*wire.Session
	for s := range h.sessions {
		sessions = append(sessions, s)
	}
	h.mu.Unlock()
	for _, s := range sessions {
		s.CloseWithReason(wire.ReasonNormal, "hub closing")
	}
	h.wg.Wait()
	h.events.close()
	return nil
}

// edgeConn is one accepted Edge connection.
type edgeConn struct {
	h       *Hub
	sess    *wire.Session
	ctl     *wire.Stream
	edgeID  string
	gen     uint64
	version string
	since   time.Time
	refresh chan struct{} // asks the status loop for a status now
	// rec and known are the Edge's record as it was authenticated
	// against: a reload that changes or removes it before the
	// connection is admitted turns the hello away.
	rec   EdgeRecord
	known bool
}

func (h *Hub) serveConn(nc net.Conn) {
	ctx, cancel := context.WithTimeout(h.ctx, cmp.Or(h.cfg.HelloTimeout, DefaultHelloTimeout))
	sess, err := wire.Accept(ctx, nc, h.tls.Load(), h.cfg.Wire)
	release := func() {
		h.mu.Lock()
		h.pending--
		h.mu.Unlock()
	}
	if err != nil {
		cancel()
		release()
		h.log.Debug("edge handshake failed", "remote", nc.RemoteAddr(), "error", err)
		return
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		cancel()
		release()
		sess.CloseWithReason(wire.ReasonRejected, "hub closing")
		return
	}
	h.sessions[sess] = struct{}{}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.sessions, sess)
		h.mu.Unlock()
	}()
	c := h.hello(ctx, sess)
	cancel()
	release()
	if c == nil {
		return
	}
	c.serve()
}

// hello runs the hello on a new session and returns the accepted
// connection, or nil after rejecting it.
func (h *Hub) hello(ctx context.Context, sess *wire.Session) *edgeConn {
	st, err := sess.AcceptStream(ctx)
	if err != nil {
		sess.CloseWithReason(wire.ReasonRejected, "no hello in time")
		return nil
	}
	env, err := st.ReadMessage(ctx)
	if err != nil {
		sess.CloseWithReason(wire.ReasonRejected, "no hello in time")
		return nil
	}
	req := env.GetEdgeHelloRequest()
	reject := func(r iopv1.EdgeHelloRejection, note string) *edgeConn {
		// Let the answer reach the Edge (it hangs up on reading it) before
		// closing: a session close would overtake the queued message.
		st.WriteMessage(msg(&iopv1.EdgeHelloResponse{Rejection: r, Message: note}))
		st.CloseWrite()
		t := time.NewTimer(2 * time.Second)
		select {
		case <-sess.Done():
		case <-t.C:
		case <-h.ctx.Done():
		}
		t.Stop()
		sess.CloseWithReason(wire.ReasonRejected, note)
		return nil
	}
	if req == nil {
		return reject(iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_MALFORMED, "the first message must be a hello")
	}
	id := req.GetEdgeId()
	if err := identity.CheckID(id); err != nil {
		h.log.Warn("edge hello refused: invalid edge id", "remote", sess.RemoteAddr())
		return reject(iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_MALFORMED, "invalid edge id")
	}
	rec, known, r := h.authenticate(id, req.GetCredential(), sess)
	if r != 0 {
		h.log.Warn("edge hello refused", "edge", id, "remote", sess.RemoteAddr(), "rejection", r.String())
		return reject(r, "refused")
	}
	if h.testHookHello != nil {
		h.testHookHello("authenticated")
	}
	c := &edgeConn{h: h, sess: sess, ctl: st, edgeID: id, version: nodewire.Note(req.GetVersion()), since: time.Now(), refresh: make(chan struct{}, 1),
		rec: rec, known: known}
	if r := h.admit(ctx, c); r != 0 {
		h.log.Warn("edge hello refused", "edge", id, "rejection", r.String())
		note := "edge id has a live connection"
		if r == iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED {
			note = "refused"
		}
		return reject(r, note)
	}
	if err := st.WriteMessage(msg(&iopv1.EdgeHelloResponse{Accepted: true, Generation: c.gen})); err != nil {
		h.drop(c, "hello answer failed")
		return nil
	}
	h.log.Info("edge connected", "edge", id, "generation", c.gen, "version", c.version)
	return c
}

// authenticate checks an Edge's identity: its token when its record has
// one, otherwise a verified client certificate naming it. It returns the
// record it checked against (known false: none).
func (h *Hub) authenticate(id string, credential []byte, sess *wire.Session) (EdgeRecord, bool, iopv1.EdgeHelloRejection) {
	h.mu.Lock()
	rec, known := h.records[id]
	h.mu.Unlock()
	r := h.check(id, rec, known, credential, sess)
	return rec, known, r
}

// check is authenticate's decision for rec, the record of id (known
// false: id has none).
func (h *Hub) check(id string, rec EdgeRecord, known bool, credential []byte, sess *wire.Session) iopv1.EdgeHelloRejection {
	certNamed := false
	if cs, ok := sess.ConnectionState(); ok && len(cs.VerifiedChains) > 0 {
		if td := h.cfg.TrustDomain; td != "" {
			named, err := identity.PeerID(&cs, td, identity.KindEdge)
			certNamed = err == nil && named == id
		} else {
			certNamed = certNamesEdge(cs.VerifiedChains[0][0], id)
		}
	}
	if h.cfg.TrustDomain != "" && !certNamed {
		// Managed mode: a token alone is never enough.
		return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED
	}
	switch {
	case known && rec.TokenHash != [32]byte{}:
		sum := sha256.Sum256(credential)
		if subtle.ConstantTimeCompare(sum[:], rec.TokenHash[:]) != 1 {
			return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED
		}
	case known:
		if !certNamed {
			return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED
		}
	case h.cfg.AllowUnknownEdges:
		if !certNamed {
			return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED
		}
	default:
		return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNKNOWN_EDGE
	}
	return 0
}

// admit makes c the Edge's connection. An existing connection is probed
// first: one that answers keeps its place and c is rejected without
// disturbing it; a silent one is fenced at once.
func (h *Hub) admit(ctx context.Context, c *edgeConn) iopv1.EdgeHelloRejection {
	for {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAVAILABLE
		}
		if rec, known := h.records[c.edgeID]; known != c.known || rec.TokenHash != c.rec.TokenHash {
			// A reload removed, added or re-keyed the Edge since its
			// hello was checked: the check no longer holds.
			h.mu.Unlock()
			return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED
		}
		es := h.edges[c.edgeID]
		if es == nil {
			es = &edgeState{id: c.edgeID, view: EdgeView{ID: c.edgeID, Nodes: []NodeView{}}}
			h.edges[c.edgeID] = es
		}
		old := es.cur
		if old == nil {
			h.counter++
			c.gen = uint64(h.epoch)<<32 | uint64(h.counter)
			es.cur = c
			es.view.Connected, es.view.Generation, es.view.Version = true, c.gen, c.version
			t := c.since.UTC()
			es.view.ConnectedAt = &t
			es.recent, es.viewSeq = nil, 0 // the Edge may have restarted its sequence
			h.mu.Unlock()
			h.events.publish(Event{Kind: EventEdgeConnected, EdgeID: c.edgeID, Generation: c.gen})
			return 0
		}
		if es.probing {
			h.mu.Unlock()
			return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_DUPLICATE
		}
		es.probing = true
		h.mu.Unlock()
		pctx, cancel := context.WithTimeout(ctx, cmp.Or(h.cfg.ProbeTimeout, DefaultProbeTimeout))
		_, perr := old.sess.Ping(pctx)
		cancel()
		h.mu.Lock()
		es.probing = false
		if perr == nil && es.cur == old {
			h.mu.Unlock()
			return iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_DUPLICATE
		}
		if es.cur == old {
			h.fenceLocked(es, old, "superseded: silent when the same edge said hello again")
		}
		h.mu.Unlock()
		old.sess.CloseWithReason(wire.ReasonSuperseded, "a new connection for this edge id")
	}
}

// fenceLocked ends c as its Edge's connection, once; a stale close never
// disturbs the live one.
func (h *Hub) fenceLocked(es *edgeState, c *edgeConn, reason string) {
	if es.cur != c {
		return
	}
	es.cur = nil
	es.view.Connected = false
	es.view.LastDisconnect = nodewire.Note(reason)
	h.log.Info("edge disconnected", "edge", c.edgeID, "generation", c.gen, "reason", reason)
	h.events.publish(Event{Kind: EventEdgeDisconnected, EdgeID: c.edgeID, Generation: c.gen, Reason: nodewire.Note(reason)})
}

func (h *Hub) drop(c *edgeConn, reason string) {
	h.mu.Lock()
	if es := h.edges[c.edgeID]; es != nil {
		h.fenceLocked(es, c, reason)
	}
	h.mu.Unlock()
	c.sess.CloseWithReason(wire.ReasonNormal, reason)
}

// serve runs an accepted connection: the event reader and the status loop,
// until the session ends.
func (c *edgeConn) serve() {
	var wg sync.WaitGroup
	wg.Go(c.statusLoop)
	c.readEvents()
	c.sess.Close()
	wg.Wait()
	reason := "closed"
	var ce *wire.CloseError
	if errors.As(c.sess.Err(), &ce) {
		reason = ce.Reason.String()
	}
	c.h.mu.Lock()
	if es := c.h.edges[c.edgeID]; es != nil {
		c.h.fenceLocked(es, c, reason)
	}
	c.h.mu.Unlock()
}

// readEvents applies the Edge's lifecycle events in order until the
// control stream or the session ends.
func (c *edgeConn) readEvents() {
	for {
		env, err := c.ctl.ReadMessage(c.sess.Context())
		if err != nil {
			if errors.Is(err, wire.ErrUnsupportedMessage) {
				continue // a newer Edge's message: skip it, keep the link
			}
			return
		}
		ev := env.GetEdgeNodeEvent()
		if ev == nil {
			c.sess.CloseWithReason(wire.ReasonProtocolError, "expected an edge node event")
			return
		}
		c.h.applyEvent(c, ev)
	}
}

// statusLoop takes a status at once, then every StatusInterval and
// whenever asked.
func (c *edgeConn) statusLoop() {
	interval := cmp.Or(c.h.cfg.StatusInterval, DefaultStatusInterval)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-c.refresh:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		case <-c.sess.Done():
			return
		}
		if err := c.h.takeStatus(c.sess.Context(), c); err != nil && c.sess.Err() == nil {
			c.h.log.Warn("edge status failed", "edge", c.edgeID, "error", err)
		}
		// Event storms ask for a status per event: take at most one per
		// minStatusGap, however many were asked for meanwhile.
		gap := time.NewTimer(minStatusGap)
		select {
		case <-gap.C:
		case <-c.sess.Done():
			gap.Stop()
			return
		}
		t.Reset(interval)
	}
}

// minStatusGap is the least time between two statuses of one Edge.
const minStatusGap = 100 * time.Millisecond

// askStatus asks the status loop for a status soon (coalesced).
func (c *edgeConn) askStatus() {
	select {
	case c.refresh <- struct{}{}:
	default:
	}
}

// Reload takes new Edges and Operators from cfg, and its TLS for Edge
// connections accepted later (a renewed certificate, another client CA
// pool). An Edge no longer configured is disconnected and leaves the view
// (unless AllowUnknownEdges still admits it by certificate); an Edge whose
// token changed is disconnected so that it says hello again with the new
// one; an operator removed, or whose token changed, loses every session it
// had. Who may connect is fixed at New: a cfg that changes TrustDomain,
// AllowUnknownEdges or OperatorMTLS, or turns TLS on or off, is refused
// (ErrFixedAtNew) rather than half applied. The limits, KeepAlive, Wire
// and Logger are fixed at New too and taken as they were. An invalid or
// refused cfg changes nothing.
func (h *Hub) Reload(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		same bool
	}{
		{"TrustDomain", cfg.TrustDomain == h.cfg.TrustDomain},
		{"AllowUnknownEdges", cfg.AllowUnknownEdges == h.cfg.AllowUnknownEdges},
		{"OperatorMTLS", cfg.OperatorMTLS == h.cfg.OperatorMTLS},
		{"TLS (on or off)", (cfg.TLS == nil) == (h.cfg.TLS == nil)},
	} {
		if !c.same {
			return fmt.Errorf("%w: %s; restart the Hub", ErrFixedAtNew, c.name)
		}
	}
	next := make(map[string]EdgeRecord, len(cfg.Edges))
	for _, e := range cfg.Edges {
		next[e.ID] = e
	}
	var drop []*edgeConn
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	for id, old := range h.records {
		rec, kept := next[id]
		es := h.edges[id]
		switch {
		case !kept && es != nil:
			if es.cur != nil {
				drop = append(drop, es.cur)
				h.fenceLocked(es, es.cur, "removed from configuration")
			}
			if !h.cfg.AllowUnknownEdges {
				delete(h.edges, id)
			}
		case kept && rec.TokenHash != old.TokenHash && es != nil && es.cur != nil:
			drop = append(drop, es.cur)
			h.fenceLocked(es, es.cur, "token changed")
		}
	}
	for id := range next {
		if h.edges[id] == nil {
			h.edges[id] = &edgeState{id: id, view: EdgeView{ID: id, Nodes: []NodeView{}}}
		}
	}
	h.records = next
	h.tls.Store(cfg.TLS)
	h.mu.Unlock()
	h.ops.setList(cfg.Operators)
	for _, c := range drop {
		c.sess.CloseWithReason(wire.ReasonRejected, "edge configuration changed")
	}
	h.log.Info("hub configuration reloaded", "edges", len(next), "operators", len(cfg.Operators), "disconnected", len(drop))
	return nil
}
