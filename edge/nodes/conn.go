package nodes

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// conn is one registered Node connection: a session, its control stream and
// its generation. Fields below mu are guarded by the registry's mu.
type conn struct {
	r      *Registry
	sess   *wire.Session
	ctl    *wire.Stream
	ctlMu  sync.Mutex // serializes writes on ctl
	nodeID string
	gen    uint64
	// workspaces are the configured refs the Node accepted (ready, acks).
	workspaces []string
	// leaseKey is the Node's X25519 key for credential leases, as it
	// registered on this connection (empty: it takes none).
	leaseKey []byte
	// tokenHash is the record's TokenHash when the connection was
	// authenticated: a reload that changes it before the connection is
	// admitted turns the registration away.
	tokenHash [32]byte

	ready    bool
	fenced   bool
	revision uint64
	readyAt  time.Time
	// certExpiry is the NotAfter of the client certificate the Node
	// presented (zero without one).
	certExpiry time.Time
	providers  map[string]providerReport
	refused    map[string]iopv1.RefusalReason
	inflight   map[string]int
	// goingAway: the Node sent GOAWAY (it is shutting down): nothing new
	// is admitted to it; the work it has runs to its end.
	goingAway bool

	// sent are the payloads sent on this connection that the Node has not
	// acknowledged yet, oldest first (at most maxUnacked); appliedCfg is
	// the one it last applied (at revision; nil when it is not known).
	sent       []*iopv1.NodeConfig
	appliedCfg *iopv1.NodeConfig
}

type providerReport struct {
	status ProviderStatus
	health ProviderHealth
	// applied is what the Node reported it applied: it refuses work
	// beyond it, whatever the Edge's configuration says by then.
	applied Applied
}

// Applied is what a Node reported it applied for one provider: the
// capacity and the models of the configuration it admits by.
type Applied struct {
	// Capacity is 0 when the Node reported none. Until the Node
	// acknowledges the latest configuration it is the least it may be
	// admitting by: a configuration sent since its last acknowledgement
	// may already be applied, and may give less.
	Capacity int
	// Models are the models the Node serves on the provider; empty means
	// any. Shared: never modify it.
	Models []string
	// Current is set when the Node has applied the latest configuration
	// the Edge sent it: what it lacks then, it lacks for good (until the
	// next change), not for want of an acknowledgement.
	Current bool
	// Held is set when a configuration the Node may be admitting by
	// would refuse the work: the one it last acknowledged, or one sent
	// since (the Node applies them in order and acknowledges each after
	// applying it). One would refuse when it lacks the provider or the
	// model, or would refuse the credential lease the latest gives the
	// provider: the provider's credential changed, or its lease policy
	// revokes the credential, requires a later revision of it or
	// disables the provider. A dispatch then waits for the Node's
	// acknowledgement instead of being refused by the Node (a credential
	// rotated right after its revocation, a model removed and added
	// back, say).
	Held bool
}

// maxUnacked bounds the payloads a connection remembers until the Node
// acknowledges them; forgetting one leaves what the Node admits by
// unknown (every provider Held) until it acknowledges one remembered.
const maxUnacked = 16

// sentLocked notes that cfg was sent on c (r.mu held).
func (c *conn) sentLocked(cfg *iopv1.NodeConfig) {
	if cfg == nil {
		return
	}
	if len(c.sent) == maxUnacked {
		// The Node may apply the one forgotten before it acknowledges
		// anything: what it admits by is not known until then.
		c.sent = slices.Delete(c.sent, 0, 1)
		c.appliedCfg = nil
	}
	c.sent = append(c.sent, cfg)
}

// appliedLocked notes that the Node applied revision (r.mu held): the
// payload sent with it is what it now admits by, and older ones are no
// longer pending.
func (c *conn) appliedLocked(revision uint64) {
	c.appliedCfg = nil
	i := 0
	for ; i < len(c.sent) && c.sent[i].GetRevision() <= revision; i++ {
		if c.sent[i].GetRevision() == revision {
			c.appliedCfg = c.sent[i]
		}
	}
	c.sent = slices.Delete(c.sent, 0, i)
}

