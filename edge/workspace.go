package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/wire/iopv1"
	"github.com/iop-dev/iop/workspace"
)

// WorkspaceSpec is a workspace ref the Edge may admit requests to: the
// Node that owns it and the most authority a request may be granted (the
// Node's own catalog may allow less, and then refuses the ref).
type WorkspaceSpec struct {
	Ref       string
	NodeID    string
	Authority workspace.Authority
}

// Workspace admission errors. Each fails closed: no other Node, ref or
// generation is tried.
var (
	ErrUnknownWorkspace     = errors.New("edge: unknown workspace ref")
	ErrWorkspaceDenied      = errors.New("edge: authority beyond the workspace's grant")
	ErrWorkspaceUnavailable = errors.New("edge: workspace unavailable")
)

// WorkspaceError is a workspace call the Node refused or failed, with its
// closed code.
type WorkspaceError struct {
	Code    iopv1.WorkspaceErrorCode
	Message string
}

func (e *WorkspaceError) Error() string {
	return "edge: workspace: " + e.Code.String() + ": " + e.Message
}

// validateWorkspaces checks the workspace specs against the nodes.
func (c *Config) validateWorkspaces() error {
	seen := map[string]bool{}
	for i, w := range c.Workspaces {
		switch {
		case !workspace.ValidName(w.Ref):
			return fmt.Errorf("Workspaces[%d]: ref %q must be 1 to 64 of [A-Za-z0-9._-]", i, w.Ref)
		case seen[w.Ref]:
			return fmt.Errorf("Workspaces[%d]: duplicate ref %q", i, w.Ref)
		case !slices.ContainsFunc(c.Nodes, func(n nodes.Record) bool { return n.ID == w.NodeID }):
			return fmt.Errorf("Workspaces[%d] (%s): unknown node %q", i, w.Ref, w.NodeID)
		}
		seen[w.Ref] = true
		if err := validAuthority(w.Authority); err != nil {
			return fmt.Errorf("Workspaces[%d] (%s): %w", i, w.Ref, err)
		}
	}
	return nil
}

func validAuthority(a workspace.Authority) error {
	if len(a.Ops) == 0 {
		return errors.New("no operations")
	}
	for _, op := range a.Ops {
		switch op {
		case workspace.OpRead, workspace.OpList, workspace.OpWrite, workspace.OpDelete, workspace.OpCommand:
		default:
			return fmt.Errorf("unknown operation %q", op)
		}
	}
	if len(a.Commands) > 0 && !slices.Contains(a.Ops, workspace.OpCommand) {
		return errors.New("commands without the command operation")
	}
	// The Node refuses limits above the ceilings; checked here, a grant
	// no Node would accept is refused at load, and every limit fits its
	// wire field.
	return a.Limits.Validate()
}

func authorityTo(a workspace.Authority) *iopv1.WorkspaceAuthority {
	out := &iopv1.WorkspaceAuthority{Commands: slices.Clone(a.Commands), Limits: &iopv1.WorkspaceLimits{
		ReadBytes: a.Limits.ReadBytes, ListEntries: uint32(a.Limits.ListEntries), WriteBytes: a.Limits.WriteBytes,
		CommandTimeoutMs: a.Limits.CommandTimeout.Milliseconds(), OutputBytes: a.Limits.OutputBytes}}
	for _, op := range a.Ops {
		out.Ops = append(out.Ops, string(op))
	}
	return out
}

// withWorkspaces returns the node records with their configured
// workspace grants (the payload carries them).
func withWorkspaces(recs []nodes.Record, specs []WorkspaceSpec) []nodes.Record {
	out := slices.Clone(recs)
	for i := range out {
		out[i].Workspaces = nil
		for _, w := range specs {
			if w.NodeID == out[i].ID {
				out[i].Workspaces = append(out[i].Workspaces, &iopv1.WorkspaceGrant{Ref: w.Ref, Authority: authorityTo(w.Authority)})
			}
		}
	}
	return out
}

// Workspace is one request's admitted workspace: frozen to the Node and
// connection generation it was opened on. Every call goes there; if that
// connection ends, calls fail (there is no reselection).
type Workspace struct {
	s          *Server
	Ref        string
	NodeID     string
	Generation uint64
	RequestID  string
	Stage      string
	Authority  workspace.Authority
}

// OpenWorkspace admits a request to a workspace: ref resolves only
// through the configured catalog to its one Node, that Node's ready
// connection must have accepted ref, and a must be within the configured
// grant. The Node opens the request's session there (checking a against
// its own catalog). Unknown, denied, unavailable (offline, registering,
// refused) and stale candidates fail closed. Right after a reload that
// changed the grant, it waits, within ctx, until the Node has applied
// the change, so that the Node opens by the grant checked here.
func (s *Server) OpenWorkspace(ctx context.Context, ref, requestID, stage string, a workspace.Authority) (*Workspace, error) {
	snap := s.snap.Load()
	spec, ok := snap.workspaces[ref]
	if !workspace.ValidName(ref) || !ok {
		return nil, ErrUnknownWorkspace
	}
	if !workspace.ValidName(requestID) {
		return nil, fmt.Errorf("%w: request id must be 1 to 64 of [A-Za-z0-9._-]", ErrWorkspaceDenied)
	}
	if validAuthority(a) != nil || !a.Within(spec.Authority) {
		return nil, ErrWorkspaceDenied
	}
	gen, err := s.reg.WorkspaceGeneration(ctx, spec.NodeID, ref)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", ErrWorkspaceUnavailable, err)
	}
	frozen := workspace.Authority{Ops: slices.Clone(a.Ops), Commands: slices.Clone(a.Commands), Limits: a.Limits}
	w := &Workspace{s: s, Ref: ref, NodeID: spec.NodeID, Generation: gen, RequestID: requestID, Stage: stage, Authority: frozen}
	if _, err := w.call(ctx, "", &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_Open{Open: &iopv1.WorkspaceOpen{Ref: ref, Authority: authorityTo(frozen)}}}); err != nil {
		return nil, err
	}
	s.log.Info("workspace admitted", "request_id", requestID, "ref", ref, "node", spec.NodeID, "generation", gen)
	return w, nil
}

