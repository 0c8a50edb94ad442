package edge

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/edge/pool"
	"github.com/iop-dev/iop/wire/iopv1"
)

// The Server is the Control Plane connector's Backend: the Hub sees only
// what the Edge reports and changes only what the Edge's own operations
// change.
var _ controlplane.Backend = (*Server)(nil)

// ConnectControlPlane keeps this Edge connected to a Control Plane Hub,
// answering its status requests, running the commands it relays and
// relaying node lifecycle events, until ctx ends or the Server closes. It
// returns ctx's error (or ErrServerClosed).
func (s *Server) ConnectControlPlane(ctx context.Context, cfg controlplane.ConnectorConfig) error {
	if cfg.Logger == nil {
		cfg.Logger = s.log
	}
	c, err := controlplane.NewConnector(cfg, s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	if s.links == nil {
		s.links = map[uint64]context.CancelFunc{}
	}
	s.linkSeq++
	id := s.linkSeq
	s.links[id] = cancel
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.links, id)
		s.mu.Unlock()
	}()
	err = c.Run(ctx)
	if s.closing.Load() {
		return ErrServerClosed
	}
	return err
}

// Status implements controlplane.Backend: every configured Node with the
// pressure figures admission computes.
func (s *Server) Status() controlplane.Status {
	snaps, seq := s.reg.SnapshotSeq()
	s.addPressure(snaps)
	snap := s.snap.Load()
	ps := s.pool.Stats()
	return controlplane.Status{
		GeneratedAt:    time.Now(),
		Routes:         len(snap.routes),
		Queued:         ps.Queued,
		MaxQueued:      snap.maxQueued,
		QueueFull:      ps.QueueFull,
		QueuedBytes:    ps.QueuedBytes,
		MaxQueuedBytes: snap.maxQueuedBytes,
		ConfigRevision: s.configRev.Load(),
		EventSeq:       seq,
		Nodes:          snaps,
	}
}

// WatchStatus implements controlplane.StatusWatcher: notify is called
// after a provider, or one model of it, begins cooling (ProviderSnapshot's
// CoolingUntil and CoolingModels in Status) and after a cooldown ends, so
// that a linked Hub shows it at once rather than at its next status poll.
// A cooldown only extended (a second 429 while cooling) is not reported:
// the next status carries its new end. notify must not block; it is called
// from request and timer goroutines, never under the Server's locks.
func (s *Server) WatchStatus(notify func()) (stop func()) {
	return s.watchers.Add(notify)
}

// Subscribe implements controlplane.Backend.
func (s *Server) Subscribe() *nodes.Subscription { return s.reg.Subscribe() }