// unsettledLocked is what the configurations the Node may be admitting
// by, while it has not acknowledged latest, allow for work on provider
// (r.mu held): the one it last applied and each sent since but before
// latest. The Node applies them in order and may have applied any of
// them already. held is set when one of them would refuse the work (see
// Applied.Held; model "" is any); capacity is the least capacity one of
// them gives provider (0 for none).
func (c *conn) unsettledLocked(latest *iopv1.NodeConfig, provider, model string) (held bool, capacity int) {
	if c.appliedCfg == nil {
		return true, 0 // what the Node admits by is not known
	}
	// The one it acknowledged has its own report (Applied's capacity and
	// models): only its lease policy is left to judge.
	held = leaseRefused(c.appliedCfg, latest, provider)
	for _, cfg := range c.sentBefore(latest) {
		i := slices.IndexFunc(cfg.GetProviders(), func(p *iopv1.ProviderConfig) bool { return p.GetId() == provider })
		if i < 0 {
			held = true
			continue
		}
		p := cfg.GetProviders()[i]
		if ms := p.GetModels(); model != "" && len(ms) > 0 && !slices.Contains(ms, model) {
			held = true
		}
		held = held || leaseRefused(cfg, latest, provider)
		if n := int(p.GetCapacity()); n > 0 && (capacity == 0 || n < capacity) {
			capacity = n
		}
	}
	return held, capacity
}

// grantSettledLocked reports whether every configuration the Node may be
// admitting by, while it has not acknowledged latest, grants ref as latest
// does (r.mu held): the one it last applied and each sent since. Only
// then is its acceptance of ref, as last reported, what it opens by.
func (c *conn) grantSettledLocked(latest *iopv1.NodeConfig, ref string) bool {
	switch c.appliedCfg {
	case nil:
		return false // what the Node admits by is not known
	case latest:
		return true // the steady state: nothing pending, nothing to compare
	}
	want := grantOf(latest, ref)
	if !proto.Equal(grantOf(c.appliedCfg, ref), want) {
		return false
	}
	for _, cfg := range c.sentBefore(latest) {
		if !proto.Equal(grantOf(cfg, ref), want) {
			return false
		}
	}
	return true
}

// sentBefore is what was sent since the Node's last acknowledgement and
// before latest (r.mu held): configurations it may have applied without
// saying so yet.
func (c *conn) sentBefore(latest *iopv1.NodeConfig) []*iopv1.NodeConfig {
	i := 0
	for i < len(c.sent) && c.sent[i].GetRevision() < latest.GetRevision() {
		i++
	}
	return c.sent[:i]
}

// grantOf is the grant cfg gives ref (nil for none: proto.Equal holds a
// nil grant equal to another nil, and to no grant that exists).
func grantOf(cfg *iopv1.NodeConfig, ref string) *iopv1.WorkspaceGrant {
	for _, g := range cfg.GetWorkspaces() {
		if g.GetRef() == ref {
			return g
		}
	}
	return nil
}

// leaseRefused reports whether a Node that applied applied would refuse
// the credential lease latest gives provider (see Applied.Held).
func leaseRefused(applied, latest *iopv1.NodeConfig, provider string) bool {
	cred := credentialOf(latest, provider)
	if cred == "" {
		return false // not leased: no lease to refuse
	}
	if applied == nil {
		return true
	}
	pol := applied.GetLeasePolicy()
	return credentialOf(applied, provider) != cred ||
		slices.Contains(pol.GetRevokedCredentials(), cred) ||
		slices.Contains(pol.GetDisabledProfiles(), provider) ||
		pol.GetMinRevisions()[cred] > latest.GetLeasePolicy().GetMinRevisions()[cred]
}

// credentialOf is the credential cfg names for provider ("" for none).
func credentialOf(cfg *iopv1.NodeConfig, provider string) string {
	for _, p := range cfg.GetProviders() {
		if p.GetId() == provider {
			return p.GetCredentialId()
		}
	}
	return ""
}

func (r *Registry) hook(stage string) {
	if r.testHookReg != nil {
		r.testHookReg(stage)
	}
}

