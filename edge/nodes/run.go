package nodes

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// Run is one run dispatched to a Node on an exact generation. Its events
// arrive in order through Next and end with exactly one terminal event
// (EventCompleted or EventFailed). If the generation is fenced first, the
// terminal is a FailureTransport, and nothing from that connection can
// complete the run afterwards.
type Run struct {
	ID         string
	NodeID     string
	Generation uint64
	ProviderID string
	// Revision is the config revision the run was admitted under.
	Revision uint64

	c  *conn
	st *wire.Stream

	// closed is set by Close before it resets the stream, so that a Next
	// the reset interrupts ends the run as cancelled, as Close says, not
	// as a broken transport.
	closed atomic.Bool

	mu      sync.Mutex
	ended   bool
	started bool
	// first is the event Started read, which Next returns next.
	first    execution.Event
	hasFirst bool
}

// StartRun dispatches req to the node's connection of generation gen. It
// fails with ErrNotReady, ErrStaleGeneration or ErrProviderUnavailable
// without touching the Node.
func (r *Registry) StartRun(ctx context.Context, nodeID string, gen uint64, req *execution.RunRequest) (*Run, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	c, revision, err := r.claim(nodeID, gen, req.ProviderID, req.Adapter)
	if err != nil {
		return nil, err
	}
	run := &Run{ID: req.RunID, NodeID: nodeID, Generation: gen, ProviderID: req.ProviderID, Revision: revision, c: c}
	st, err := c.sess.OpenStream(ctx)
	if err != nil {
		run.release()
		return nil, dispatchErr("start run", err)
	}
	run.st = st
	if err := st.WriteMessage(nodewire.Msg(nodewire.RunRequest(req, gen, revision))); err != nil {
		st.Reset(wire.ResetCancel)
		run.release()
		return nil, dispatchErr("start run", err)
	}
	return run, nil
}

// claim checks the dispatch target and counts the run against the
// provider. It returns the connection and the applied config revision.
func (r *Registry) claim(nodeID string, gen uint64, providerID, adapter string) (*conn, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[nodeID]
	if ns == nil {
		return nil, 0, ErrUnknownNode
	}
	c := ns.cur
	if c == nil || !c.ready {
		if gen != 0 && (c == nil || c.gen != gen) {
			return nil, 0, ErrStaleGeneration
		}
		return nil, 0, ErrNotReady
	}
	if c.gen != gen {
		return nil, 0, ErrStaleGeneration
	}
	rep, hosted := c.providers[providerID]
	if !hosted || rep.status != StatusAvailable {
		return nil, 0, ErrProviderUnavailable
	}
	if adapter != "" {
		for _, p := range ns.rec.Providers {
			if p.ID == providerID && p.Adapter != adapter {
				return nil, 0, fmt.Errorf("%w: adapter %q does not match", ErrProviderUnavailable, adapter)
			}
		}
	}
	c.inflight[providerID]++
	return c, c.revision, nil
}

func (run *Run) release() {
	r := run.c.r
	r.mu.Lock()
	if n := run.c.inflight[run.ProviderID]; n > 0 {
		run.c.inflight[run.ProviderID] = n - 1
	}
	r.mu.Unlock()
}

// Next returns the run's next event. After the terminal event it returns
// io.EOF. If ctx ends first it returns ctx's error and the run goes on
// (call Cancel or Close to end it).
func (run *Run) Next(ctx context.Context) (execution.Event, error) {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.hasFirst {
		ev := run.first
		run.first, run.hasFirst = execution.Event{}, false
		return ev, nil
	}
	ev, _, err := run.nextLocked(ctx)
	return ev, err
}

// Started waits until the Node has taken the run: its first event came
// (EventStarted, or the run's failure), which Next returns next. It
// returns an error matching ErrNotStarted when the Node refused the
// run's stream before it ran (its GOAWAY crossed the stream): nothing
// reached the provider, so the work may go elsewhere, and the run has
// ended (Next returns its transport failure). If ctx ends first it
// returns ctx's error and the run goes on.
func (run *Run) Started(ctx context.Context) error {
	run.mu.Lock()
	defer run.mu.Unlock()
	if run.started || run.ended || run.hasFirst {
		return nil
	}
	ev, refused, err := run.nextLocked(ctx)
	if err != nil {
		return err
	}
	run.first, run.hasFirst = ev, true
	if refused != nil {
		return dispatchErr("start run", refused)
	}
	return nil
}

