package node

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
	"github.com/iop-dev/iop/workspace"
)

// session is one connection's life: everything it owns ends with it.
type session struct {
	rt    *Runtime
	sess  *wire.Session
	ctl   *wire.Stream
	ctlMu sync.Mutex
	gen   uint64
	ctx   context.Context // ends when the connection ends
	wg    sync.WaitGroup
	since time.Time

	mu     sync.Mutex
	plan   *hostingPlan
	health map[string]bool // provider id -> healthy
	// suspects are healthy providers a call just found unavailable, for
	// healthLoop to check at once; recheck wakes it for them.
	suspects map[string]bool
	recheck  chan struct{}
	inflight map[string]int
	runs     map[string]context.CancelFunc
	// workspaces are the open workspace sessions by request id; they end
	// with the connection.
	workspaces map[string]*workspace.Session
}

// connectOnce runs one connection from dial to close. It reports whether the
// connection reached ready.
func (rt *Runtime) connectOnce(ctx context.Context) (bool, error) {
	rt.setStatus(func(s *Status) { s.State = StateConnecting })
	dctx, cancel := context.WithTimeout(ctx, rt.registerTimeout())
	defer cancel()
	stopRegistering := context.AfterFunc(rt.stop, cancel) // Shutdown ends a registration at once
	defer stopRegistering()
	sess, err := wire.Dial(dctx, "tcp", rt.cfg.EdgeAddr, rt.tlsConfig(), rt.cfg.Wire)
	if err != nil {
		return false, err
	}
	defer sess.Close()
	rt.setStatus(func(s *Status) { s.State = StateRegistering })
	s, err := rt.register(dctx, sess)
	if err != nil {
		return false, err
	}
	cancel()
	if !rt.serving(s) {
		return true, ErrShutdown // Shutdown came during the handshake
	}
	defer rt.serving(nil)
	err = s.serve(ctx)
	return true, err
}

// drain ends the connection gracefully for Shutdown: GOAWAY, so the Edge
// opens no new stream, then the streams in flight run to their end (the
// control stream stays open for the connection's life) until ctx ends;
// then the connection closes, cancelling what is left.
func (s *session) drain(ctx context.Context) error {
	s.rt.setStatus(func(st *Status) { st.State = StateDraining })
	s.rt.log.Info("shutting down: no new work; waiting for the work in flight", "generation", s.gen, "streams", s.sess.Stats().StreamsOpen-1)
	s.sess.GoAway("node shutting down")
	err := s.sess.WaitStreams(ctx, 1)
	var ce *wire.CloseError
	switch {
	case errors.As(err, &ce):
		err = nil // the connection ended first: nothing is left to cancel
	case err != nil:
		s.rt.log.Warn("shutdown grace ended; cancelling the work in flight", "streams", s.sess.Stats().StreamsOpen-1)
	}
	s.sess.Close()
	return err
}

// register runs registration and the ready handshake.
func (rt *Runtime) register(ctx context.Context, sess *wire.Session) (*session, error) {
	ctl, err := sess.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	req := &iopv1.RegisterRequest{
		NodeId: rt.cfg.NodeID, Credential: []byte(rt.cfg.Token),
		Version: rt.version(), Os: hostOS, Arch: hostArch,
	}
	if rt.cfg.Leases != nil {
		req.EncryptionPublicKey = rt.cfg.Leases.PublicKey()
	}
	if err := ctl.WriteMessage(nodewire.Msg(req)); err != nil {
		return nil, err
	}
	env, err := ctl.ReadMessage(ctx)
	if err != nil {
		return nil, err
	}
	resp := env.GetRegisterResponse()
	if resp == nil {
		return nil, errors.New("node: edge answered the registration with something else")
	}
	if !resp.GetAccepted() {
		return nil, &RegistrationError{Rejection: resp.GetRejection(), Message: nodewire.Note(resp.GetMessage())}
	}
	s := &session{
		rt: rt, sess: sess, ctl: ctl, gen: resp.GetGeneration(), ctx: sess.Context(), since: time.Now(),
		health:     map[string]bool{},
		suspects:   map[string]bool{},
		recheck:    make(chan struct{}, 1),
		inflight:   map[string]int{},
		runs:       map[string]context.CancelFunc{},
		workspaces: map[string]*workspace.Session{},
	}
	s.plan = intersect(rt.allow, resp.GetConfig(), rt.cfg.Leases != nil)
	s.plan.workspaces = acceptWorkspaces(rt.cfg.Workspaces, resp.GetConfig().GetWorkspaces())
	rt.applyLeasePolicy(resp.GetConfig())
	s.checkHealth(ctx, s.plan, nil)
	ready := &iopv1.NodeReadyRequest{Generation: s.gen, Revision: s.plan.revision, Providers: s.snapshots(s.plan, nil), Refused: s.plan.refused,
		Workspaces: acceptedRefs(s.plan.workspaces)}
	if err := ctl.WriteMessage(nodewire.Msg(ready)); err != nil {
		return nil, err
	}
	env, err = ctl.ReadMessage(ctx)
	if err != nil {
		return nil, err
	}
	if r := env.GetNodeReadyResponse(); r == nil || !r.GetAccepted() {
		return nil, errors.New("node: edge did not accept ready")
	}
	rt.setStatus(func(st *Status) {
		st.State = StateReady
		st.Generation = s.gen
		st.Revision = s.plan.revision
		st.Hosted = slices.Clone(s.plan.order)
		st.Refused = refusedIDs(s.plan)
		st.Connects++
		st.LastError = nil
	})
	rt.log.Info("ready", "node", rt.cfg.NodeID, "generation", s.gen, "revision", s.plan.revision, "hosted", len(s.plan.order), "refused", len(s.plan.refused))
	return s, nil
}