// serveConn runs one Node connection from TCP accept to close.
func (r *Registry) serveConn(nc net.Conn) {
	ctx, cancel := context.WithTimeout(r.ctx, r.regTimeout)
	sess, err := wire.Accept(ctx, nc, r.tls.Load(), r.cfg.Wire)
	if err != nil {
		cancel()
		r.releasePending()
		r.log.Debug("node handshake failed", "remote", nc.RemoteAddr(), "error", err)
		return
	}
	if !r.track(sess) {
		cancel()
		r.releasePending()
		sess.CloseWithReason(wire.ReasonRejected, "edge closing")
		return
	}
	defer r.untrack(sess)
	c := r.register(ctx, sess)
	cancel()
	r.releasePending()
	if c == nil {
		return
	}
	c.serve()
}

func (r *Registry) track(s *wire.Session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.sessions[s] = struct{}{}
	return true
}

func (r *Registry) untrack(s *wire.Session) {
	r.mu.Lock()
	delete(r.sessions, s)
	r.mu.Unlock()
}

// register runs registration and readiness on a new session. It returns the
// ready connection, or nil after the session was rejected or closed.
func (r *Registry) register(ctx context.Context, sess *wire.Session) *conn {
	st, err := sess.AcceptStream(ctx)
	if err != nil {
		sess.CloseWithReason(wire.ReasonRejected, "no registration in time")
		return nil
	}
	env, err := st.ReadMessage(ctx)
	if err != nil {
		sess.CloseWithReason(wire.ReasonRejected, "no registration in time")
		return nil
	}
	req := env.GetRegisterRequest()
	if req == nil {
		r.reject(sess, st, iopv1.RegisterRejection_REGISTER_REJECTION_MALFORMED, "first message must be a registration")
		return nil
	}
	if err := validID(req.GetNodeId()); err != nil {
		r.reject(sess, st, iopv1.RegisterRejection_REGISTER_REJECTION_MALFORMED, "invalid node id")
		return nil
	}
	if k := req.GetEncryptionPublicKey(); len(k) != 0 && len(k) != 32 {
		r.reject(sess, st, iopv1.RegisterRejection_REGISTER_REJECTION_MALFORMED, "encryption public key is not an X25519 key")
		return nil
	}
	hello := Hello{NodeID: req.GetNodeId(), Credential: req.GetCredential(), RemoteAddr: sess.RemoteAddr()}
	if cs, ok := sess.ConnectionState(); ok {
		hello.TLS = &cs
	}
	tokenHash := r.tokenHash(req.GetNodeId()) // before the check: a change after it is seen
	if err := r.auth.Authenticate(ctx, hello); err != nil {
		r.log.Warn("node registration refused", "node", req.GetNodeId(), "remote", sess.RemoteAddr(), "error", err)
		r.reject(sess, st, iopv1.RegisterRejection_REGISTER_REJECTION_UNAUTHENTICATED, "unauthenticated")
		return nil
	}
	r.hook("authenticated")
	c := &conn{r: r, sess: sess, ctl: st, nodeID: req.GetNodeId(), leaseKey: req.GetEncryptionPublicKey(), tokenHash: tokenHash}
	if hello.TLS != nil && len(hello.TLS.PeerCertificates) > 0 {
		c.certExpiry = hello.TLS.PeerCertificates[0].NotAfter
	}
	payload, rejection := r.admit(ctx, c)
	if rejection != 0 {
		r.reject(sess, st, rejection, rejectionNote(rejection))
		return nil
	}
	r.hook("registered")
	if left := time.Until(c.certExpiry); !c.certExpiry.IsZero() && left < CertificateWarning {
		r.log.Warn("node certificate expires soon; renew it (the Node presents a renewed one at its next connection)",
			"node", c.nodeID, "expires", c.certExpiry.UTC().Format(time.RFC3339), "left", left.Round(time.Minute))
	}
	resp := &iopv1.RegisterResponse{Accepted: true, Generation: c.gen, Config: payload}
	if err := st.WriteMessage(nodewire.Msg(resp)); err != nil {
		r.drop(c, "register write failed")
		return nil
	}
	env, err = st.ReadMessage(ctx)
	ready := env.GetNodeReadyRequest()
	if err != nil || ready == nil || ready.GetGeneration() != c.gen {
		r.drop(c, "no ready in time")
		sess.CloseWithReason(wire.ReasonRejected, "expected a ready request for this generation")
		return nil
	}
	// The ready response is the first thing the Node reads after its
	// ready request. markReady makes c a connection that config pushes
	// reach (a reload's, or the one due when the configuration changed
	// while the Node registered), so the control stream's writes stay
	// held until the response is out: a push written before it reaches a
	// Node still waiting for the response, which drops the connection.
	c.ctlMu.Lock()
	err = r.markReady(c, ready)
	var werr error
	if err == nil {
		r.hook("ready")
		werr = c.ctl.WriteMessage(nodewire.Msg(&iopv1.NodeReadyResponse{Accepted: true}))
	}
	c.ctlMu.Unlock()
	switch {
	case errors.Is(err, errRevisionAhead):
		r.drop(c, "ready names an unsent revision")
		sess.CloseWithReason(wire.ReasonProtocolError, "ready: "+err.Error())
		return nil
	case err != nil:
		sess.CloseWithReason(wire.ReasonSuperseded, "fenced before ready")
		return nil
	case werr != nil:
		r.drop(c, closeReason(sess.Err()))
		return nil
	}
	return c
}

