package nodes

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/internal/acceptloop"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// Defaults applied when a Config field is zero.
const (
	DefaultProbeTimeout    = 5 * time.Second
	DefaultRegisterTimeout = 10 * time.Second
	DefaultMaxPending      = 512
	DefaultEventBuffer     = 1024
)

// Config configures a Registry. Each field's comment says what its zero
// value means.
type Config struct {
	// Store holds the Node records. Required.
	Store Store
	// Authenticator checks registrations. Nil means TokenAuthenticator
	// over Store.
	Authenticator Authenticator
	// Epoch is this Edge run's boot epoch, from NextEpoch. Required (> 0):
	// generations are Epoch<<32 | counter, so none repeats across restarts.
	Epoch uint32
	// TLS, when set, makes Serve require TLS 1.3 (ALPN iop/1); with
	// ClientCAs it requires mutual TLS. Nil means plaintext. SetTLS
	// replaces it for connections accepted later.
	TLS *tls.Config
	// Wire tunes the sessions. Nil means wire defaults.
	Wire *wire.Config
	// ProbeTimeout bounds the ping of an existing connection when the same
	// node id registers again. Zero means DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// RegisterTimeout bounds everything from TCP accept to ready. Zero
	// means DefaultRegisterTimeout.
	RegisterTimeout time.Duration
	// MaxPending caps connections that have not finished registering;
	// more are closed at once. Zero means DefaultMaxPending.
	MaxPending int
	// EventBuffer is each subscriber's buffer; a subscriber that falls
	// further behind is told to resync. Zero means DefaultEventBuffer.
	EventBuffer int
	// Logger receives registry events (ids and reasons, never
	// credentials). Nil means silent.
	Logger hclog.Logger
}

// Errors returned by the dispatch seam.
var (
	// ErrNotReady: the node has no dispatch-ready connection.
	ErrNotReady = errors.New("nodes: node not ready")
	// ErrStaleGeneration: the generation is not the node's current one
	// (it was fenced, or belongs to an earlier Edge run).
	ErrStaleGeneration = errors.New("nodes: stale connection generation")
	// ErrProviderUnavailable: the node does not host the provider now.
	ErrProviderUnavailable = errors.New("nodes: provider not hosted by the node")
	// ErrUnknownNode: no record for the node id.
	ErrUnknownNode = errors.New("nodes: unknown node")
	// ErrUnknownProvider: no record hosts the provider id.
	ErrUnknownProvider = errors.New("nodes: unknown provider")
	// ErrClosed is returned by Serve after Close or Shutdown.
	ErrClosed = errors.New("nodes: registry closed")
	// ErrNotStarted: a run or tunnel never reached its Node, or the
	// Node refused it before it ran: the Node is shutting down and its
	// GOAWAY crossed the stream (or it was at its stream limit), or the
	// connection ended before the request left. Nothing reached the
	// provider, so the work may be sent elsewhere. StartRun, Run.Started,
	// OpenTunnel and Tunnel.Response return it (a Tunnel's as a
	// *TunnelError with TunnelNotStarted, which matches it with
	// errors.Is).
	ErrNotStarted = errors.New("nodes: the work never reached the node")
)

// dispatchErr wraps a failure to open a dispatch's stream or to write its
// request. Either means the request never reached the Node (OpenStream
// sends nothing; a message the stream did not take was not sent, and a
// part of one is never decoded), so one that comes of the Node's GOAWAY
// or refusal, or of the connection's end, also matches ErrNotStarted; a
// local error (ctx, a message too large) does not.
func dispatchErr(op string, err error) error {
	var ce *wire.CloseError
	if errors.Is(err, wire.ErrGoAway) || wire.IsRefused(err) || errors.As(err, &ce) {
		return fmt.Errorf("nodes: %s: %w: %w", op, ErrNotStarted, err)
	}
	return fmt.Errorf("nodes: %s: %w", op, err)
}

// Registry is the Edge's registry of Nodes: it accepts Node sessions,
// authenticates and registers them with a connection generation, tracks
// readiness and provider health, publishes lifecycle events, pushes config
// updates, and is the dispatch seam for runs and node commands on an exact
// (node, generation).
type Registry struct {
	cfg         Config
	tls         atomic.Pointer[tls.Config] // cfg.TLS until SetTLS; nil: plaintext
	log         hclog.Logger
	auth        Authenticator
	policy      *iopv1.LeasePolicy // sent with every payload; nil until set
	probe       time.Duration
	regTimeout  time.Duration
	maxPending  int
	ctx         context.Context
	cancel      context.CancelFunc
	hub         *hub
	wg          sync.WaitGroup
	closeOnce   sync.Once
	mu          sync.Mutex
	store       Store
	nodes       map[string]*nodeState
	counter     uint32
	revision    uint64
	pending     int
	closed      bool
	listeners   map[net.Listener]struct{}
	sessions    map[*wire.Session]struct{}
	testHookReg func(stage string)
}

