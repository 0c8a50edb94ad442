package node

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// run executes one RunRequest on its stream: Started, the provider's events,
// then exactly one terminal. The run's context ends on CancelRun for this
// run id, a reset of the stream, the hard deadline, or the end of the
// connection; never on output silence.
func (s *session) run(st *wire.Stream, m *iopv1.RunRequest) {
	req := nodewire.RunRequestFrom(m)
	out := &eventWriter{st: st, runID: req.RunID}
	fail := func(f *execution.Failure) {
		out.terminal(execution.Event{Kind: execution.EventFailed, Failure: f})
		st.CloseWrite()
	}
	if err := req.Validate(); err != nil {
		fail(execution.Failf(execution.FailureInvalidRequest, "malformed run request"))
		return
	}
	if m.GetGeneration() != s.gen {
		// The Edge fences by generation too; this is the Node's own check.
		fail(execution.Failf(execution.FailureTransport, "run for generation %d on connection %d", m.GetGeneration(), s.gen))
		return
	}
	h, f := s.admitRun(req)
	if f != nil {
		fail(f)
		return
	}
	ctx, cancel := req.Context(s.ctx)
	defer cancel()
	if !s.trackRun(req.RunID, cancel) {
		s.releaseRun(req, false)
		fail(execution.Failf(execution.FailureInvalidRequest, "run id already active"))
		return
	}
	// The credential lease opens now, after admission and right before
	// the provider call; the provider never sees the grant.
	grant := req.Grant
	req.Grant = nil
	ctx, clearSecret, err := s.openGrant(ctx, h, grant, req.RunID, req.Target)
	if err != nil {
		s.releaseRun(req, true)
		fail(execution.Failf(execution.FailureInvalidRequest, "%v", errLeaseRefused))
		return
	}
	defer clearSecret()

	// A reset by the Edge or the connection's end cancels the run; so does
	// a CancelRun for this run id on its stream.
	defer st.OnAbort(cancel)()
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			env, err := st.ReadMessage(ctx)
			if err != nil {
				return
			}
			if c := env.GetCancelRun(); c != nil && c.GetRunId() == req.RunID {
				cancel()
				return
			}
		}
	})

	out.write(execution.Event{Kind: execution.EventStarted, Model: req.Target})
	var res execution.Result
	err = s.rt.contain("run", req.ProviderID, func() (err error) {
		res, err = h.p.Run(ctx, req, out)
		return err
	})
	s.releaseRun(req, true)
	if err == nil && out.err == nil {
		out.terminal(execution.Event{Kind: execution.EventCompleted, StopReason: stopReason(res.StopReason)})
	} else {
		if err == nil {
			err = out.err
		}
		f := execution.Classify(ctx, err)
		if f.Class == execution.FailureUnavailable {
			s.suspect(req.ProviderID)
		}
		out.terminal(execution.Event{Kind: execution.EventFailed, Failure: f})
	}
	st.CloseWrite()
	cancel()
	watch.Wait()
}

func stopReason(r string) string {
	if r == "" {
		return "stop"
	}
	return r
}

// admitRun checks the run against the current hosting plan and counts it.
func (s *session) admitRun(req *execution.RunRequest) (*hosted, *execution.Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.plan.providers[req.ProviderID]
	switch {
	case h == nil:
		return nil, execution.Failf(execution.FailureUnavailable, "provider %q not hosted", req.ProviderID)
	case req.Adapter != "" && req.Adapter != h.info.Adapter:
		return nil, execution.Failf(execution.FailureInvalidRequest, "adapter mismatch")
	case !h.allows(req.Target):
		return nil, execution.Failf(execution.FailureInvalidRequest, "model not offered by provider %q", req.ProviderID)
	case !s.health[req.ProviderID]:
		return nil, execution.Failf(execution.FailureUnavailable, "provider %q unhealthy", req.ProviderID)
	case s.inflight[req.ProviderID] >= h.cap:
		return nil, execution.Failf(execution.FailureUnavailable, "provider %q at capacity", req.ProviderID)
	}
	s.inflight[req.ProviderID]++
	return h, nil
}

func (s *session) trackRun(id string, cancel context.CancelFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.runs[id]; dup {
		return false
	}
	s.runs[id] = cancel
	return true
}

func (s *session) releaseRun(req *execution.RunRequest, tracked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.inflight[req.ProviderID]; n > 0 {
		s.inflight[req.ProviderID] = n - 1
	}
	if tracked {
		delete(s.runs, req.RunID)
	}
}

// eventWriter sends a run's events on its stream. Providers may not emit
// Started or a terminal: the runtime owns those.
type eventWriter struct {
	st    *wire.Stream
	runID string
	mu    sync.Mutex
	err   error
	done  bool
}

var errHostEvent = errors.New("node: providers must not emit started or terminal events")

