package controlplane

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/internal/backoff"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// ConnectorConfig configures an Edge's link to its Hub. Each field's comment
// says what its zero value means.
type ConnectorConfig struct {
	// HubAddr is the Hub's host:port. Required.
	HubAddr string
	// EdgeID is this Edge's identity at the Hub. Required.
	EdgeID string
	// Token is the Edge's enrollment token at the Hub. Empty means the
	// Edge proves its identity with the client certificate in TLS.
	Token string
	// TLS makes the link TLS 1.3 (ALPN iop/1); a client certificate in it
	// makes it mutual. Nil means plaintext, for tests and loopback.
	TLS *tls.Config
	// Wire tunes the session. Nil means wire defaults.
	Wire *wire.Config
	// Backoff is the reconnect policy. Zero means gRPC's (1 s, x1.6,
	// jitter 0.2, max 120 s); it resets after an accepted hello.
	// NewConnector refuses a negative duration, a Multiplier below 1 or
	// not finite, a Jitter outside [0, 1) and a Max above a day.
	Backoff backoff.Config
	// HelloTimeout bounds dial and hello. Zero means 15 s.
	HelloTimeout time.Duration
	// Version is reported in the hello. Empty means "dev".
	Version string
	// Logger receives connection events. Nil means silent.
	Logger hclog.Logger
}

// HelloError is a hello the Hub rejected.
type HelloError struct {
	Rejection iopv1.EdgeHelloRejection
	Message   string
}

func (e *HelloError) Error() string {
	return fmt.Sprintf("controlplane: hub rejected the hello: %s (%s)", e.Rejection, e.Message)
}

// Connector links one Edge to a Hub: it dials with backoff, says hello,
// answers status requests from the Backend, runs the commands the Backend
// accepts, and relays the Backend's lifecycle events in order.
type Connector struct {
	cfg     ConnectorConfig
	backend Backend
	log     hclog.Logger

	mu        sync.Mutex
	connected bool
	gen       uint64
	lastErr   error
}

