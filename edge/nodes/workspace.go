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
// node that is unknown, not connected, still registering or that refused
// the ref yields an error; nothing else is tried.
func (r *Registry) WorkspaceGeneration(nodeID, ref string) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ns := r.nodes[nodeID]
	switch {
	case ns == nil:
		return 0, ErrUnknownNode
	case ns.cur == nil || !ns.cur.ready:
		return 0, ErrNotReady
	case !slices.Contains(ns.cur.workspaces, ref):
		return 0, ErrWorkspaceRefused
	}
	return ns.cur.gen, nil
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