// liveRejection is the refusal of a registration while old, the node id's
// connection, still answers: DRAINING when its Node is shutting down (the
// newcomer, most likely its replacement, may retry soon: the connection
// ends with the work it finishes), DUPLICATE otherwise. r.mu is held.
func liveRejection(old *conn) iopv1.RegisterRejection {
	if old.goneAway() {
		return iopv1.RegisterRejection_REGISTER_REJECTION_DRAINING
	}
	return iopv1.RegisterRejection_REGISTER_REJECTION_DUPLICATE
}

func rejectionNote(r iopv1.RegisterRejection) string {
	switch r {
	case iopv1.RegisterRejection_REGISTER_REJECTION_DUPLICATE:
		return "node id has a live connection"
	case iopv1.RegisterRejection_REGISTER_REJECTION_DRAINING:
		return "node id's live connection is draining; retry soon"
	case iopv1.RegisterRejection_REGISTER_REJECTION_UNAVAILABLE:
		return "edge unavailable"
	}
	return "refused"
}

// admit decides a registration for c's node id, probing an existing
// connection first: one that still answers keeps its place and the
// newcomer is rejected (as DRAINING when that connection's Node is
// shutting down, so that its replacement retries soon); one that is
// silent is fenced at once, so a rebooted Node is back without waiting
// out the heartbeat.
func (r *Registry) admit(ctx context.Context, c *conn) (*iopv1.NodeConfig, iopv1.RegisterRejection) {
	for {
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			return nil, iopv1.RegisterRejection_REGISTER_REJECTION_UNAVAILABLE
		}
		ns := r.nodes[c.nodeID]
		if ns == nil || ns.rec.TokenHash != c.tokenHash {
			// Removed, or its token changed, since it was authenticated.
			r.mu.Unlock()
			return nil, iopv1.RegisterRejection_REGISTER_REJECTION_UNAUTHENTICATED
		}
		old := ns.cur
		if old == nil {
			gen, ok := r.nextGenLocked()
			if !ok {
				r.mu.Unlock()
				return nil, iopv1.RegisterRejection_REGISTER_REJECTION_UNAVAILABLE
			}
			c.gen = gen
			ns.cur = c
			payload := ns.payload
			c.sentLocked(payload)
			r.mu.Unlock()
			return payload, 0
		}
		if ns.probing {
			why := liveRejection(old)
			r.mu.Unlock()
			return nil, why
		}
		ns.probing = true
		r.mu.Unlock()

		r.hook("probing")
		pctx, cancel := context.WithTimeout(ctx, r.probe)
		_, perr := old.sess.Ping(pctx)
		cancel()

		r.mu.Lock()
		ns.probing = false
		if ns.cur != old {
			r.mu.Unlock()
			continue // it ended meanwhile; try again
		}
		if perr == nil {
			why := liveRejection(old)
			r.mu.Unlock()
			if why == iopv1.RegisterRejection_REGISTER_REJECTION_DRAINING {
				r.log.Info("registration deferred: the node's live connection is draining", "node", c.nodeID, "generation", old.gen)
			} else {
				r.log.Warn("duplicate registration rejected; the live connection answered", "node", c.nodeID, "generation", old.gen)
			}
			return nil, why
		}
		if ctx.Err() != nil {
			r.mu.Unlock()
			return nil, iopv1.RegisterRejection_REGISTER_REJECTION_UNAVAILABLE
		}
		r.fenceLocked(ns, old, "superseded")
		r.mu.Unlock()
		r.log.Info("silent connection fenced by a new registration", "node", c.nodeID, "generation", old.gen)
		r.goOwned(func() {
			old.sess.CloseWithReason(wire.ReasonSuperseded, "no answer to probe; replaced by a new registration")
		})
	}
}