func refusedIDs(p *hostingPlan) []string {
	var out []string
	for _, r := range p.refused {
		out = append(out, r.GetProviderId())
	}
	return out
}

// serve handles the connection until it ends or ctx does, then cancels
// every run it owns and waits for them.
func (s *session) serve(ctx context.Context) error {
	s.wg.Go(s.controlLoop)
	s.wg.Go(s.acceptLoop) // streams opened before Handle took over
	s.wg.Go(s.healthLoop)
	s.sess.Handle(s.handle)
	select {
	case <-s.sess.Done():
	case <-ctx.Done():
		s.sess.Close()
	}
	s.sess.Close()
	s.wg.Wait()
	// Handlers are done (their calls were cancelled with the streams):
	// the connection's workspace sessions end now.
	s.cleanupWorkspaces()
	return s.sess.Err()
}

func (s *session) acceptLoop() {
	for {
		st, err := s.sess.AcceptStream(s.ctx)
		if err != nil {
			return
		}
		s.wg.Go(func() { s.handle(st) })
	}
}

func (s *session) handle(st *wire.Stream) {
	env, err := st.ReadMessage(s.ctx)
	if err != nil {
		st.Reset(wire.ResetCancel)
		return
	}
	switch b := env.Body.(type) {
	case *iopv1.Envelope_RunRequest:
		s.run(st, b.RunRequest)
	case *iopv1.Envelope_NodeCommandRequest:
		s.command(st, b.NodeCommandRequest)
	case *iopv1.Envelope_ProviderTunnelRequest:
		s.tunnel(st, b.ProviderTunnelRequest)
	case *iopv1.Envelope_WorkspaceRequest:
		s.workspace(st, b.WorkspaceRequest)
	default:
		st.Reset(wire.ResetUnsupported)
	}
}

// controlLoop applies config updates pushed on the control stream.
func (s *session) controlLoop() {
	for {
		env, err := s.ctl.ReadMessage(s.ctx)
		if err != nil {
			return
		}
		up := env.GetConfigUpdate()
		if up == nil {
			s.sess.CloseWithReason(wire.ReasonProtocolError, "unexpected message on the control stream")
			return
		}
		s.mu.Lock()
		stale := up.GetConfig().GetRevision() <= s.plan.revision
		s.mu.Unlock()
		if stale {
			continue
		}
		plan := intersect(s.rt.allow, up.GetConfig(), s.rt.cfg.Leases != nil)
		plan.workspaces = acceptWorkspaces(s.rt.cfg.Workspaces, up.GetConfig().GetWorkspaces())
		s.rt.applyLeasePolicy(up.GetConfig())
		s.checkHealth(s.ctx, plan, nil)
		s.mu.Lock()
		s.plan = plan
		snaps := s.snapshotsLocked(plan, nil)
		s.mu.Unlock()
		s.rt.setStatus(func(st *Status) {
			st.Revision = plan.revision
			st.Hosted = slices.Clone(plan.order)
			st.Refused = refusedIDs(plan)
		})
		s.rt.log.Info("config applied", "revision", plan.revision, "hosted", len(plan.order), "refused", len(plan.refused))
		s.writeCtl(&iopv1.ConfigUpdateAck{Revision: plan.revision, Providers: snaps, Refused: plan.refused, Workspaces: acceptedRefs(plan.workspaces)})
	}
}

func (s *session) writeCtl(body any) {
	s.ctlMu.Lock()
	defer s.ctlMu.Unlock()
	s.ctl.WriteMessage(nodewire.Msg(body))
}

// checker returns h's health check, or nil when it has none to run: a
// leased provider has no credential between calls to probe with, so it is
// healthy until a call says otherwise.
func (h *hosted) checker() execution.HealthChecker {
	hc, ok := h.p.(execution.HealthChecker)
	if !ok || h.credID != "" {
		return nil
	}
	return hc
}