// nextLocked reads the run's next event. refused is the stream's error
// when the Node refused it unopened (the event is then the run's
// transport failure).
func (run *Run) nextLocked(ctx context.Context) (ev execution.Event, refused, err error) {
	if run.ended {
		return execution.Event{}, nil, io.EOF
	}
	env, err := run.st.ReadMessage(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return execution.Event{}, nil, err
		}
		if run.closed.Load() {
			return run.endLocked(errAbandoned()), nil, nil
		}
		if wire.IsRefused(err) {
			refused = err
		}
		return run.endLocked(transportFailure(err)), refused, nil
	}
	m := env.GetRunEvent()
	if m == nil || m.GetRunId() != run.ID {
		run.st.Reset(wire.ResetProtocolError)
		return run.endLocked(execution.Failf(execution.FailureInternal, "node sent a malformed run event")), nil, nil
	}
	ev, ok := nodewire.EventFrom(m)
	switch {
	case !ok,
		ev.Kind == execution.EventStarted && run.started,
		!run.started && ev.Kind != execution.EventStarted && !ev.Kind.Terminal():
		run.st.Reset(wire.ResetProtocolError)
		return run.endLocked(execution.Failf(execution.FailureInternal, "node sent an out-of-order run event")), nil, nil
	}
	if ev.Kind == execution.EventStarted {
		run.started = true
	}
	if ev.Kind.Terminal() {
		run.ended = true
		run.st.CloseWrite()
		run.release()
	}
	return ev, nil, nil
}

func transportFailure(err error) *execution.Failure {
	if errors.Is(err, io.EOF) {
		return execution.Failf(execution.FailureTransport, "node ended the run without a terminal")
	}
	if se := (*wire.StreamError)(nil); errors.As(err, &se) {
		if se.Remote {
			return execution.Failf(execution.FailureTransport, "node reset the run's stream: %s", se.Code)
		}
		return execution.Failf(execution.FailureTransport, "run's stream reset: %s", se.Code)
	}
	return execution.Failf(execution.FailureTransport, "node connection ended: %s", closeReason(err))
}

// endLocked records a terminal the Edge decided and returns it as the
// run's last event.
func (run *Run) endLocked(f *execution.Failure) execution.Event {
	run.ended = true
	run.release()
	return execution.Event{Kind: execution.EventFailed, Failure: f}
}

// Cancel asks the Node to cancel this run (only this run id). The run
// still ends through Next, normally with a FailureCanceled terminal.
func (run *Run) Cancel() error {
	return run.st.WriteMessage(nodewire.Msg(&iopv1.CancelRun{RunId: run.ID}))
}

// Close abandons the run: if it has not ended, its stream is reset (the
// Node cancels the provider call) and the run ends as cancelled. It is safe
// to call at any time, more than once.
func (run *Run) Close() {
	run.closed.Store(true)
	run.st.Reset(wire.ResetCancel)
	run.mu.Lock()
	defer run.mu.Unlock()
	if !run.ended {
		run.endLocked(errAbandoned())
	}
}

func errAbandoned() *execution.Failure {
	return execution.Failf(execution.FailureCanceled, "abandoned by the caller")
}

// Command sends a closed node command to the node's connection of
// generation gen and returns its result.
func (r *Registry) Command(ctx context.Context, nodeID string, gen uint64, req *iopv1.NodeCommandRequest) (*iopv1.NodeCommandResult, error) {
	c, err := r.readyConn(nodeID, gen)
	if err != nil {
		return nil, err
	}
	st, err := c.sess.OpenStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("nodes: command: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { st.Reset(wire.ResetCancel) })
	defer stop()
	if err := st.WriteMessage(nodewire.Msg(req)); err != nil {
		return nil, fmt.Errorf("nodes: command: %w", err)
	}
	st.CloseWrite()
	env, err := st.ReadMessage(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("nodes: command: %w", err)
	}
	res := env.GetNodeCommandResult()
	if res == nil {
		st.Reset(wire.ResetProtocolError)
		return nil, errors.New("nodes: command: node answered with something else")
	}
	return res, nil
}

// readyConn returns the node's connection if it is ready and of
// generation gen.
func (r *Registry) readyConn(nodeID string, gen uint64) (*conn, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[nodeID]
	switch {
	case ns == nil:
		return nil, ErrUnknownNode
	case ns.cur == nil || !ns.cur.ready:
		return nil, ErrNotReady
	case ns.cur.gen != gen:
		return nil, ErrStaleGeneration
	}
	return ns.cur, nil
}