// reject answers a registration with a refusal, gives the Node a moment to
// read it and hang up, then closes the session.
func (r *Registry) reject(sess *wire.Session, st *wire.Stream, why iopv1.RegisterRejection, note string) {
	st.WriteMessage(nodewire.Msg(&iopv1.RegisterResponse{Rejection: why, Message: note}))
	st.CloseWrite()
	t := time.NewTimer(2 * time.Second)
	select {
	case <-sess.Done():
	case <-t.C:
	case <-r.ctx.Done():
	}
	t.Stop()
	sess.CloseWithReason(wire.ReasonRejected, note)
}

// errRevisionAhead: a Node's ready or acknowledgement names a configuration
// revision the Edge never sent it. Revisions only increase and every one a
// Node receives is its node's latest at the time, so a Node cannot have
// applied more than the latest; counting it as applied would let the Edge
// admit by a configuration the Node does not hold.
var errRevisionAhead = errors.New("configuration revision beyond the latest the edge sent")

// errFenced: c is no longer the node's connection.
var errFenced = errors.New("fenced")

// markReady makes c dispatch-ready if it is still the node's connection
// and names no revision beyond its node's latest.
func (r *Registry) markReady(c *conn, req *iopv1.NodeReadyRequest) error {
	r.mu.Lock()
	ns := r.nodes[c.nodeID]
	if ns == nil || ns.cur != c {
		r.mu.Unlock()
		return errFenced
	}
	if req.GetRevision() > ns.payload.GetRevision() {
		r.mu.Unlock()
		return errRevisionAhead
	}
	c.ready = true
	c.readyAt = time.Now()
	c.revision = req.GetRevision()
	c.appliedLocked(c.revision)
	c.inflight = make(map[string]int)
	c.setProviders(ns, req.GetProviders(), req.GetRefused())
	c.workspaces = configuredRefs(ns, req.GetWorkspaces())
	r.hub.publish(Event{Kind: EventReady, NodeID: c.nodeID, Generation: c.gen, Revision: c.revision})
	var stale *iopv1.NodeConfig
	if ns.payload != nil && ns.payload.GetRevision() > c.revision {
		stale = ns.payload // the config changed while the Node was registering
		c.sentLocked(stale)
	}
	r.mu.Unlock()
	r.log.Info("node ready", "node", c.nodeID, "generation", c.gen, "revision", c.revision)
	if stale != nil {
		r.goOwned(func() { c.push(stale) })
	}
	return nil
}

// configuredRefs keeps the accepted refs that are configured for the
// node: a Node cannot add workspaces.
func configuredRefs(ns *nodeState, accepted []string) []string {
	var out []string
	for _, ref := range accepted {
		if slices.ContainsFunc(ns.rec.Workspaces, func(g *iopv1.WorkspaceGrant) bool { return g.GetRef() == ref }) && !slices.Contains(out, ref) {
			out = append(out, ref)
		}
	}
	return out
}

