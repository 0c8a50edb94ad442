package controlplane

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// CommandPhase is a phase of an accepted command.
type CommandPhase string

// Command phases, in the order an Edge reports them; Succeeded or Failed
// ends a command.
const (
	PhaseAccepted  CommandPhase = "accepted"
	PhaseRunning   CommandPhase = "running"
	PhaseProgress  CommandPhase = "progress"
	PhaseSucceeded CommandPhase = "succeeded"
	PhaseFailed    CommandPhase = "failed"
)

func phaseFrom(p iopv1.EdgeCommandPhase) (CommandPhase, bool) {
	switch p {
	case iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_ACCEPTED:
		return PhaseAccepted, true
	case iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_RUNNING:
		return PhaseRunning, true
	case iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_PROGRESS:
		return PhaseProgress, true
	case iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_SUCCEEDED:
		return PhaseSucceeded, true
	case iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_FAILED:
		return PhaseFailed, true
	}
	return "", false
}

// Terminal reports whether p ends a command.
func (p CommandPhase) Terminal() bool { return p == PhaseSucceeded || p == PhaseFailed }

// CommandEvent is one phase of a command as the Edge reported it.
type CommandEvent struct {
	Seq      int          `json:"seq"`
	Phase    CommandPhase `json:"phase"`
	Message  string       `json:"message,omitempty"`
	Time     time.Time    `json:"time"`
	InFlight int          `json:"in_flight,omitempty"`
	// NodeResult is a node command's answer, on its Succeeded phase.
	NodeResult *iopv1.NodeCommandResult `json:"-"`
}

// CommandRun is a command sent to an Edge. Accepted, Rejection and Message
// are the Edge's answer; Next returns the phases of an accepted command.
type CommandRun struct {
	ID        string
	Accepted  bool
	Rejection Rejection
	Message   string

	st     *wire.Stream
	cancel context.CancelFunc
	stop   func() bool
	seq    int
	done   bool
	once   sync.Once
}

// ErrCommandBroken is returned by CommandRun.Next when the Edge's answer
// broke off or broke the phase rules (order, one terminal).
var ErrCommandBroken = errors.New("controlplane: command answer broke off")

// maxCommandIDLen bounds a command id.
const maxCommandIDLen = 64

// Command sends cmd to an Edge. The Hub checks only that the operation is
// one of the closed set; the Edge resolves the selector and decides. The
// returned run must be closed.
func (h *Hub) Command(ctx context.Context, edgeID string, cmd Command) (*CommandRun, error) {
	if !slices.Contains(Operations, cmd.Operation) {
		return nil, Reject(RejectUnknownOperation, "unknown operation %q", cmd.Operation)
	}
	if len(cmd.NodeID) > 128 || len(cmd.ProviderID) > 128 || len(cmd.Args) > 8 {
		return nil, Reject(RejectInvalidArgument, "selector or arguments too large")
	}
	h.mu.Lock()
	es := h.edges[edgeID]
	var c *edgeConn
	if es != nil {
		c = es.cur
	}
	h.mu.Unlock()
	switch {
	case es == nil:
		return nil, ErrUnknownEdge
	case c == nil:
		return nil, ErrEdgeOffline
	}
	if cmd.ID == "" {
		var b [8]byte
		rand.Read(b[:])
		cmd.ID = "cmd_" + hex.EncodeToString(b[:])
	}
	if len(cmd.ID) > maxCommandIDLen {
		return nil, Reject(RejectInvalidArgument, "command id above %d bytes", maxCommandIDLen)
	}
	cctx, cancel := context.WithTimeout(h.ctx, cmp.Or(h.cfg.CommandTimeout, DefaultCommandTimeout))
	st, err := c.sess.OpenStream(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("controlplane: command: %w", err)
	}
	run := &CommandRun{ID: cmd.ID, st: st, cancel: cancel}
	run.stop = context.AfterFunc(cctx, func() { st.Reset(wire.ResetCancel) })
	req := &iopv1.EdgeCommandRequest{CommandId: cmd.ID, Operation: cmd.Operation, Args: cmd.Args,
		TargetSelector: &iopv1.EdgeTargetSelector{NodeId: cmd.NodeID, ProviderId: cmd.ProviderID}}
	if err := st.WriteMessage(msg(req)); err != nil {
		run.Close()
		return nil, fmt.Errorf("controlplane: command: %w", err)
	}
	st.CloseWrite()
	env, err := st.ReadMessage(ctx)
	if err != nil {
		run.Close()
		return nil, fmt.Errorf("controlplane: command answer: %w", err)
	}
	resp := env.GetEdgeCommandResponse()
	if resp == nil || resp.GetCommandId() != cmd.ID {
		run.Close()
		return nil, ErrCommandBroken
	}
	run.Accepted, run.Rejection, run.Message = resp.GetAccepted(), Rejection(resp.GetRejection()), nodewire.Note(resp.GetMessage())
	h.log.Info("command sent", "edge", edgeID, "command_id", cmd.ID, "operation", cmd.Operation, "accepted", run.Accepted)
	if !run.Accepted {
		run.done = true
	}
	return run, nil
}

// Next returns the command's next phase; io.EOF after its terminal phase
// (or at once for a rejected command).
func (r *CommandRun) Next(ctx context.Context) (CommandEvent, error) {
	if r.done {
		return CommandEvent{}, io.EOF
	}
	env, err := r.st.ReadMessage(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return CommandEvent{}, ctx.Err()
		}
		r.done = true
		return CommandEvent{}, fmt.Errorf("%w: %v", ErrCommandBroken, err)
	}
	m := env.GetEdgeCommandEvent()
	phase, ok := phaseFrom(m.GetPhase())
	if m == nil || !ok || m.GetCommandId() != r.ID || int(m.GetSeq()) != r.seq+1 {
		r.done = true
		return CommandEvent{}, ErrCommandBroken
	}
	r.seq++
	ev := CommandEvent{Seq: r.seq, Phase: phase, Message: nodewire.Note(m.GetMessage()), InFlight: int(m.GetInFlight()), NodeResult: m.GetNodeResult()}
	if t := fromUnixMs(m.GetTimeUnixMs()); t != nil {
		ev.Time = *t
	}
	if phase.Terminal() {
		r.done = true
	}
	return ev, nil
}

// Wait reads every remaining phase and returns them; the last is the
// terminal one unless an error is returned.
func (r *CommandRun) Wait(ctx context.Context) ([]CommandEvent, error) {
	var out []CommandEvent
	for {
		ev, err := r.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

// Close ends the run; a command still running at the Edge is told to stop
// following (the Edge keeps any state it already changed).
func (r *CommandRun) Close() {
	r.once.Do(func() {
		r.stop()
		if !r.done {
			r.st.Reset(wire.ResetCancel)
		}
		r.st.Close()
		r.cancel()
	})
}
