// Package nodewire converts between the execution package's host-neutral
// types and their wire form in iopv1, for both ends of the Node <-> Edge
// link. It holds no state and performs no I/O.
package nodewire

import (
	"iter"
	"math"
	"strings"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/wire/iopv1"
)

// maxNote bounds free-text notes put on the wire.
const maxNote = 256

// Note clips s for a wire note field and keeps it valid UTF-8 (protobuf
// strings must be).
func Note(s string) string {
	if len(s) > maxNote {
		s = s[:maxNote]
	}
	return strings.ToValidUTF8(s, "")
}

// Category converts a category to its wire value.
func Category(c execution.Category) iopv1.ProviderCategory {
	switch c {
	case execution.CategoryCLI:
		return iopv1.ProviderCategory_PROVIDER_CATEGORY_CLI
	case execution.CategoryAPI:
		return iopv1.ProviderCategory_PROVIDER_CATEGORY_API
	case execution.CategoryLocal:
		return iopv1.ProviderCategory_PROVIDER_CATEGORY_LOCAL
	}
	return iopv1.ProviderCategory_PROVIDER_CATEGORY_UNSPECIFIED
}

// CategoryFrom converts a wire category; ok is false for an unknown value.
func CategoryFrom(c iopv1.ProviderCategory) (execution.Category, bool) {
	switch c {
	case iopv1.ProviderCategory_PROVIDER_CATEGORY_CLI:
		return execution.CategoryCLI, true
	case iopv1.ProviderCategory_PROVIDER_CATEGORY_API:
		return execution.CategoryAPI, true
	case iopv1.ProviderCategory_PROVIDER_CATEGORY_LOCAL:
		return execution.CategoryLocal, true
	}
	return "", false
}

// FailureClass converts a failure class to its wire value.
func FailureClass(c execution.FailureClass) iopv1.FailureClass {
	switch c {
	case execution.FailureCanceled:
		return iopv1.FailureClass_FAILURE_CLASS_CANCELED
	case execution.FailureDeadline:
		return iopv1.FailureClass_FAILURE_CLASS_DEADLINE_EXCEEDED
	case execution.FailureProvider:
		return iopv1.FailureClass_FAILURE_CLASS_PROVIDER
	case execution.FailureUnavailable:
		return iopv1.FailureClass_FAILURE_CLASS_UNAVAILABLE
	case execution.FailureInvalidRequest:
		return iopv1.FailureClass_FAILURE_CLASS_INVALID_REQUEST
	case execution.FailureTransport:
		return iopv1.FailureClass_FAILURE_CLASS_TRANSPORT
	case execution.FailureRateLimited:
		return iopv1.FailureClass_FAILURE_CLASS_RATE_LIMITED
	}
	return iopv1.FailureClass_FAILURE_CLASS_INTERNAL
}

// FailureClassFrom converts a wire failure class; an unknown value is
// Internal.
func FailureClassFrom(c iopv1.FailureClass) execution.FailureClass {
	switch c {
	case iopv1.FailureClass_FAILURE_CLASS_CANCELED:
		return execution.FailureCanceled
	case iopv1.FailureClass_FAILURE_CLASS_DEADLINE_EXCEEDED:
		return execution.FailureDeadline
	case iopv1.FailureClass_FAILURE_CLASS_PROVIDER:
		return execution.FailureProvider
	case iopv1.FailureClass_FAILURE_CLASS_UNAVAILABLE:
		return execution.FailureUnavailable
	case iopv1.FailureClass_FAILURE_CLASS_INVALID_REQUEST:
		return execution.FailureInvalidRequest
	case iopv1.FailureClass_FAILURE_CLASS_TRANSPORT:
		return execution.FailureTransport
	case iopv1.FailureClass_FAILURE_CLASS_RATE_LIMITED:
		return execution.FailureRateLimited
	}
	return execution.FailureInternal
}

// RunRequest converts a run request to its wire form.
func RunRequest(r *execution.RunRequest, generation, revision uint64) *iopv1.RunRequest {
	msgs := make([]*iopv1.RunMessage, len(r.Input.Messages))
	for i, m := range r.Input.Messages {
		msgs[i] = &iopv1.RunMessage{Role: m.Role, Content: m.Content}
	}
	out := &iopv1.RunRequest{
		RunId:          r.RunID,
		Generation:     generation,
		ConfigRevision: revision,
		ProviderId:     r.ProviderID,
		Adapter:        r.Adapter,
		Target:         r.Target,
		Input:          &iopv1.RunInput{System: r.Input.System, Messages: msgs},
		Options:        &iopv1.RunOptions{MaxOutputTokens: uint32(min(uint64(max(r.Options.MaxOutputTokens, 0)), math.MaxUint32)), Stream: r.Options.Stream},
	}
	if t := r.Options.Temperature; t != nil {
		// Saturated, not wrapped: a float's conversion out of uint32's
		// range is the platform's choice. (RunRequest.Validate refuses a
		// negative or non-finite one.)
		milli := uint32(max(min(*t*1000+0.5, math.MaxUint32), 0))
		out.Options.TemperatureMilli = &milli
	}
	if !r.Deadline.IsZero() {
		out.DeadlineUnixMs = r.Deadline.UnixMilli()
	}
	out.Grant = GrantTo(r.Grant)
	return out
}