// nodeState is the registry's state for one configured node id.
type nodeState struct {
	rec        Record
	payload    *iopv1.NodeConfig
	cur        *conn // current registered connection, ready or not
	probing    bool  // a new registration is probing cur
	lastReason string
	// Operator state the Edge owns; it outlives connections.
	draining bool            // admit nothing new to this node
	disabled map[string]bool // providers admitting nothing new
}

// New returns a Registry for cfg.
func New(cfg Config) (*Registry, error) {
	if cfg.Store == nil {
		return nil, errors.New("nodes: config: Store is required")
	}
	if cfg.Epoch == 0 {
		return nil, errors.New("nodes: config: Epoch is required (see NextEpoch)")
	}
	if err := cfg.Wire.Validate(); err != nil {
		return nil, fmt.Errorf("nodes: config: Wire: %w", err)
	}
	if cfg.ProbeTimeout < 0 || cfg.RegisterTimeout < 0 || cfg.MaxPending < 0 || cfg.EventBuffer < 0 {
		return nil, errors.New("nodes: config: negative ProbeTimeout, RegisterTimeout, MaxPending or EventBuffer")
	}
	r := &Registry{
		cfg:        cfg,
		log:        cfg.Logger,
		auth:       cfg.Authenticator,
		probe:      cmp.Or(cfg.ProbeTimeout, DefaultProbeTimeout),
		regTimeout: cmp.Or(cfg.RegisterTimeout, DefaultRegisterTimeout),
		maxPending: cmp.Or(cfg.MaxPending, DefaultMaxPending),
		hub:        newHub(cmp.Or(cfg.EventBuffer, DefaultEventBuffer)),
		nodes:      make(map[string]*nodeState),
		listeners:  make(map[net.Listener]struct{}),
		sessions:   make(map[*wire.Session]struct{}),
	}
	if r.log == nil {
		r.log = hclog.NewNullLogger()
	}
	if r.auth == nil {
		// Tokens are looked up in the store of the moment, so a Refresh
		// that changes a token takes effect for the next registration.
		r.auth = TokenAuthenticator{Store: currentStore{r}}
	}
	r.tls.Store(cfg.TLS)
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.mu.Lock()
	r.applyStoreLocked(cfg.Store)
	r.mu.Unlock()
	return r, nil
}

// CertificateWarning is how long before its client certificate expires a
// Node's registration is logged as a warning (NodeSnapshot's
// CertificateExpiry gives the time itself).
const CertificateWarning = 14 * 24 * time.Hour

// ErrTLSMode is returned by SetTLS for a configuration that would turn TLS
// on or off: Nodes dial with one or the other, so the change needs a
// restart that they reconnect to.
var ErrTLSMode = errors.New("nodes: TLS cannot be turned on or off while serving")

// SetTLS replaces the TLS configuration for connections accepted from now
// on: a renewed certificate, another client CA pool. Sessions already up
// keep the handshake they made. c must be nil exactly when the current
// configuration is (ErrTLSMode otherwise, and nothing changes).
func (r *Registry) SetTLS(c *tls.Config) error {
	// Only SetTLS stores, and never across nil, so this check and store
	// need no lock.
	if (c == nil) != (r.tls.Load() == nil) {
		return ErrTLSMode
	}
	r.tls.Store(c)
	return nil
}

// TLS returns the TLS configuration connections are accepted with now
// (nil: plaintext).
func (r *Registry) TLS() *tls.Config { return r.tls.Load() }

// Serve accepts Node connections on ln until Close or Shutdown, and then
// returns ErrClosed. Each connection is served on its own goroutine, owned
// by the registry.
func (r *Registry) Serve(ln net.Listener) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	r.listeners[ln] = struct{}{}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.listeners, ln)
		r.mu.Unlock()
	}()
	return acceptloop.Serve(ln, r.log, r.ctx.Done(), ErrClosed, func(nc net.Conn) error {
		if !r.admitPending() {
			r.log.Warn("too many unregistered connections; closing one", "remote", nc.RemoteAddr())
			nc.Close()
			return nil
		}
		if !r.goOwned(func() { r.serveConn(nc) }) {
			nc.Close()
			r.releasePending()
			return ErrClosed
		}
		return nil
	})
}