// call sends one request with the workspace's fixed identities.
func (w *Workspace) call(ctx context.Context, toolCallID string, req *iopv1.WorkspaceRequest) (*iopv1.WorkspaceResponse, error) {
	req.RequestId, req.Stage, req.ToolCallId = w.RequestID, w.Stage, toolCallID
	resp, err := w.s.reg.WorkspaceCall(ctx, w.NodeID, w.Generation, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", ErrWorkspaceUnavailable, err)
	}
	if resp.GetStatus() != iopv1.WorkspaceStatus_WORKSPACE_STATUS_OK {
		return nil, &WorkspaceError{Code: resp.GetCode(), Message: resp.GetMessage()}
	}
	return resp, nil
}

// Read reads a file (at most the read limit; truncated says it was cut).
func (w *Workspace) Read(ctx context.Context, toolCallID, path string) (data []byte, truncated bool, err error) {
	resp, err := w.call(ctx, toolCallID, &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_Read{Read: &iopv1.WorkspaceRead{Path: path}}})
	if err != nil {
		return nil, false, err
	}
	return resp.GetRead().GetData(), resp.GetRead().GetTruncated(), nil
}

// List lists a directory, sorted and bounded.
func (w *Workspace) List(ctx context.Context, toolCallID, path string) ([]workspace.DirEntry, bool, error) {
	resp, err := w.call(ctx, toolCallID, &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_List{List: &iopv1.WorkspaceList{Path: path}}})
	if err != nil {
		return nil, false, err
	}
	var out []workspace.DirEntry
	for _, e := range resp.GetList().GetEntries() {
		out = append(out, workspace.DirEntry{Name: e.GetName(), Type: e.GetType(), Size: e.GetSize()})
	}
	return out, resp.GetList().GetTruncated(), nil
}

// Write writes a file atomically (createOnly: never over an existing one).
func (w *Workspace) Write(ctx context.Context, toolCallID, path string, data []byte, createOnly bool) error {
	_, err := w.call(ctx, toolCallID, &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_Write{Write: &iopv1.WorkspaceWrite{Path: path, Data: data, CreateOnly: createOnly}}})
	return err
}

// Delete removes a file or an empty directory.
func (w *Workspace) Delete(ctx context.Context, toolCallID, path string) error {
	_, err := w.call(ctx, toolCallID, &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_Delete{Delete: &iopv1.WorkspaceDelete{Path: path}}})
	return err
}

// Command runs a granted command template with typed arguments. Cancelling
// ctx sends the Node one cancel for this call.
func (w *Workspace) Command(ctx context.Context, toolCallID, commandID string, args map[string]string) (*workspace.Result, error) {
	resp, err := w.call(ctx, toolCallID, &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_Command{Command: &iopv1.WorkspaceCommand{CommandId: commandID, Args: args}}})
	if err != nil {
		return nil, err
	}
	c := resp.GetCommand()
	return &workspace.Result{ExitCode: int(c.GetExitCode()), Signal: c.GetSignal(), TimedOut: c.GetTimedOut(), Canceled: c.GetCanceled(),
		Output: c.GetOutput(), Truncated: c.GetTruncated()}, nil
}

// WriteArtifact stores a request artifact (PLAN or REVIEW).
func (w *Workspace) WriteArtifact(ctx context.Context, a workspace.Artifact, data []byte) error {
	_, err := w.call(ctx, "", &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_ArtifactWrite{ArtifactWrite: &iopv1.WorkspaceArtifactWrite{Artifact: artifactTo(a), Data: data}}})
	return err
}

// ReadArtifact reads a request artifact back.
func (w *Workspace) ReadArtifact(ctx context.Context, a workspace.Artifact) ([]byte, error) {
	resp, err := w.call(ctx, "", &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_ArtifactRead{ArtifactRead: &iopv1.WorkspaceArtifactRead{Artifact: artifactTo(a)}}})
	if err != nil {
		return nil, err
	}
	return resp.GetArtifact().GetData(), nil
}

// Cleanup ends the request's workspace session on the Node.
func (w *Workspace) Cleanup(ctx context.Context) (workspace.CleanupReport, error) {
	resp, err := w.call(ctx, "", &iopv1.WorkspaceRequest{Op: &iopv1.WorkspaceRequest_Cleanup{Cleanup: &iopv1.WorkspaceCleanup{}}})
	if err != nil {
		return workspace.CleanupReport{}, err
	}
	return workspace.CleanupReport{Removed: resp.GetCleanup().GetRemoved(), Left: resp.GetCleanup().GetLeft()}, nil
}

func artifactTo(a workspace.Artifact) iopv1.WorkspaceArtifact {
	switch a {
	case workspace.ArtifactPlan:
		return iopv1.WorkspaceArtifact_WORKSPACE_ARTIFACT_PLAN
	case workspace.ArtifactReview:
		return iopv1.WorkspaceArtifact_WORKSPACE_ARTIFACT_REVIEW
	}
	return iopv1.WorkspaceArtifact_WORKSPACE_ARTIFACT_UNSPECIFIED
}