// GrantTo converts a credential grant (nil stays nil).
func GrantTo(g *execution.Grant) *iopv1.CredentialGrant {
	if g == nil {
		return nil
	}
	return &iopv1.CredentialGrant{Lease: g.Lease, Principal: g.Principal, Route: g.Route}
}

// GrantFrom converts a wire credential grant (nil stays nil).
func GrantFrom(m *iopv1.CredentialGrant) *execution.Grant {
	if m == nil {
		return nil
	}
	return &execution.Grant{Lease: m.GetLease(), Principal: m.GetPrincipal(), Route: m.GetRoute()}
}

// RunRequestFrom converts a wire run request.
func RunRequestFrom(m *iopv1.RunRequest) *execution.RunRequest {
	r := &execution.RunRequest{
		RunID:      m.GetRunId(),
		ProviderID: m.GetProviderId(),
		Adapter:    m.GetAdapter(),
		Target:     m.GetTarget(),
		Input:      execution.Input{System: m.GetInput().GetSystem()},
		Options: execution.Options{
			MaxOutputTokens: int(m.GetOptions().GetMaxOutputTokens()),
			Stream:          m.GetOptions().GetStream(),
		},
	}
	for _, msg := range m.GetInput().GetMessages() {
		r.Input.Messages = append(r.Input.Messages, execution.Message{Role: msg.GetRole(), Content: msg.GetContent()})
	}
	if o := m.GetOptions(); o != nil && o.TemperatureMilli != nil {
		t := float64(o.GetTemperatureMilli()) / 1000
		r.Options.Temperature = &t
	}
	if ms := m.GetDeadlineUnixMs(); ms > 0 {
		r.Deadline = time.UnixMilli(ms)
	}
	r.Grant = GrantFrom(m.GetGrant())
	return r
}

// text keeps s valid UTF-8 for a protobuf string, each invalid byte
// replaced by U+FFFD (as JSON encoding replaces it on the way to the
// client): a provider's output that is not UTF-8 (a command printing
// Latin-1) is answered, where it would fail the event's marshaling and
// with it the run. Valid text is returned as it is, without a copy.
func text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// Event converts a run event to its wire form.
func Event(runID string, e execution.Event) *iopv1.RunEvent {
	out := &iopv1.RunEvent{RunId: runID}
	switch e.Kind {
	case execution.EventStarted:
		out.Event = &iopv1.RunEvent_Started{Started: &iopv1.RunStarted{Model: text(e.Model)}}
	case execution.EventDelta:
		out.Event = &iopv1.RunEvent_Delta{Delta: &iopv1.OutputDelta{Text: text(e.Text), Reasoning: e.Reasoning}}
	case execution.EventToolCall:
		tc := e.ToolCall
		if tc == nil {
			tc = &execution.ToolCall{}
		}
		out.Event = &iopv1.RunEvent_ToolCall{ToolCall: &iopv1.ToolCall{Id: text(tc.ID), Name: text(tc.Name), Arguments: text(tc.Arguments)}}
	case execution.EventUsage:
		u := e.Usage
		if u == nil {
			u = &execution.Usage{}
		}
		out.Event = &iopv1.RunEvent_Usage{Usage: Usage(*u)}
	case execution.EventCompleted:
		out.Event = &iopv1.RunEvent_Completed{Completed: &iopv1.RunCompleted{StopReason: text(e.StopReason)}}
	case execution.EventFailed:
		f := e.Failure
		if f == nil {
			f = &execution.Failure{Class: execution.FailureInternal}
		}
		out.Event = &iopv1.RunEvent_Failed{Failed: &iopv1.RunFailed{Class: FailureClass(f.Class), Message: Note(f.Message)}}
	}
	return out
}

// EventFrom converts a wire run event; ok is false when it carries no event
// this side knows.
func EventFrom(m *iopv1.RunEvent) (execution.Event, bool) {
	switch ev := m.GetEvent().(type) {
	case *iopv1.RunEvent_Started:
		return execution.Event{Kind: execution.EventStarted, Model: ev.Started.GetModel()}, true
	case *iopv1.RunEvent_Delta:
		return execution.Event{Kind: execution.EventDelta, Text: ev.Delta.GetText(), Reasoning: ev.Delta.GetReasoning()}, true
	case *iopv1.RunEvent_ToolCall:
		tc := ev.ToolCall
		return execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: tc.GetId(), Name: tc.GetName(), Arguments: tc.GetArguments()}}, true
	case *iopv1.RunEvent_Usage:
		u := UsageFrom(ev.Usage)
		return execution.Event{Kind: execution.EventUsage, Usage: &u}, true
	case *iopv1.RunEvent_Completed:
		return execution.Event{Kind: execution.EventCompleted, StopReason: ev.Completed.GetStopReason()}, true
	case *iopv1.RunEvent_Failed:
		return execution.Event{Kind: execution.EventFailed, Failure: &execution.Failure{
			Class: FailureClassFrom(ev.Failed.GetClass()), Message: Note(ev.Failed.GetMessage()),
		}}, true
	}
	return execution.Event{}, false
}