// Command implements controlplane.Backend: it resolves cmd against the
// Edge's own registry and returns the operation, or rejects it.
func (s *Server) Command(cmd controlplane.Command) (controlplane.Operation, error) {
	noArgs := func() error {
		if len(cmd.Args) > 0 {
			return controlplane.Reject(controlplane.RejectInvalidArgument, "%s takes no arguments", cmd.Operation)
		}
		return nil
	}
	node := func() (nodes.NodeSnapshot, error) {
		if err := noArgs(); err != nil {
			return nodes.NodeSnapshot{}, err
		}
		if cmd.NodeID == "" || cmd.ProviderID != "" {
			return nodes.NodeSnapshot{}, controlplane.Reject(controlplane.RejectInvalidArgument, "%s needs a node_id and no provider_id", cmd.Operation)
		}
		n, ok := s.reg.Node(cmd.NodeID)
		if !ok {
			return nodes.NodeSnapshot{}, controlplane.Reject(controlplane.RejectNotFound, "no configured node %q", cmd.NodeID)
		}
		return n, nil
	}
	provider := func() (string, error) {
		if cmd.ProviderID == "" {
			return "", controlplane.Reject(controlplane.RejectInvalidArgument, "%s needs a provider_id", cmd.Operation)
		}
		nodeID, ok := s.reg.ProviderNode(cmd.ProviderID)
		if !ok || (cmd.NodeID != "" && cmd.NodeID != nodeID) {
			return "", controlplane.Reject(controlplane.RejectNotFound, "no configured provider %q on that node", cmd.ProviderID)
		}
		return nodeID, nil
	}
	connected := func(n nodes.NodeSnapshot) (uint64, error) {
		if !n.Connected {
			return 0, controlplane.Reject(controlplane.RejectFailedPrecondition, "node %q is not connected", n.ID)
		}
		return n.Generation, nil
	}

	switch cmd.Operation {
	case controlplane.OpConfigRefresh:
		if err := noArgs(); err != nil {
			return nil, err
		}
		if cmd.NodeID != "" || cmd.ProviderID != "" {
			return nil, controlplane.Reject(controlplane.RejectInvalidArgument, "config.refresh takes no selector")
		}
		if s.source == nil {
			return nil, controlplane.Reject(controlplane.RejectFailedPrecondition, "this edge has no configuration source")
		}
		return s.opRefresh, nil

	case controlplane.OpNodeDrain, controlplane.OpNodeResume:
		n, err := node()
		if err != nil {
			return nil, err
		}
		if cmd.Operation == controlplane.OpNodeResume {
			return func(context.Context, func(controlplane.Progress)) (*iopv1.NodeCommandResult, error) {
				return nil, s.reg.SetDraining(n.ID, false)
			}, nil
		}
		return func(ctx context.Context, report func(controlplane.Progress)) (*iopv1.NodeCommandResult, error) {
			return nil, s.drain(ctx, n.ID, report)
		}, nil

	case controlplane.OpNodeDisconnect:
		n, err := node()
		if err != nil {
			return nil, err
		}
		gen, err := connected(n)
		if err != nil {
			return nil, err
		}
		return func(context.Context, func(controlplane.Progress)) (*iopv1.NodeCommandResult, error) {
			if err := s.reg.Disconnect(n.ID, gen, "operator command"); err != nil {
				return nil, fmt.Errorf("the node's connection changed before the disconnect: %w", err)
			}
			return nil, nil
		}, nil

	case controlplane.OpProviderDisable, controlplane.OpProviderEnable:
		if err := noArgs(); err != nil {
			return nil, err
		}
		if _, err := provider(); err != nil {
			return nil, err
		}
		enable := cmd.Operation == controlplane.OpProviderEnable
		return func(context.Context, func(controlplane.Progress)) (*iopv1.NodeCommandResult, error) {
			return nil, s.reg.SetProviderEnabled(cmd.ProviderID, enable)
		}, nil

	case controlplane.OpNodeCapabilities, controlplane.OpNodeTransportStatus:
		n, err := node()
		if err != nil {
			return nil, err
		}
		gen, err := connected(n)
		if err != nil {
			return nil, err
		}
		kind := iopv1.NodeCommand_NODE_COMMAND_CAPABILITIES
		if cmd.Operation == controlplane.OpNodeTransportStatus {
			kind = iopv1.NodeCommand_NODE_COMMAND_TRANSPORT_STATUS
		}
		return s.nodeCommand(n.ID, gen, &iopv1.NodeCommandRequest{Command: kind}), nil

	case controlplane.OpOllamaAPI:
		nodeID, err := provider()
		if err != nil {
			return nil, err
		}
		endpoint, err := ollamaEndpoint(cmd.Args)
		if err != nil {
			return nil, err
		}
		if pi, ok := s.snap.Load().providers[cmd.ProviderID]; !ok || pi.adapter != "ollama" {
			return nil, controlplane.Reject(controlplane.RejectFailedPrecondition, "provider %q is not an Ollama provider", cmd.ProviderID)
		}
		n, _ := s.reg.Node(nodeID)
		gen, err := connected(n)
		if err != nil {
			return nil, err
		}
		return s.nodeCommand(nodeID, gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_OLLAMA_API, ProviderId: cmd.ProviderID, Argument: endpoint}), nil
	}
	return nil, controlplane.Reject(controlplane.RejectUnknownOperation, "unknown operation %q", cmd.Operation)
}