// goOwned starts f on a goroutine the registry waits for, unless the
// registry is closed.
func (r *Registry) goOwned(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Go(f)
	return true
}

func (r *Registry) admitPending() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending >= r.maxPending {
		return false
	}
	r.pending++
	return true
}

func (r *Registry) releasePending() {
	r.mu.Lock()
	r.pending--
	r.mu.Unlock()
}

// Subscribe returns a subscription to lifecycle events from now on.
func (r *Registry) Subscribe() *Subscription { return r.hub.subscribe() }

// Shutdown stops accepting, tells every Node session that no new work
// will come (GOAWAY), waits until the runs and tunnels in progress have
// finished or ctx ends, and then closes the sessions.
func (r *Registry) Shutdown(ctx context.Context) error {
	sessions := r.stop()
	for _, s := range sessions {
		s.GoAway("edge shutting down")
	}
	for _, s := range sessions {
		// The control stream stays open for the session's life. Once ctx
		// has ended, each wait returns at once.
		s.WaitStreams(ctx, 1)
	}
	for _, s := range sessions {
		s.Close()
	}
	return r.finish(ctx.Err())
}

// Close stops accepting and closes every Node session at once. Runs in
// progress end with a transport failure.
func (r *Registry) Close() error {
	for _, s := range r.stop() {
		s.Close()
	}
	return r.finish(nil)
}

func (r *Registry) stop() []*wire.Session {
	r.mu.Lock()
	r.closed = true
	// Cancelled before the listeners close, so that an accept loop whose
	// Accept fails for it knows it was stopped.
	r.cancel()
	for ln := range r.listeners {
		ln.Close()
	}
	sessions := make([]*wire.Session, 0, len(r.sessions))
	for s := range r.sessions {
		sessions = append(sessions, s)
	}
	r.mu.Unlock()
	return sessions
}

func (r *Registry) finish(err error) error {
	r.wg.Wait()
	r.closeOnce.Do(r.hub.close)
	return err
}

// nextGenLocked returns the next connection generation.
func (r *Registry) nextGenLocked() (uint64, bool) {
	if r.counter == 1<<32-1 {
		return 0, false
	}
	r.counter++
	return uint64(r.cfg.Epoch)<<32 | uint64(r.counter), true
}

// Refresh swaps in a new Store (nil keeps the current one) and pushes a
// config update to every ready Node whose payload changed. A Node removed
// from the store is disconnected, and so is one whose TokenHash changed
// (it registers again with its new token; a registration checked against
// the old one is turned away). Work in flight keeps the revision it was
// admitted under; only new runs see the change.
func (r *Registry) Refresh(s Store) {
	r.mu.Lock()
	if s == nil {
		s = r.store
	}
	pushes, drops := r.applyStoreLocked(s)
	r.mu.Unlock()
	r.deliver(pushes, drops)
}

func (r *Registry) deliver(pushes []push, drops []drop) {
	for _, d := range drops {
		r.goOwned(func() { d.c.sess.CloseWithReason(wire.ReasonRejected, d.why) })
	}
	for _, p := range pushes {
		r.goOwned(func() { p.c.push(p.cfg) })
	}
}

type push struct {
	c   *conn
	cfg *iopv1.NodeConfig
}

// drop is a connection a configuration change ends, and why (the Node
// reads it in the session's close).
type drop struct {
	c   *conn
	why string
}