// Usage converts usage to its wire form.
func Usage(u execution.Usage) *iopv1.Usage {
	return &iopv1.Usage{
		InputTokens:       uint64(max(u.InputTokens, 0)),
		OutputTokens:      uint64(max(u.OutputTokens, 0)),
		CachedInputTokens: uint64(max(u.CachedInputTokens, 0)),
		ReasoningTokens:   uint64(max(u.ReasoningTokens, 0)),
	}
}

// UsageFrom converts wire usage, clamping values beyond int64.
func UsageFrom(u *iopv1.Usage) execution.Usage {
	c := func(v uint64) int64 { return int64(min(v, 1<<62)) }
	return execution.Usage{
		InputTokens:       c(u.GetInputTokens()),
		OutputTokens:      c(u.GetOutputTokens()),
		CachedInputTokens: c(u.GetCachedInputTokens()),
		ReasoningTokens:   c(u.GetReasoningTokens()),
	}
}

// Headers puts the header pairs of seq in their wire form. hint is the
// number of pairs expected (the header map's length will do): the Header
// messages share arrays of that size, so that a head with up to hint
// pairs costs two allocations, not one per pair and more for the slice's
// growth.
func Headers(seq iter.Seq2[string, string], hint int) []*iopv1.Header {
	hint = max(hint, 1)
	var backing []iopv1.Header
	var out []*iopv1.Header
	for k, v := range seq {
		if len(backing) == cap(backing) {
			// A new array; the pointers into the full one stay valid.
			backing = make([]iopv1.Header, 0, hint)
		}
		if out == nil {
			out = make([]*iopv1.Header, 0, hint)
		}
		backing = backing[:len(backing)+1]
		h := &backing[len(backing)-1]
		h.Name, h.Value = k, v
		out = append(out, h)
	}
	return out
}

// Msg wraps a role message body in an Envelope.
func Msg(body any) *iopv1.Envelope {
	e := &iopv1.Envelope{}
	switch b := body.(type) {
	case *iopv1.RegisterRequest:
		e.Body = &iopv1.Envelope_RegisterRequest{RegisterRequest: b}
	case *iopv1.RegisterResponse:
		e.Body = &iopv1.Envelope_RegisterResponse{RegisterResponse: b}
	case *iopv1.NodeReadyRequest:
		e.Body = &iopv1.Envelope_NodeReadyRequest{NodeReadyRequest: b}
	case *iopv1.NodeReadyResponse:
		e.Body = &iopv1.Envelope_NodeReadyResponse{NodeReadyResponse: b}
	case *iopv1.ConfigUpdate:
		e.Body = &iopv1.Envelope_ConfigUpdate{ConfigUpdate: b}
	case *iopv1.ConfigUpdateAck:
		e.Body = &iopv1.Envelope_ConfigUpdateAck{ConfigUpdateAck: b}
	case *iopv1.ProviderSnapshotUpdate:
		e.Body = &iopv1.Envelope_ProviderSnapshotUpdate{ProviderSnapshotUpdate: b}
	case *iopv1.RunRequest:
		e.Body = &iopv1.Envelope_RunRequest{RunRequest: b}
	case *iopv1.RunEvent:
		e.Body = &iopv1.Envelope_RunEvent{RunEvent: b}
	case *iopv1.CancelRun:
		e.Body = &iopv1.Envelope_CancelRun{CancelRun: b}
	case *iopv1.NodeCommandRequest:
		e.Body = &iopv1.Envelope_NodeCommandRequest{NodeCommandRequest: b}
	case *iopv1.NodeCommandResult:
		e.Body = &iopv1.Envelope_NodeCommandResult{NodeCommandResult: b}
	case *iopv1.ProviderTunnelRequest:
		e.Body = &iopv1.Envelope_ProviderTunnelRequest{ProviderTunnelRequest: b}
	case *iopv1.ProviderTunnelResponse:
		e.Body = &iopv1.Envelope_ProviderTunnelResponse{ProviderTunnelResponse: b}
	case *iopv1.ProviderTunnelEnd:
		e.Body = &iopv1.Envelope_ProviderTunnelEnd{ProviderTunnelEnd: b}
	case *iopv1.WorkspaceRequest:
		e.Body = &iopv1.Envelope_WorkspaceRequest{WorkspaceRequest: b}
	case *iopv1.WorkspaceResponse:
		e.Body = &iopv1.Envelope_WorkspaceResponse{WorkspaceResponse: b}
	case *iopv1.WorkspaceCancel:
		e.Body = &iopv1.Envelope_WorkspaceCancel{WorkspaceCancel: b}
	case *iopv1.Error:
		e.Body = &iopv1.Envelope_Error{Error: b}
	default:
		panic("nodewire: Msg of an unknown body type")
	}
	return e
}