// ollamaEndpoint validates node.ollama_api's one argument.
func ollamaEndpoint(args map[string]string) (string, error) {
	for k := range args {
		if k != "endpoint" {
			return "", controlplane.Reject(controlplane.RejectInvalidArgument, "unknown argument %q (only endpoint)", k)
		}
	}
	e := args["endpoint"]
	switch {
	case e == "tags", e == "ps", e == "version":
		return e, nil
	case strings.HasPrefix(e, "show:") && len(e) > len("show:") && len(e) <= 256:
		for _, c := range e {
			if c < 0x21 || c == 0x7f {
				return "", controlplane.Reject(controlplane.RejectInvalidArgument, "model name has a space or control character")
			}
		}
		return e, nil
	}
	return "", controlplane.Reject(controlplane.RejectInvalidArgument, "endpoint must be tags, ps, version or show:<model>")
}

func (s *Server) nodeCommand(nodeID string, gen uint64, req *iopv1.NodeCommandRequest) controlplane.Operation {
	return func(ctx context.Context, _ func(controlplane.Progress)) (*iopv1.NodeCommandResult, error) {
		res, err := s.reg.Command(ctx, nodeID, gen, req)
		if err != nil {
			return nil, err
		}
		if !res.GetOk() {
			return nil, fmt.Errorf("the node refused: %s", res.GetError())
		}
		return res, nil
	}
}

// opRefresh reloads from the configuration source.
func (s *Server) opRefresh(_ context.Context, report func(controlplane.Progress)) (*iopv1.NodeCommandResult, error) {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	cfg, err := s.source()
	if err != nil {
		return nil, fmt.Errorf("reading the configuration: %w", err)
	}
	if err := s.reloadLocked(cfg); err != nil {
		return nil, err
	}
	report(controlplane.Progress{Message: fmt.Sprintf("configuration revision %d; requests admitted from now on use it", s.configRev.Load())})
	return nil, nil
}

// drainPoll is how often a drain looks at the work its node still holds.
const drainPoll = 50 * time.Millisecond

// drain stops admission to a node and reports its in-flight work until
// none is left or ctx ends (the node then stays draining).
func (s *Server) drain(ctx context.Context, nodeID string, report func(controlplane.Progress)) error {
	if err := s.reg.SetDraining(nodeID, true); err != nil {
		return err
	}
	last := -1
	t := time.NewTicker(drainPoll)
	defer t.Stop()
	for {
		n := s.nodeInFlight(nodeID)
		if n != last {
			report(controlplane.Progress{Message: fmt.Sprintf("%d requests in flight", n), InFlight: n})
			last = n
		}
		if n == 0 {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("stopped following the drain with %d requests in flight; the node stays draining", n)
		}
	}
}

func (s *Server) nodeInFlight(nodeID string) int {
	n, ok := s.reg.Node(nodeID)
	if !ok {
		return 0
	}
	total := 0
	for _, p := range n.Providers {
		total += s.pool.Load(pool.Key{NodeID: n.ID, ProviderID: p.ID}, n.Generation).InFlight
	}
	return total
}

// addPressure fills the admission figures into registry snapshots: online
// providers report the lease in-flight and queue pressure and their
// cooldown; providers on a node that is not connected keep zeros.
func (s *Server) addPressure(snaps []nodes.NodeSnapshot) {
	now := time.Now()
	for i := range snaps {
		n := &snaps[i]
		for j := range n.Providers {
			p := &n.Providers[j]
			if !n.Connected {
				p.InFlight, p.LongContextInFlight, p.Queued = 0, 0, 0
				continue
			}
			load := s.pool.Load(pool.Key{NodeID: n.ID, ProviderID: p.ID}, n.Generation)
			p.InFlight, p.LongContextInFlight, p.Queued = load.InFlight, load.LongContextInFlight, load.Queued
			p.CoolingUntil, p.CoolingModels = s.cool.ends(p.ID, now)
		}
	}
}