// applyStoreLocked makes the node states match the store. It returns the
// config pushes due and the connections of removed nodes.
func (r *Registry) applyStoreLocked(s Store) (pushes []push, drops []drop) {
	r.store = s
	seen := make(map[string]bool)
	for _, rec := range s.Records() {
		seen[rec.ID] = true
		ns := r.nodes[rec.ID]
		if ns == nil {
			ns = &nodeState{}
			r.nodes[rec.ID] = ns
		}
		if c := ns.cur; c != nil && rec.TokenHash != ns.rec.TokenHash {
			// A token rotated (say, because it leaked) no longer keeps
			// the connection it opened: the Node registers again with
			// its new one.
			r.fenceLocked(ns, c, "token changed")
			drops = append(drops, drop{c, "node token changed; register with the new one"})
		}
		ns.rec = rec
		for id := range ns.disabled {
			if !slices.ContainsFunc(rec.Providers, func(p ProviderSpec) bool { return p.ID == id }) {
				delete(ns.disabled, id)
			}
		}
		providers := payloadProviders(rec)
		policy := r.policyForLocked(ns)
		if ns.payload != nil && providersEqual(ns.payload.GetProviders(), providers) && proto.Equal(ns.payload.GetLeasePolicy(), policy) &&
			slices.EqualFunc(ns.payload.GetWorkspaces(), rec.Workspaces, func(a, b *iopv1.WorkspaceGrant) bool { return proto.Equal(a, b) }) {
			continue
		}
		r.revision++
		ns.payload = &iopv1.NodeConfig{Revision: r.revision, Providers: providers, LeasePolicy: policy, Workspaces: rec.Workspaces}
		if c := ns.cur; c != nil && c.ready {
			c.sentLocked(ns.payload)
			pushes = append(pushes, push{c, ns.payload})
		}
	}
	for id, ns := range r.nodes {
		if seen[id] {
			continue
		}
		if c := ns.cur; c != nil {
			r.fenceLocked(ns, c, "removed")
			drops = append(drops, drop{c, "node removed from configuration"})
		}
		delete(r.nodes, id)
	}
	return pushes, drops
}

func payloadProviders(rec Record) []*iopv1.ProviderConfig {
	out := make([]*iopv1.ProviderConfig, 0, len(rec.Providers))
	for _, p := range rec.Providers {
		out = append(out, &iopv1.ProviderConfig{
			Id:                  p.ID,
			Adapter:             p.Adapter,
			Category:            nodewire.Category(p.Category),
			Models:              slices.Clone(p.Models),
			Capacity:            uint32(p.Capacity),
			LongContextCapacity: uint32(p.LongContextCapacity),
			CredentialId:        p.Credential,
		})
	}
	return out
}

func providersEqual(a, b []*iopv1.ProviderConfig) bool {
	return slices.EqualFunc(a, b, func(x, y *iopv1.ProviderConfig) bool { return proto.Equal(x, y) })
}

// fenceLocked ends c's generation: c stops being the node's connection and,
// if it was ready, one EventDisconnected is published. It is a no-op when c
// is no longer current, so a stale close never disturbs the live one.
func (r *Registry) fenceLocked(ns *nodeState, c *conn, reason string) {
	if ns.cur != c {
		return
	}
	ns.cur = nil
	c.fenced = true
	if c.ready {
		ns.lastReason = reason
		r.hub.publish(Event{Kind: EventDisconnected, NodeID: c.nodeID, Generation: c.gen, Reason: reason})
		r.log.Info("node disconnected", "node", c.nodeID, "generation", c.gen, "reason", reason)
	}
}

// Snapshot returns every configured node, sorted by id, including nodes
// that never connected (Connected false).
func (r *Registry) Snapshot() []NodeSnapshot {
	snap, _ := r.SnapshotSeq()
	return snap
}

// SnapshotSeq is Snapshot with the Seq of the last lifecycle event it
// reflects: every event with a higher Seq happened after it.
func (r *Registry) SnapshotSeq() ([]NodeSnapshot, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]NodeSnapshot, 0, len(r.nodes))
	for _, rec := range r.store.Records() {
		if ns := r.nodes[rec.ID]; ns != nil {
			out = append(out, ns.snapshot())
		}
	}
	return out, r.hub.lastSeq()
}

// Node returns one node's snapshot.
func (r *Registry) Node(id string) (NodeSnapshot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[id]
	if ns == nil {
		return NodeSnapshot{}, false
	}
	return ns.snapshot(), true
}

// Current returns the generation of the node's dispatch-ready connection.
func (r *Registry) Current(id string) (uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[id]
	if ns == nil || ns.cur == nil || !ns.cur.ready {
		return 0, false
	}
	return ns.cur.gen, true
}

// Available reports whether a provider can take work now (its Node is
// dispatch-ready and reports it available) and on which generation.
func (r *Registry) Available(nodeID, providerID string) (uint64, bool) {
	gen, _, ok := r.Admission(nodeID, providerID, "")
	return gen, ok
}