// NewConnector returns a Connector for b. It does nothing until Run.
func NewConnector(cfg ConnectorConfig, b Backend) (*Connector, error) {
	if cfg.HubAddr == "" {
		return nil, errors.New("controlplane: connector: HubAddr is required")
	}
	if err := identity.CheckID(cfg.EdgeID); err != nil {
		return nil, fmt.Errorf("controlplane: connector: EdgeID: %w", err)
	}
	if b == nil {
		return nil, errors.New("controlplane: connector: Backend is required")
	}
	if err := cfg.Wire.Validate(); err != nil {
		return nil, fmt.Errorf("controlplane: connector: Wire: %w", err)
	}
	if err := cfg.Backoff.Validate(); err != nil {
		return nil, fmt.Errorf("controlplane: connector: Backoff: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Connector{cfg: cfg, backend: b, log: log.Named("controlplane")}, nil
}

// ConnectorStatus is the link's state.
type ConnectorStatus struct {
	Connected bool
	// Generation is the Hub's id for the current connection.
	Generation uint64
	// LastError is why the last connection attempt or connection ended.
	LastError error
}

// Status returns the link's state.
func (c *Connector) Status() ConnectorStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConnectorStatus{Connected: c.connected, Generation: c.gen, LastError: c.lastErr}
}

// Run keeps the Edge connected to its Hub until ctx ends, and returns
// ctx's error. Every goroutine it starts has stopped when it returns.
func (c *Connector) Run(ctx context.Context) error {
	bo := backoff.New(c.cfg.Backoff)
	for {
		hello, err := c.connectOnce(ctx)
		c.mu.Lock()
		c.connected, c.gen, c.lastErr = false, 0, err
		c.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if hello {
			bo.Reset()
		}
		delay := bo.Next()
		var he *HelloError
		if errors.As(err, &he) {
			c.log.Warn("hub rejected the hello; retrying", "rejection", he.Rejection.String(), "delay", delay)
		} else {
			c.log.Info("hub link ended; reconnecting", "error", err, "delay", delay)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// connectOnce runs one connection; it reports whether the hello was
// accepted.
func (c *Connector) connectOnce(ctx context.Context) (bool, error) {
	timeout := c.cfg.HelloTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sess, err := wire.Dial(dctx, "tcp", c.cfg.HubAddr, c.cfg.TLS, c.cfg.Wire)
	if err != nil {
		return false, err
	}
	defer sess.Close()
	// Streams the Hub opens (status, commands) are served from the start;
	// the session owns the handler goroutines and Close waits for them.
	sess.Handle(func(st *wire.Stream) { c.serveStream(sess.Context(), st) })
	ctl, err := sess.OpenStream(dctx)
	if err != nil {
		return false, err
	}
	hello := &iopv1.EdgeHelloRequest{EdgeId: c.cfg.EdgeID, Credential: []byte(c.cfg.Token), Version: c.version()}
	if err := ctl.WriteMessage(msg(hello)); err != nil {
		return false, err
	}
	// Subscribe before the Hub can ask for a status, so no transition
	// falls between the status it takes and the events that follow.
	sub := c.backend.Subscribe()
	defer sub.Close()
	env, err := ctl.ReadMessage(dctx)
	if err != nil {
		return false, err
	}
	resp := env.GetEdgeHelloResponse()
	if resp == nil {
		return false, errors.New("controlplane: hub answered the hello with something else")
	}
	if !resp.GetAccepted() {
		return false, &HelloError{Rejection: resp.GetRejection(), Message: nodewire.Note(resp.GetMessage())}
	}
	cancel()
	c.mu.Lock()
	c.connected, c.gen, c.lastErr = true, resp.GetGeneration(), nil
	c.mu.Unlock()
	c.log.Info("connected to hub", "edge", c.cfg.EdgeID, "generation", resp.GetGeneration())

	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.relayEvents(sess.Context(), ctl, sub) })
	if w, ok := c.backend.(StatusWatcher); ok {
		wg.Go(func() { c.relayStatusChanges(sess.Context(), ctl, w) })
	}
	select {
	case <-ctx.Done():
		sess.CloseWithReason(wire.ReasonNormal, "edge stopping")
		return true, ctx.Err()
	case <-sess.Done():
		return true, sess.Err()
	}
}

// relayEvents writes the Backend's events on the control stream in order.
// After the Edge's own feed fell behind it sends a RESYNC, so the Hub takes
// a fresh status.
func (c *Connector) relayEvents(ctx context.Context, ctl *wire.Stream, sub *nodes.Subscription) {
	stop := context.AfterFunc(ctx, func() { sub.Close() })
	defer stop()
	for {
		ev, err := sub.Next(ctx)
		var out *iopv1.EdgeNodeEvent
		switch {
		case errors.Is(err, nodes.ErrResync):
			out = &iopv1.EdgeNodeEvent{Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_RESYNC, TimeUnixMs: time.Now().UnixMilli()}
		case err != nil:
			return
		default:
			out = eventToWire(ev)
		}
		if out == nil {
			continue
		}
		if err := ctl.WriteMessage(msg(out)); err != nil {
			return
		}
	}
}

// relayStatusChanges tells the Hub, on the control stream, when the
// Backend's status changed between lifecycle events. Changes that come
// while one notice is being written make one more notice, not one each:
// the Hub takes a whole status, not a diff.
func (c *Connector) relayStatusChanges(ctx context.Context, ctl *wire.Stream, w StatusWatcher) {
	changed := make(chan struct{}, 1)
	stop := w.WatchStatus(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		out := &iopv1.EdgeNodeEvent{Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_STATUS_CHANGED, TimeUnixMs: time.Now().UnixMilli()}
		if err := ctl.WriteMessage(msg(out)); err != nil {
			return
		}
	}
}

// serveStream answers one stream the Hub opened: a status or a command.
func (c *Connector) serveStream(ctx context.Context, st *wire.Stream) {
	defer st.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	env, err := st.ReadMessage(rctx)
	if err == nil {
		// The Hub half-closes after its one request. Reading that end
		// first means the answer is never cut short by Close resetting a
		// stream whose peer direction looked open.
		if _, eerr := st.ReadMessage(rctx); eerr != io.EOF {
			err = errors.New("controlplane: more than one request on a stream")
		}
	}
	cancel()
	if err != nil {
		st.Reset(wire.ResetCancel)
		return
	}
	switch {
	case env.GetEdgeStatusRequest() != nil:
		if err := writeStatus(st, c.cfg.EdgeID, c.backend.Status()); err != nil {
			c.log.Debug("status answer failed", "error", err)
			st.Reset(wire.ResetCancel)
		}
	case env.GetEdgeCommandRequest() != nil:
		c.runCommand(ctx, st, env.GetEdgeCommandRequest())
	default:
		st.WriteMessage(msg(&iopv1.Error{Code: iopv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Message: "expected a status or command request"}))
	}
}

// maxSnapshotBytes bounds one encoded EdgeNodeSnapshot on the status
// stream (a Node with many providers and models stays far below it).
const maxSnapshotBytes = 1 << 20

// writeStatus writes the status head and then each Node as stream data,
// a varint length and the message, and ends the stream.
func writeStatus(st *wire.Stream, edgeID string, s Status) error {
	head := &iopv1.EdgeStatusResponse{
		EdgeId: edgeID, GeneratedUnixMs: unixMs(s.GeneratedAt), NodeCount: u32(len(s.Nodes)),
		RouteCount: u32(s.Routes), Queued: u32(s.Queued), ConfigRevision: s.ConfigRevision,
		EventSeq: s.EventSeq, MaxQueued: u32(s.MaxQueued), QueueFull: s.QueueFull,
		QueuedBytes: u64(s.QueuedBytes), MaxQueuedBytes: u64(s.MaxQueuedBytes),
	}
	if err := st.WriteMessage(msg(head)); err != nil {
		return err
	}
	w := bufio.NewWriterSize(st, 32<<10)
	var buf []byte
	for _, n := range s.Nodes {
		b, err := proto.Marshal(nodeToWire(n))
		if err != nil {
			return err
		}
		if len(b) > maxSnapshotBytes {
			return fmt.Errorf("controlplane: node %q snapshot is %d bytes, above %d", n.ID, len(b), maxSnapshotBytes)
		}
		buf = protowire.AppendVarint(buf[:0], uint64(len(b)))
		buf = append(buf, b...)
		if _, err := w.Write(buf); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return st.CloseWrite()
}

// runCommand resolves a command with the Backend, answers accepted or
// rejected, and streams the phases of an accepted one.
func (c *Connector) runCommand(ctx context.Context, st *wire.Stream, req *iopv1.EdgeCommandRequest) {
	id := req.GetCommandId()
	reject := func(r Rejection, m string) {
		st.WriteMessage(msg(&iopv1.EdgeCommandResponse{CommandId: id, Rejection: iopv1.EdgeCommandRejection(r), Message: nodewire.Note(m)}))
	}
	if len(id) == 0 || len(id) > 64 {
		reject(RejectInvalidArgument, "command_id must be 1 to 64 bytes")
		return
	}
	cmd := Command{ID: id, Operation: req.GetOperation(), NodeID: req.GetTargetSelector().GetNodeId(),
		ProviderID: req.GetTargetSelector().GetProviderId(), Args: req.GetArgs()}
	op, err := c.backend.Command(cmd)
	if err != nil {
		var ce *CommandError
		if !errors.As(err, &ce) {
			ce = &CommandError{Rejection: RejectUnavailable, Message: "the edge could not take the command"}
		}
		c.log.Info("command rejected", "command_id", id, "operation", cmd.Operation, "rejection", ce.Rejection.String())
		reject(ce.Rejection, ce.Message)
		return
	}
	if err := st.WriteMessage(msg(&iopv1.EdgeCommandResponse{CommandId: id, Accepted: true})); err != nil {
		return
	}
	c.log.Info("command accepted", "command_id", id, "operation", cmd.Operation, "node", cmd.NodeID, "provider", cmd.ProviderID)
	var seq uint32
	var writeErr error
	phase := func(p iopv1.EdgeCommandPhase, m string, inFlight int, res *iopv1.NodeCommandResult) {
		if writeErr != nil {
			return
		}
		seq++
		writeErr = st.WriteMessage(msg(&iopv1.EdgeCommandEvent{CommandId: id, Seq: seq, Phase: p, Message: nodewire.Note(m),
			TimeUnixMs: time.Now().UnixMilli(), InFlight: u32(inFlight), NodeResult: res}))
	}
	phase(iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_ACCEPTED, "accepted", 0, nil)
	phase(iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_RUNNING, cmd.Operation, 0, nil)
	// The Hub cancels a command it no longer follows by resetting the
	// stream; the operation then stops where it is.
	octx, cancel := context.WithCancel(ctx)
	stopAbort := st.OnAbort(cancel)
	res, err := op(octx, func(p Progress) {
		phase(iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_PROGRESS, p.Message, p.InFlight, nil)
	})
	stopAbort()
	cancel()
	if err != nil {
		phase(iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_FAILED, err.Error(), 0, nil)
		return
	}
	phase(iopv1.EdgeCommandPhase_EDGE_COMMAND_PHASE_SUCCEEDED, "done", 0, res)
}

func (c *Connector) version() string {
	if c.cfg.Version == "" {
		return "dev"
	}
	return c.cfg.Version
}
