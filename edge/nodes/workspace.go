package nodes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// cancelGrace bounds the wait for a cancelled call's answer.
const cancelGrace = 5 * time.Second

// ErrWorkspaceRefused: the node's ready connection did not accept the
// workspace ref (its catalog does not allow it).
var ErrWorkspaceRefused = errors.New("nodes: the node did not accept this workspace")

// WorkspaceGeneration resolves a workspace ref configured on nodeID to
// the node's current ready generation, if that connection accepted it. A
// node that is unknown, not connected or still registering, or that
// refused the ref, yields an error; nothing else is tried.
//
// While the Node has not acknowledged the latest configuration, a
// configuration it may still be admitting by (the one it acknowledged,
// or one sent since) may grant ref otherwise than the latest does: ref
// removed and added back, its authority changed. The Node would refuse
// an open that the latest grant allows, or its acceptance is not known
// yet. WorkspaceGeneration then waits, within ctx, for the Node's
// acknowledgement (or the connection's end) and decides by it; when ctx
// ends first it returns ctx's error.
func (r *Registry) WorkspaceGeneration(ctx context.Context, nodeID, ref string) (uint64, error) {
	var sub *Subscription
	for {
		gen, settled, err := r.workspaceGeneration(nodeID, ref)
		if settled {
			return gen, err
		}
		if sub == nil {
			// Subscribed before the next look: an acknowledgement
			// after this one is not missed.
			sub = r.Subscribe()
			defer sub.Close()
			continue
		}
		// Any event may be the one awaited (a resync too): look again.
		if _, err := sub.Next(ctx); err != nil && !errors.Is(err, ErrResync) {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, ErrClosed
		}
	}
}

// workspaceGeneration is one look for WorkspaceGeneration; settled is
// false while the Node's acknowledgement decides.
func (r *Registry) workspaceGeneration(nodeID, ref string) (gen uint64, settled bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[nodeID]
	switch {
	case ns == nil:
		return 0, true, ErrUnknownNode
	case ns.cur == nil || !ns.cur.ready:
		return 0, true, ErrNotReady
	case !ns.cur.grantSettledLocked(ns.payload, ref):
		return 0, false, nil
	case !slices.Contains(ns.cur.workspaces, ref):
		return 0, true, ErrWorkspaceRefused
	}
	return ns.cur.gen, true, nil
}

// WorkspaceCall sends one workspace request on the node's connection of
// generation gen (req.Generation is set to it) and returns the answer. If
// ctx ends first, the Node gets one WorkspaceCancel for the call and the
// stream is reset.
func (r *Registry) WorkspaceCall(ctx context.Context, nodeID string, gen uint64, req *iopv1.WorkspaceRequest) (*iopv1.WorkspaceResponse, error) {
	c, err := r.readyConn(nodeID, gen)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	req.Generation = gen
	st, err := c.sess.OpenStream(ctx)
	if err != nil {
		return nil, fmt.Errorf("nodes: workspace: %w", err)
	}
	defer st.Close()
	if err := st.WriteMessage(nodewire.Msg(req)); err != nil {
		return nil, fmt.Errorf("nodes: workspace: %w", err)
	}
	// A caller that gives up sends exactly one typed cancel, after the
	// request, and ends its direction.
	stop := context.AfterFunc(ctx, func() {
		st.WriteMessage(nodewire.Msg(&iopv1.WorkspaceCancel{RequestId: req.GetRequestId(), ToolCallId: req.GetToolCallId()}))
		st.CloseWrite()
	})
	env, err := st.ReadMessage(ctx)
	if ctx.Err() != nil {
		stop()
		// Let the cancel reach the Node (it answers once the call has
		// stopped), then drop the stream.
		wctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		st.ReadMessage(wctx)
		cancel()
		st.Reset(wire.ResetCancel)
		return nil, ctx.Err()
	}
	stop()
	if err != nil {
		return nil, fmt.Errorf("nodes: workspace: %w", err)
	}
	resp := env.GetWorkspaceResponse()
	if resp == nil {
		st.Reset(wire.ResetProtocolError)
		return nil, errors.New("nodes: workspace: node answered with something else")
	}
	st.CloseWrite()
	return resp, nil
}