// Admission is Available with what the Node applied for the provider: the
// capacity and models of the configuration it last acknowledged (or
// registered with). The Node refuses work beyond them, so an admission
// that counts on a raised capacity or an added model waits for the
// Node's acknowledgement of it (a Node's reports are events: Subscribe).
// model is the model the work names ("" for any): a configuration sent
// since without it holds the work back (Applied.Held).
func (r *Registry) Admission(nodeID, providerID, model string) (gen uint64, applied Applied, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[nodeID]
	if ns == nil || ns.cur == nil || !ns.cur.ready {
		return 0, Applied{}, false
	}
	rep, ok := ns.cur.providers[providerID]
	if !ok || rep.status != StatusAvailable || ns.draining || ns.cur.goneAway() || ns.disabled[providerID] {
		return 0, Applied{}, false
	}
	applied = rep.applied
	applied.Current = ns.payload == nil || ns.cur.revision >= ns.payload.GetRevision()
	if !applied.Current {
		held, least := ns.cur.unsettledLocked(ns.payload, providerID, model)
		applied.Held = held
		if least > 0 && (applied.Capacity == 0 || least < applied.Capacity) {
			applied.Capacity = least
		}
	}
	return ns.cur.gen, applied, true
}

// tokenHash is the TokenHash of id's record now (zero for an id not
// configured).
func (r *Registry) tokenHash(id string) [32]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ns := r.nodes[id]; ns != nil {
		return ns.rec.TokenHash
	}
	return [32]byte{}
}

// currentStore is the registry's store as of each call (Refresh replaces
// it).
type currentStore struct{ r *Registry }

func (c currentStore) get() Store {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	return c.r.store
}

func (c currentStore) Lookup(id string) (Record, bool) { return c.get().Lookup(id) }
func (c currentStore) Records() []Record               { return c.get().Records() }

// Store returns a Store that always reads the registry's current records,
// for an Authenticator that must follow Refresh (such as a
// TokenAuthenticator behind a certificate check).
func (r *Registry) Store() Store { return currentStore{r} }

// SessionStats returns the wire counters of the node's current
// connection.
func (r *Registry) SessionStats(nodeID string) (wire.Stats, bool) {
	r.mu.Lock()
	ns := r.nodes[nodeID]
	var c *conn
	if ns != nil {
		c = ns.cur
	}
	r.mu.Unlock()
	if c == nil {
		return wire.Stats{}, false
	}
	return c.sess.Stats(), true
}

// LeaseKey returns the credential-lease encryption key the node registered
// on its connection of generation gen. A lease sealed to it can be opened
// only there: a reconnect registers afresh.
func (r *Registry) LeaseKey(nodeID string, gen uint64) ([]byte, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[nodeID]
	if ns == nil || ns.cur == nil || !ns.cur.ready || ns.cur.gen != gen || len(ns.cur.leaseKey) == 0 {
		return nil, false
	}
	return slices.Clone(ns.cur.leaseKey), true
}

// SetLeasePolicy sets the credential-lease policy every Node receives with
// its configuration (revoked credentials, minimum revisions, disabled
// profiles and routes); connected Nodes get it at once.
func (r *Registry) SetLeasePolicy(p *iopv1.LeasePolicy) {
	r.mu.Lock()
	r.policy = proto.Clone(p).(*iopv1.LeasePolicy)
	pushes, drops := r.applyStoreLocked(r.store)
	r.mu.Unlock()
	r.deliver(pushes, drops)
}

// SetDraining drains a node (on) or resumes it: a draining node is admitted
// nothing new while the work it holds finishes. The state is the Edge's and
// outlives the node's connections. Providers whose status changes are
// published as EventProviderHealth.
func (r *Registry) SetDraining(nodeID string, on bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[nodeID]
	if ns == nil {
		return ErrUnknownNode
	}
	if ns.draining == on {
		return nil
	}
	before := ns.snapshot()
	ns.draining = on
	r.publishChangesLocked(ns, before)
	return nil
}

// policyForLocked is the lease policy a node's payload carries: the
// Edge's, plus the node's disabled providers as disabled profiles.
func (r *Registry) policyForLocked(ns *nodeState) *iopv1.LeasePolicy {
	if r.policy == nil && len(ns.disabled) == 0 {
		return nil
	}
	p := &iopv1.LeasePolicy{}
	if r.policy != nil {
		p = proto.Clone(r.policy).(*iopv1.LeasePolicy)
	}
	for id := range ns.disabled {
		p.DisabledProfiles = append(p.DisabledProfiles, id)
	}
	slices.Sort(p.DisabledProfiles)
	return p
}