// checkHealth checks the providers of plan that can report their health
// (those in only; every one when only is nil), concurrently, and records
// the results. It returns the providers whose health changed.
func (s *session) checkHealth(ctx context.Context, plan *hostingPlan, only map[string]bool) map[string]bool {
	results := make(map[string]bool, len(plan.order))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range plan.order {
		if only != nil && !only[id] {
			continue
		}
		h := plan.providers[id]
		hc := h.checker()
		if hc == nil {
			results[id] = true
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, min(s.rt.healthInterval(), 5*time.Second))
			err := s.rt.contain("health check", id, func() error { return hc.CheckHealth(cctx) })
			cancel()
			mu.Lock()
			results[id] = err == nil
			mu.Unlock()
		})
	}
	wg.Wait()
	s.mu.Lock()
	changed := map[string]bool{}
	for id, ok := range results {
		if prev, seen := s.health[id]; !seen || prev != ok {
			changed[id] = true
		}
		s.health[id] = ok
	}
	s.mu.Unlock()
	return changed
}

// minRecheck spaces the checks that failed calls ask for (suspect): a
// burst of failures costs a provider one probe a second at most.
const minRecheck = time.Second

// healthLoop re-checks provider health and reports changes to the Edge:
// every provider each HealthInterval, the unhealthy ones each
// UnhealthyInterval (so that a recovered provider is back soon), and a
// provider a call found unavailable at once, at most one such check each
// minRecheck.
func (s *session) healthLoop() {
	every := time.NewTicker(s.rt.healthInterval())
	defer every.Stop()
	again := time.NewTicker(s.rt.unhealthyInterval())
	defer again.Stop()
	held := time.NewTimer(minRecheck)
	held.Stop()
	defer held.Stop()
	recheck := s.recheck // nil while the checks calls ask for are held back
	for {
		var only map[string]bool // nil: every provider
		asked := false
		select {
		case <-s.ctx.Done():
			return
		case <-every.C:
		case <-again.C:
			only = s.unhealthy()
		case <-recheck:
			only, asked = s.takeSuspects(), true
		case <-held.C:
			recheck = s.recheck // a request that came meanwhile is still there
			continue
		}
		if only != nil && len(only) == 0 {
			continue
		}
		if asked {
			recheck = nil
			held.Reset(minRecheck)
		}
		s.mu.Lock()
		plan := s.plan
		s.mu.Unlock()
		if changed := s.checkHealth(s.ctx, plan, only); len(changed) > 0 {
			s.mu.Lock()
			snaps := s.snapshotsLocked(plan, changed)
			s.mu.Unlock()
			s.rt.log.Info("provider health changed", "providers", len(changed), "after_failed_call", asked)
			s.writeCtl(&iopv1.ProviderSnapshotUpdate{Generation: s.gen, Providers: snaps})
		}
	}
}

// suspect has provider id checked at once (by healthLoop): a call to it
// failed as unavailable. The check decides, not the failure: a provider
// that answers it stays healthy. One already unhealthy is checked on its
// own schedule.
func (s *session) suspect(id string) {
	s.mu.Lock()
	h := s.plan.providers[id]
	if h == nil || h.checker() == nil || !s.health[id] || s.suspects[id] {
		s.mu.Unlock()
		return
	}
	s.suspects[id] = true
	s.mu.Unlock()
	select {
	case s.recheck <- struct{}{}:
	default: // a check is due already; it takes this one too
	}
}

func (s *session) takeSuspects() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.suspects
	s.suspects = map[string]bool{}
	return out
}

// unhealthy returns the hosted providers last found unhealthy.
func (s *session) unhealthy() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]bool{}
	for _, id := range s.plan.order {
		if ok, seen := s.health[id]; seen && !ok {
			out[id] = true
		}
	}
	return out
}

func (s *session) snapshots(plan *hostingPlan, only map[string]bool) []*iopv1.ProviderSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotsLocked(plan, only)
}

func (s *session) snapshotsLocked(plan *hostingPlan, only map[string]bool) []*iopv1.ProviderSnapshot {
	var out []*iopv1.ProviderSnapshot
	for _, id := range plan.order {
		if only != nil && !only[id] {
			continue
		}
		h := plan.providers[id]
		snap := &iopv1.ProviderSnapshot{
			ProviderId: id,
			Adapter:    h.info.Adapter,
			Category:   nodewire.Category(h.info.Category),
			Status:     iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE,
			Health:     iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY,
			Capacity:   uint32(h.cap),
			InFlight:   uint32(s.inflight[id]),
			Models:     slices.Clone(h.models),
		}
		if !s.health[id] {
			snap.Status = iopv1.ProviderStatus_PROVIDER_STATUS_UNAVAILABLE
			snap.Health = iopv1.ProviderHealth_PROVIDER_HEALTH_UNHEALTHY
		}
		out = append(out, snap)
	}
	return out
}