// setProviders records the Node's report for the providers in the payload;
// a report for anything else is ignored (a Node cannot add providers).
// Called with the registry lock held; it returns the providers whose
// status or health changed.
func (c *conn) setProviders(ns *nodeState, snaps []*iopv1.ProviderSnapshot, refused []*iopv1.ProviderRefusal) []string {
	configured := make(map[string]bool, len(ns.rec.Providers))
	for _, p := range ns.rec.Providers {
		configured[p.ID] = true
	}
	next := make(map[string]providerReport, len(snaps))
	for _, s := range snaps {
		if configured[s.GetProviderId()] {
			next[s.GetProviderId()] = providerReport{status: statusFrom(s.GetStatus()), health: healthFrom(s.GetHealth()),
				applied: Applied{Capacity: int(s.GetCapacity()), Models: s.GetModels()}}
		}
	}
	ref := make(map[string]iopv1.RefusalReason, len(refused))
	for _, f := range refused {
		if configured[f.GetProviderId()] {
			reason := f.GetReason()
			if reason == iopv1.RefusalReason_REFUSAL_REASON_UNSPECIFIED {
				reason = iopv1.RefusalReason_REFUSAL_REASON_INVALID
			}
			ref[f.GetProviderId()] = reason
			delete(next, f.GetProviderId())
		}
	}
	var changed []string
	for id := range configured {
		// A new applied capacity or model list alone is no change of
		// health; the acknowledgement that brings it is an event of its
		// own.
		was, now := c.providers[id], next[id]
		if was.status != now.status || was.health != now.health || c.refused[id] != ref[id] {
			changed = append(changed, id)
		}
	}
	c.providers, c.refused = next, ref
	return changed
}

func statusFrom(s iopv1.ProviderStatus) ProviderStatus {
	switch s {
	case iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE:
		return StatusAvailable
	case iopv1.ProviderStatus_PROVIDER_STATUS_DRAINING:
		return StatusDraining
	case iopv1.ProviderStatus_PROVIDER_STATUS_DISABLED:
		return StatusDisabled
	}
	return StatusUnavailable
}

func healthFrom(h iopv1.ProviderHealth) ProviderHealth {
	switch h {
	case iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY:
		return HealthHealthy
	case iopv1.ProviderHealth_PROVIDER_HEALTH_REFUSED:
		return HealthRefused
	case iopv1.ProviderHealth_PROVIDER_HEALTH_OFFLINE:
		return HealthOffline
	}
	return HealthUnhealthy
}

// drop fences c if it is still current.
func (r *Registry) drop(c *conn, reason string) {
	r.mu.Lock()
	if ns := r.nodes[c.nodeID]; ns != nil {
		r.fenceLocked(ns, c, reason)
	}
	r.mu.Unlock()
}

func closeReason(err error) string {
	var ce *wire.CloseError
	if errors.As(err, &ce) {
		return ce.Reason.String()
	}
	if err == nil {
		return "closed"
	}
	return "transport_error"
}

func (c *conn) write(m *iopv1.Envelope) error {
	c.ctlMu.Lock()
	defer c.ctlMu.Unlock()
	return c.ctl.WriteMessage(m)
}

// push sends a config update on the control stream.
func (c *conn) push(cfg *iopv1.NodeConfig) {
	if err := c.write(nodewire.Msg(&iopv1.ConfigUpdate{Config: cfg})); err != nil {
		c.r.log.Debug("config push failed", "node", c.nodeID, "generation", c.gen, "error", err)
	}
}

// serve reads the control stream until the session ends, then fences the
// connection with the session's close reason.
func (c *conn) serve() {
	r := c.r
	var watch sync.WaitGroup
	defer watch.Wait()
	watch.Go(func() {
		select {
		case <-c.sess.RemoteGoAway():
			r.goingAway(c)
		case <-c.sess.Done():
		}
	})
	for violation := ""; violation == ""; {
		env, err := c.ctl.ReadMessage(context.Background())
		if err != nil {
			break
		}
		switch b := env.Body.(type) {
		case *iopv1.Envelope_ConfigUpdateAck:
			if err := r.applyReport(c, b.ConfigUpdateAck, nil); err != nil {
				violation = "acknowledgement: " + err.Error()
			}
		case *iopv1.Envelope_ProviderSnapshotUpdate:
			if b.ProviderSnapshotUpdate.GetGeneration() == c.gen {
				r.applyReport(c, nil, b.ProviderSnapshotUpdate.GetProviders())
			}
		default:
			violation = "unexpected message on the control stream"
		}
		if violation != "" {
			c.sess.CloseWithReason(wire.ReasonProtocolError, violation)
		}
	}
	if c.sess.Err() == nil {
		// The Node ended its control stream but not the session.
		c.sess.CloseWithReason(wire.ReasonProtocolError, "control stream ended")
	}
	<-c.sess.Done()
	r.drop(c, closeReason(c.sess.Err()))
}