// SetProviderEnabled disables a provider (admitting nothing new to it) or
// enables it again. Like draining, the state is the Edge's; a disabled
// provider also reaches its Node as a disabled lease profile.
func (r *Registry) SetProviderEnabled(providerID string, enabled bool) error {
	r.mu.Lock()
	err := r.setProviderEnabledLocked(providerID, enabled)
	var pushes []push
	var drops []drop
	if err == nil {
		pushes, drops = r.applyStoreLocked(r.store)
	}
	r.mu.Unlock()
	r.deliver(pushes, drops)
	return err
}

func (r *Registry) setProviderEnabledLocked(providerID string, enabled bool) error {
	for _, ns := range r.nodes {
		for _, p := range ns.rec.Providers {
			if p.ID != providerID {
				continue
			}
			if !ns.disabled[providerID] == enabled {
				return nil
			}
			before := ns.snapshot()
			if ns.disabled == nil {
				ns.disabled = map[string]bool{}
			}
			if enabled {
				delete(ns.disabled, providerID)
			} else {
				ns.disabled[providerID] = true
			}
			r.publishChangesLocked(ns, before)
			return nil
		}
	}
	return ErrUnknownProvider
}

// ProviderNode returns the id of the node that hosts a configured provider.
func (r *Registry) ProviderNode(providerID string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, ns := range r.nodes {
		for _, p := range ns.rec.Providers {
			if p.ID == providerID {
				return id, true
			}
		}
	}
	return "", false
}

// publishChangesLocked publishes EventProviderHealth for each provider of
// ns whose snapshot differs from before, when the node is ready.
func (r *Registry) publishChangesLocked(ns *nodeState, before NodeSnapshot) {
	c := ns.cur
	if c == nil || !c.ready {
		return
	}
	after := ns.snapshot()
	for i, p := range after.Providers {
		if i < len(before.Providers) && before.Providers[i].Status == p.Status && before.Providers[i].Health == p.Health {
			continue
		}
		p := p.clone()
		r.hub.publish(Event{Kind: EventProviderHealth, NodeID: c.nodeID, Generation: c.gen, Provider: &p})
	}
}

// Disconnect closes the node's connection of the given generation (an
// operator action). It fails with ErrStaleGeneration when that generation
// is not current.
func (r *Registry) Disconnect(id string, gen uint64, reason string) error {
	r.mu.Lock()
	ns := r.nodes[id]
	if ns == nil {
		r.mu.Unlock()
		return ErrUnknownNode
	}
	c := ns.cur
	if c == nil || c.gen != gen {
		r.mu.Unlock()
		return ErrStaleGeneration
	}
	r.fenceLocked(ns, c, "disconnected: "+reason)
	r.mu.Unlock()
	c.sess.CloseWithReason(wire.ReasonNormal, reason)
	return nil
}

func (ns *nodeState) snapshot() NodeSnapshot {
	snap := NodeSnapshot{
		ID:             ns.rec.ID,
		LastDisconnect: ns.lastReason,
		Draining:       ns.draining || (ns.cur != nil && ns.cur.ready && ns.cur.goingAway),
	}
	if ns.payload != nil {
		snap.ConfigRevision = ns.payload.GetRevision()
	}
	c := ns.cur
	online := c != nil && c.ready
	if online {
		snap.Connected = true
		snap.Generation = c.gen
		snap.AppliedRevision = c.revision
		snap.ConnectedAt = c.readyAt
		snap.CertificateExpiry = c.certExpiry
	}
	for _, p := range ns.rec.Providers {
		ps := ProviderSnapshot{
			ID:       p.ID,
			Adapter:  p.Adapter,
			Category: p.Category,
			Models:   slices.Clone(p.Models),
			Status:   StatusUnavailable,
			Health:   HealthOffline,
		}
		if online {
			rep, hosted := c.providers[p.ID]
			switch {
			case c.refused[p.ID] != 0:
				ps.Health = HealthRefused
			case hosted:
				ps.Status, ps.Health = rep.status, rep.health
				if ps.Status == StatusAvailable && ns.disabled[p.ID] {
					ps.Status = StatusDisabled
				} else if ps.Status == StatusAvailable && snap.Draining {
					ps.Status = StatusDraining
				}
				ps.Capacity = p.Capacity
				ps.LongContextCapacity = p.LongContextCapacity
				ps.InFlight = c.inflight[p.ID]
			}
		}
		snap.Providers = append(snap.Providers, ps)
	}
	return snap
}
