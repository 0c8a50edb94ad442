package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
	"github.com/iop-dev/iop/workspace"
)

// authorityFrom converts a wire authority (nil: none).
func authorityFrom(a *iopv1.WorkspaceAuthority) workspace.Authority {
	out := workspace.Authority{Commands: slices.Clone(a.GetCommands())}
	for _, op := range a.GetOps() {
		out.Ops = append(out.Ops, workspace.Op(op))
	}
	if l := a.GetLimits(); l != nil {
		out.Limits = workspace.Limits{ReadBytes: l.GetReadBytes(), ListEntries: int(l.GetListEntries()), WriteBytes: l.GetWriteBytes(),
			CommandTimeout: time.Duration(l.GetCommandTimeoutMs()) * time.Millisecond, OutputBytes: l.GetOutputBytes()}
	}
	return out
}

// acceptWorkspaces returns the configured refs the Node's catalog allows
// with the authority the Edge may grant; the others are refused.
func acceptWorkspaces(cat *workspace.Catalog, grants []*iopv1.WorkspaceGrant) map[string]workspace.Authority {
	out := map[string]workspace.Authority{}
	if cat == nil {
		return out
	}
	for _, g := range grants {
		a := authorityFrom(g.GetAuthority())
		if cat.Check(g.GetRef(), a) == nil {
			out[g.GetRef()] = a
		}
	}
	return out
}

func acceptedRefs(m map[string]workspace.Authority) []string {
	out := make([]string, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

var codeToWire = map[workspace.Code]iopv1.WorkspaceErrorCode{
	workspace.CodeInvalidPath: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_INVALID_PATH, workspace.CodeReserved: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_RESERVED,
	workspace.CodeLink: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_LINK, workspace.CodeCrossesMount: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_CROSSES_MOUNT,
	workspace.CodeNotRegular: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_NOT_REGULAR, workspace.CodeHardLinked: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_HARD_LINKED,
	workspace.CodeNotFound: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_NOT_FOUND, workspace.CodeExists: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_EXISTS,
	workspace.CodeNotEmpty: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_NOT_EMPTY, workspace.CodeTooLarge: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_TOO_LARGE,
	workspace.CodeDenied: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_DENIED, workspace.CodeBadArgument: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_BAD_ARGUMENT,
	workspace.CodeRootChanged: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_ROOT_CHANGED, workspace.CodeUnsupportedHost: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_UNSUPPORTED_HOST,
	workspace.CodeClosed: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_CLOSED, workspace.CodeIO: iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_IO,
}

func failed(code iopv1.WorkspaceErrorCode, msg string) *iopv1.WorkspaceResponse {
	return &iopv1.WorkspaceResponse{Status: iopv1.WorkspaceStatus_WORKSPACE_STATUS_FAILED, Code: code, Message: nodewire.Note(msg)}
}

func fromErr(err error) *iopv1.WorkspaceResponse {
	code, ok := codeToWire[workspace.CodeOf(err)]
	if !ok {
		code = iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_IO
	}
	return failed(code, string(workspace.CodeOf(err)))
}

var okResponse = &iopv1.WorkspaceResponse{Status: iopv1.WorkspaceStatus_WORKSPACE_STATUS_OK}

// workspace answers one workspace call. Sessions belong to this
// connection: a request on another generation is refused, and when the
// connection ends every session is cleaned up.
func (s *session) workspace(st *wire.Stream, m *iopv1.WorkspaceRequest) {
	resp := s.workspaceCall(st, m)
	st.WriteMessage(nodewire.Msg(resp))
	st.CloseWrite()
}

func (s *session) workspaceCall(st *wire.Stream, m *iopv1.WorkspaceRequest) *iopv1.WorkspaceResponse {
	if m.GetGeneration() != s.gen {
		return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_STALE_GENERATION, "generation fenced")
	}
	if m.GetRequestId() == "" || m.GetOp() == nil {
		return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_MALFORMED, "request id and operation are required")
	}
	if o := m.GetOpen(); o != nil {
		return s.openWorkspace(m.GetRequestId(), o)
	}
	s.mu.Lock()
	ws := s.workspaces[m.GetRequestId()]
	s.mu.Unlock()
	if ws == nil {
		return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_NO_SESSION, "no open workspace for this request")
	}
	switch op := m.GetOp().(type) {
	case *iopv1.WorkspaceRequest_Read:
		data, cut, err := ws.Read(op.Read.GetPath())
		if err != nil {
			return fromErr(err)
		}
		return &iopv1.WorkspaceResponse{Status: iopv1.WorkspaceStatus_WORKSPACE_STATUS_OK, Result: &iopv1.WorkspaceResponse_Read{Read: &iopv1.WorkspaceReadResult{Data: data, Truncated: cut}}}
	case *iopv1.WorkspaceRequest_List:
		ents, cut, err := ws.List(op.List.GetPath())
		if err != nil {
			return fromErr(err)
		}
		res := &iopv1.WorkspaceListResult{Truncated: cut}
		for _, e := range ents {
			res.Entries = append(res.Entries, &iopv1.WorkspaceListEntry{Name: e.Name, Type: e.Type, Size: e.Size})
		}
		return &iopv1.WorkspaceResponse{Status: iopv1.WorkspaceStatus_WORKSPACE_STATUS_OK, Result: &iopv1.WorkspaceResponse_List{List: res}}
	case *iopv1.WorkspaceRequest_Write:
		if err := ws.Write(op.Write.GetPath(), op.Write.GetData(), op.Write.GetCreateOnly()); err != nil {
			return fromErr(err)
		}
		return okResponse
	case *iopv1.WorkspaceRequest_Delete:
		if err := ws.Delete(op.Delete.GetPath()); err != nil {
			return fromErr(err)
		}
		return okResponse
	case *iopv1.WorkspaceRequest_Command:
		return s.workspaceCommand(st, ws, m, op.Command)
	case *iopv1.WorkspaceRequest_ArtifactWrite:
		a, known := artifactFrom(op.ArtifactWrite.GetArtifact())
		if !known {
			return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_MALFORMED, "unknown artifact")
		}
		if err := ws.WriteArtifact(a, op.ArtifactWrite.GetData()); err != nil {
			return fromErr(err)
		}
		return okResponse
	case *iopv1.WorkspaceRequest_ArtifactRead:
		a, known := artifactFrom(op.ArtifactRead.GetArtifact())
		if !known {
			return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_MALFORMED, "unknown artifact")
		}
		data, err := ws.ReadArtifact(a)
		if err != nil {
			return fromErr(err)
		}
		return &iopv1.WorkspaceResponse{Status: iopv1.WorkspaceStatus_WORKSPACE_STATUS_OK, Result: &iopv1.WorkspaceResponse_Artifact{Artifact: &iopv1.WorkspaceArtifactReadResult{Data: data}}}
	case *iopv1.WorkspaceRequest_Cleanup:
		rep, err := ws.Cleanup()
		s.mu.Lock()
		delete(s.workspaces, m.GetRequestId())
		s.mu.Unlock()
		if err != nil {
			return fromErr(err)
		}
		return &iopv1.WorkspaceResponse{Status: iopv1.WorkspaceStatus_WORKSPACE_STATUS_OK, Result: &iopv1.WorkspaceResponse_Cleanup{Cleanup: &iopv1.WorkspaceCleanupResult{Removed: rep.Removed, Left: rep.Left}}}
	}
	return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_MALFORMED, "unknown operation")
}