// goneAway reports whether c's Node sent GOAWAY: from the moment the
// session has it, not only once goingAway has run, so that a request sent
// back to admission is not offered the same Node again. r.mu is held.
func (c *conn) goneAway() bool {
	if c.goingAway {
		return true
	}
	select {
	case <-c.sess.RemoteGoAway():
		return true
	default:
		return false
	}
}

// goingAway takes c out of admission after its Node's GOAWAY: the Node is
// shutting down and accepts no new stream, but finishes what it has. The
// change is published, so requests queued for it are re-evaluated at once
// against the remaining candidates.
func (r *Registry) goingAway(c *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[c.nodeID]
	if ns == nil || ns.cur != c || c.goingAway {
		return
	}
	before := ns.snapshot()
	c.goingAway = true
	r.log.Info("node shutting down: no new work for it", "node", c.nodeID, "generation", c.gen)
	r.publishChangesLocked(ns, before)
}

// applyReport applies a config ack (a full provider report and the
// workspaces accepted) or, with ack nil, a snapshot update (changed
// providers only) and publishes the changes. An ack of a revision beyond
// the node's latest is refused with errRevisionAhead, and nothing of it is
// applied.
func (r *Registry) applyReport(c *conn, ack *iopv1.ConfigUpdateAck, snaps []*iopv1.ProviderSnapshot) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[c.nodeID]
	if ns == nil || ns.cur != c || !c.ready {
		return nil
	}
	full := ack != nil
	revision, refused := ack.GetRevision(), ack.GetRefused()
	if full {
		snaps = ack.GetProviders()
	}
	if full && revision > ns.payload.GetRevision() {
		return errRevisionAhead
	}
	if !full {
		// Merge: keep refusals and providers not mentioned.
		merged := make([]*iopv1.ProviderSnapshot, 0, len(c.providers))
		mentioned := map[string]bool{}
		for _, s := range snaps {
			if _, hosted := c.providers[s.GetProviderId()]; hosted {
				merged = append(merged, s)
				mentioned[s.GetProviderId()] = true
			}
		}
		for id, rep := range c.providers {
			if !mentioned[id] {
				merged = append(merged, &iopv1.ProviderSnapshot{ProviderId: id, Status: statusTo(rep.status), Health: healthTo(rep.health),
					Capacity: uint32(rep.applied.Capacity), Models: rep.applied.Models})
			}
		}
		for id, reason := range c.refused {
			refused = append(refused, &iopv1.ProviderRefusal{ProviderId: id, Reason: reason})
		}
		snaps = merged
	}
	changed := c.setProviders(ns, snaps, refused)
	if full {
		// With the revision, in one step: whoever sees the revision
		// applied sees what the Node accepted under it.
		c.workspaces = configuredRefs(ns, ack.GetWorkspaces())
	}
	if full && revision > c.revision {
		c.revision = revision
		c.appliedLocked(revision)
		r.hub.publish(Event{Kind: EventConfigApplied, NodeID: c.nodeID, Generation: c.gen, Revision: revision})
	}
	snap := ns.snapshot()
	for _, p := range snap.Providers {
		for _, id := range changed {
			if p.ID == id {
				p := p.clone()
				r.hub.publish(Event{Kind: EventProviderHealth, NodeID: c.nodeID, Generation: c.gen, Provider: &p})
			}
		}
	}
	return nil
}

func statusTo(s ProviderStatus) iopv1.ProviderStatus {
	switch s {
	case StatusAvailable:
		return iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE
	case StatusDraining:
		return iopv1.ProviderStatus_PROVIDER_STATUS_DRAINING
	case StatusDisabled:
		return iopv1.ProviderStatus_PROVIDER_STATUS_DISABLED
	}
	return iopv1.ProviderStatus_PROVIDER_STATUS_UNAVAILABLE
}

func healthTo(h ProviderHealth) iopv1.ProviderHealth {
	switch h {
	case HealthHealthy:
		return iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY
	case HealthRefused:
		return iopv1.ProviderHealth_PROVIDER_HEALTH_REFUSED
	case HealthOffline:
		return iopv1.ProviderHealth_PROVIDER_HEALTH_OFFLINE
	}
	return iopv1.ProviderHealth_PROVIDER_HEALTH_UNHEALTHY
}