// WriteEvent implements execution.EventWriter.
func (w *eventWriter) WriteEvent(e execution.Event) error {
	if e.Kind == execution.EventStarted || e.Kind.Terminal() {
		w.mu.Lock()
		if w.err == nil {
			w.err = execution.Failf(execution.FailureInternal, "provider emitted a %s event", e.Kind)
		}
		w.mu.Unlock()
		return errHostEvent
	}
	return w.write(e)
}

func (w *eventWriter) write(e execution.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return errHostEvent
	}
	if err := w.st.WriteMessage(nodewire.Msg(nodewire.Event(w.runID, e))); err != nil {
		if w.err == nil {
			w.err = execution.Failf(execution.FailureTransport, "run stream closed")
		}
		return err
	}
	return nil
}

// terminal writes the run's one terminal event.
func (w *eventWriter) terminal(e execution.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	w.st.WriteMessage(nodewire.Msg(nodewire.Event(w.runID, e)))
}

// command answers one closed node command.
func (s *session) command(st *wire.Stream, m *iopv1.NodeCommandRequest) {
	res := &iopv1.NodeCommandResult{Command: m.GetCommand(), Ok: true}
	switch m.GetCommand() {
	case iopv1.NodeCommand_NODE_COMMAND_CAPABILITIES:
		s.mu.Lock()
		plan := s.plan
		snaps := s.snapshotsLocked(plan, nil)
		s.mu.Unlock()
		res.Result = &iopv1.NodeCommandResult_Capabilities{Capabilities: &iopv1.Capabilities{
			NodeId: s.rt.cfg.NodeID, Version: s.rt.version(), Os: hostOS, Arch: hostArch,
			Generation: s.gen, ConfigRevision: plan.revision, Providers: snaps,
			Commands: s.commands(plan),
		}}
	case iopv1.NodeCommand_NODE_COMMAND_TRANSPORT_STATUS:
		stats := s.sess.Stats()
		s.mu.Lock()
		active := len(s.runs)
		s.mu.Unlock()
		_, isTLS := s.sess.ConnectionState()
		res.Result = &iopv1.NodeCommandResult_TransportStatus{TransportStatus: &iopv1.TransportStatus{
			Generation: s.gen, ConnectedUnixMs: s.since.UnixMilli(),
			OpenStreams: uint32(stats.StreamsOpen), BytesSent: stats.BytesSent, BytesReceived: stats.BytesReceived,
			HeartbeatsSent: stats.HeartbeatsSent, HeartbeatsAcked: stats.HeartbeatsAcked,
			ActiveRuns: uint32(active), Tls: isTLS,
		}}
	case iopv1.NodeCommand_NODE_COMMAND_OLLAMA_API:
		b, note := s.providerCommand(m.GetProviderId(), "ollama", m.GetArgument())
		if note != "" {
			res.Ok, res.Error = false, note
		} else {
			res.Result = &iopv1.NodeCommandResult_ProviderResponse{ProviderResponse: b}
		}
	default:
		res.Ok = false
		res.Error = "unsupported command"
	}
	st.WriteMessage(nodewire.Msg(res))
	st.CloseWrite()
	// Wait (briefly) for the Edge to finish its side so the stream ends
	// cleanly rather than by reset.
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	st.ReadMessage(s.ctx)
}

// maxProviderAnswer bounds a provider command's answer on the wire.
const maxProviderAnswer = 1 << 20

// commands lists the node commands this Node answers under plan.
func (s *session) commands(plan *hostingPlan) []iopv1.NodeCommand {
	out := []iopv1.NodeCommand{iopv1.NodeCommand_NODE_COMMAND_CAPABILITIES, iopv1.NodeCommand_NODE_COMMAND_TRANSPORT_STATUS}
	for _, id := range plan.order {
		if h := plan.providers[id]; h.info.Adapter == "ollama" {
			if _, ok := h.p.(execution.Commander); ok {
				return append(out, iopv1.NodeCommand_NODE_COMMAND_OLLAMA_API)
			}
		}
	}
	return out
}

// providerCommand runs a closed, read-only provider command. The argument
// is "name" or "name:selector" and must name a command the provider lists.
func (s *session) providerCommand(id, adapter, argument string) ([]byte, string) {
	s.mu.Lock()
	h := s.plan.providers[id]
	s.mu.Unlock()
	if h == nil || h.info.Adapter != adapter {
		return nil, "provider not hosted"
	}
	cmd, ok := h.p.(execution.Commander)
	if !ok {
		return nil, "provider has no commands"
	}
	name, sel, _ := strings.Cut(argument, ":")
	if !slices.Contains(cmd.Commands(), name) {
		return nil, "unsupported command"
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	var b []byte
	err := s.rt.contain("command", id, func() (err error) {
		b, err = cmd.Command(ctx, name, sel)
		return err
	})
	if err != nil {
		return nil, failureNote(err)
	}
	if len(b) > maxProviderAnswer {
		return nil, "answer too large"
	}
	return b, ""
}