func artifactFrom(a iopv1.WorkspaceArtifact) (workspace.Artifact, bool) {
	switch a {
	case iopv1.WorkspaceArtifact_WORKSPACE_ARTIFACT_PLAN:
		return workspace.ArtifactPlan, true
	case iopv1.WorkspaceArtifact_WORKSPACE_ARTIFACT_REVIEW:
		return workspace.ArtifactReview, true
	}
	return 0, false
}

// openWorkspace starts a request's session: the ref must be one this
// connection's plan accepted, and the authority within what the Edge may
// grant there (and, checked again by Open, within the catalog).
func (s *session) openWorkspace(requestID string, o *iopv1.WorkspaceOpen) *iopv1.WorkspaceResponse {
	a := authorityFrom(o.GetAuthority())
	s.mu.Lock()
	max, accepted := s.plan.workspaces[o.GetRef()]
	_, dup := s.workspaces[requestID]
	s.mu.Unlock()
	switch {
	case !accepted || s.rt.cfg.Workspaces == nil:
		return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_DENIED, "workspace not accepted on this node")
	case !a.Within(max):
		return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_DENIED, "authority beyond the configured grant")
	case dup:
		return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_EXISTS, "the request already has a workspace")
	}
	ws, err := s.rt.cfg.Workspaces.Open(o.GetRef(), a, requestID)
	if err != nil {
		return fromErr(err)
	}
	s.mu.Lock()
	if s.workspaces[requestID] != nil || s.ctx.Err() != nil {
		s.mu.Unlock()
		ws.Cleanup()
		return failed(iopv1.WorkspaceErrorCode_WORKSPACE_ERROR_EXISTS, "the request already has a workspace")
	}
	s.workspaces[requestID] = ws
	s.mu.Unlock()
	s.rt.log.Info("workspace opened", "request_id", requestID, "ref", o.GetRef())
	return okResponse
}

// workspaceCommand runs a command; a WorkspaceCancel for this call, a
// stream reset or the connection's end cancels it.
func (s *session) workspaceCommand(st *wire.Stream, ws *workspace.Session, m *iopv1.WorkspaceRequest, c *iopv1.WorkspaceCommand) *iopv1.WorkspaceResponse {
	ctx, cancel := context.WithCancel(s.ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer st.OnAbort(cancel)()
	wg.Go(func() {
		for {
			env, err := st.ReadMessage(ctx)
			if err != nil {
				return
			}
			if cm := env.GetWorkspaceCancel(); cm != nil && cm.GetRequestId() == m.GetRequestId() && cm.GetToolCallId() == m.GetToolCallId() {
				cancel()
				return
			}
		}
	})
	res, err := ws.Run(ctx, c.GetCommandId(), c.GetArgs())
	if err != nil {
		return fromErr(err)
	}
	return &iopv1.WorkspaceResponse{Status: iopv1.WorkspaceStatus_WORKSPACE_STATUS_OK, Result: &iopv1.WorkspaceResponse_Command{Command: &iopv1.WorkspaceCommandResult{
		ExitCode: int32(res.ExitCode), Signal: res.Signal, TimedOut: res.TimedOut, Canceled: res.Canceled, Output: res.Output, Truncated: res.Truncated}}}
}

// cleanupWorkspaces ends every session of this connection (it ended).
func (s *session) cleanupWorkspaces() {
	s.mu.Lock()
	all := s.workspaces
	s.workspaces = map[string]*workspace.Session{}
	s.mu.Unlock()
	for id, ws := range all {
		rep, err := ws.Cleanup()
		s.rt.log.Info("workspace cleaned up with its connection", "request_id", id, "removed", len(rep.Removed), "left", len(rep.Left), "error", err)
	}
}
