package nodes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/internal/tunnelhdr"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// TunnelRequest is a raw HTTP exchange to relay to a provider's upstream
// through its Node.
type TunnelRequest struct {
	ProviderID string
	Method     string
	// Path is the upstream path, e.g. "/v1/chat/completions"; the Node's
	// adapter allows only its API's paths.
	Path string
	// Header is filtered here and, authoritatively, on the Node:
	// credentials, cookies and hop-by-hop headers never leave. It is only
	// read, so one header may serve many requests.
	Header http.Header
	// Body streams to the upstream; nil means none. It is read on the
	// tunnel's own goroutine until EOF or an error; once the tunnel ends,
	// that goroutine stops at the next return of Body.Read (a body that can
	// block forever must be closed by its owner).
	Body io.Reader
	// Deadline is the hard deadline; zero means none.
	Deadline time.Time
	// Slot is the Edge's id for this dispatch and Target the upstream
	// model; a credential lease is bound to both.
	Slot, Target string
	// Grant carries the credential lease for a leased provider.
	Grant *execution.Grant
}

// TunnelCode classifies how a tunnel failed.
type TunnelCode uint8

// Tunnel failure codes.
const (
	TunnelRefused TunnelCode = iota + 1
	TunnelUpstreamUnreachable
	TunnelUpstreamBroken
	TunnelCanceled
	TunnelDeadline
	TunnelInternal
	TunnelStaleGeneration
	// TunnelTransport: the Node connection ended (generation fenced).
	TunnelTransport
	// TunnelAtCapacity: the Node's slots for the provider were all in use.
	TunnelAtCapacity
	// TunnelNotStarted: the Node refused the tunnel's stream before
	// anything ran (it is shutting down and its GOAWAY crossed the
	// stream, or it was at its stream limit). Nothing reached the
	// upstream, so the request may be admitted again.
	TunnelNotStarted
)

func (c TunnelCode) String() string {
	switch c {
	case TunnelRefused:
		return "refused"
	case TunnelUpstreamUnreachable:
		return "upstream_unreachable"
	case TunnelUpstreamBroken:
		return "upstream_broken"
	case TunnelCanceled:
		return "canceled"
	case TunnelDeadline:
		return "deadline_exceeded"
	case TunnelInternal:
		return "internal"
	case TunnelStaleGeneration:
		return "stale_generation"
	case TunnelTransport:
		return "transport"
	case TunnelAtCapacity:
		return "at_capacity"
	case TunnelNotStarted:
		return "not_started"
	}
	return "unknown"
}

// TunnelError is a tunnel's failed terminal.
type TunnelError struct {
	Code    TunnelCode
	Message string
}

func (e *TunnelError) Error() string {
	if e.Message == "" {
		return "nodes: tunnel: " + e.Code.String()
	}
	return "nodes: tunnel: " + e.Code.String() + ": " + e.Message
}

// Is reports a TunnelNotStarted error as ErrNotStarted.
func (e *TunnelError) Is(target error) bool {
	return target == ErrNotStarted && e.Code == TunnelNotStarted
}

func tunnelCodeFrom(c iopv1.TunnelError) TunnelCode {
	switch c {
	case iopv1.TunnelError_TUNNEL_ERROR_REFUSED:
		return TunnelRefused
	case iopv1.TunnelError_TUNNEL_ERROR_UPSTREAM_UNREACHABLE:
		return TunnelUpstreamUnreachable
	case iopv1.TunnelError_TUNNEL_ERROR_UPSTREAM_BROKEN:
		return TunnelUpstreamBroken
	case iopv1.TunnelError_TUNNEL_ERROR_CANCELED:
		return TunnelCanceled
	case iopv1.TunnelError_TUNNEL_ERROR_DEADLINE_EXCEEDED:
		return TunnelDeadline
	case iopv1.TunnelError_TUNNEL_ERROR_STALE_GENERATION:
		return TunnelStaleGeneration
	case iopv1.TunnelError_TUNNEL_ERROR_AT_CAPACITY:
		return TunnelAtCapacity
	}
	return TunnelInternal
}

// Tunnel is one raw exchange in progress. Read the head with Response,
// then the body with Read until io.EOF (a clean end) or a *TunnelError.
// Close it when done; it releases the provider slot exactly once.
type Tunnel struct {
	NodeID     string
	Generation uint64
	ProviderID string

	claim *Run // carries the slot accounting
	st    *wire.Stream

	mu     sync.Mutex
	headOK bool
	ended  bool
	err    error // terminal: nil for a clean end
	// Response's answer once it has one (not an ended ctx).
	headDone   bool
	headStatus int
	headHeader http.Header
	headErr    error
}

// OpenTunnel starts a tunnel on the node's connection of generation gen.
// It fails with ErrNotReady, ErrStaleGeneration or ErrProviderUnavailable
// without touching the Node.
func (r *Registry) OpenTunnel(ctx context.Context, nodeID string, gen uint64, req *TunnelRequest) (*Tunnel, error) {
	c, _, err := r.claim(nodeID, gen, req.ProviderID, "")
	if err != nil {
		return nil, err
	}
	t := &Tunnel{NodeID: nodeID, Generation: gen, ProviderID: req.ProviderID, claim: &Run{ProviderID: req.ProviderID, c: c}}
	st, err := c.sess.OpenStream(ctx)
	if err != nil {
		t.claim.release()
		return nil, dispatchErr("open tunnel", err)
	}
	t.st = st
	m := &iopv1.ProviderTunnelRequest{Generation: gen, ProviderId: req.ProviderID, Method: req.Method, Path: req.Path,
		Slot: req.Slot, Target: req.Target, Grant: nodewire.GrantTo(req.Grant)}
	if !req.Deadline.IsZero() {
		m.DeadlineUnixMs = req.Deadline.UnixMilli()
	}
	m.Headers = nodewire.Headers(tunnelhdr.Allowed(req.Header, tunnelhdr.Request), len(req.Header))
	if b, ok := inlineBody(req.Body); ok {
		// A small body rides in the request message, whose frame also
		// ends this direction: OPEN, request and FIN leave in one write.
		m.Body, m.InlineBody = b, true
		st.Hold()
		if err := st.WriteMessage(nodewire.Msg(m)); err != nil {
			st.Reset(wire.ResetCancel)
			t.claim.release()
			return nil, dispatchErr("open tunnel", err)
		}
		st.CloseWrite()
		return t, nil
	}
	if err := st.WriteMessage(nodewire.Msg(m)); err != nil {
		st.Reset(wire.ResetCancel)
		t.claim.release()
		return nil, dispatchErr("open tunnel", err)
	}
	go func() {
		// Owned by the tunnel: it ends with the body or with the stream.
		if req.Body != nil {
			if _, err := io.Copy(st, req.Body); err != nil {
				st.Reset(wire.ResetCancel)
				return
			}
		}
		st.CloseWrite()
	}()
	return t, nil
}

// maxInlineBody is the largest request body sent inside the request
// message.
const maxInlineBody = 48 << 10

// inlineBody returns the whole body when it is already in memory and small.
func inlineBody(r io.Reader) ([]byte, bool) {
	switch b := r.(type) {
	case nil:
		return nil, true
	case *bytes.Reader:
		if b.Len() <= maxInlineBody {
			out := make([]byte, b.Len())
			b.Read(out)
			return out, true
		}
	case *strings.Reader:
		if b.Len() <= maxInlineBody {
			out := make([]byte, b.Len())
			b.Read(out)
			return out, true
		}
	}
	return nil, false
}

// Response waits for the upstream's status and headers. A refusal or an
// unreachable upstream comes back as a *TunnelError. Once it has an
// answer, every later call returns the same one (ctx ending first is no
// answer: a later call waits again).
func (t *Tunnel) Response(ctx context.Context) (int, http.Header, error) {
	t.mu.Lock()
	if t.headDone {
		defer t.mu.Unlock()
		return t.headStatus, t.headHeader, t.headErr
	}
	t.mu.Unlock()
	status, hdr, err := t.response(ctx)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return 0, nil, err
	}
	t.mu.Lock()
	t.headDone, t.headStatus, t.headHeader, t.headErr = true, status, hdr, err
	t.mu.Unlock()
	return status, hdr, err
}

func (t *Tunnel) response(ctx context.Context) (int, http.Header, error) {
	env, err := t.st.ReadMessage(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return 0, nil, err
		}
		return 0, nil, t.fail(transportErr(err))
	}
	switch b := env.Body.(type) {
	case *iopv1.Envelope_ProviderTunnelResponse:
		// Only allowed headers reach the client, whatever the Node sent.
		h := tunnelhdr.Collect(b.ProviderTunnelResponse.GetHeaders(), tunnelhdr.Response)
		status := int(b.ProviderTunnelResponse.GetStatus())
		// A final status only: the Node's transport skips an upstream's
		// informational answers, and a 1xx written to a client would
		// leave the answer that follows it unframed.
		if status < 200 || status > 999 {
			t.st.Reset(wire.ResetProtocolError)
			return 0, nil, t.fail(&TunnelError{Code: TunnelInternal, Message: "node sent an invalid status"})
		}
		t.mu.Lock()
		t.headOK = true
		t.mu.Unlock()
		return status, h, nil
	case *iopv1.Envelope_ProviderTunnelEnd:
		return 0, nil, t.fail(endErr(b.ProviderTunnelEnd))
	}
	t.st.Reset(wire.ResetProtocolError)
	return 0, nil, t.fail(&TunnelError{Code: TunnelInternal, Message: "node sent an unexpected message"})
}

// Read reads the upstream body. It returns io.EOF after a clean end and a
// *TunnelError when the tunnel failed.
func (t *Tunnel) Read(p []byte) (int, error) {
	t.mu.Lock()
	ended, err := t.ended, t.err
	t.mu.Unlock()
	if ended {
		if err == nil {
			return 0, io.EOF
		}
		return 0, err
	}
	n, rerr := t.st.Read(p)
	switch {
	case rerr == nil:
		return n, nil
	case errors.Is(rerr, wire.ErrDeadlineExceeded):
		return n, rerr // not a terminal: the caller's read deadline passed
	case errors.Is(rerr, wire.ErrMessageNext):
		env, err := t.st.ReadMessage(context.Background())
		if err != nil {
			return n, t.fail(transportErr(err))
		}
		end := env.GetProviderTunnelEnd()
		if end == nil {
			t.st.Reset(wire.ResetProtocolError)
			return n, t.fail(&TunnelError{Code: TunnelInternal, Message: "node sent an unexpected message"})
		}
		if end.GetOk() {
			t.finish(nil)
			return n, io.EOF
		}
		return n, t.fail(endErr(end))
	case errors.Is(rerr, io.EOF):
		return n, t.fail(&TunnelError{Code: TunnelInternal, Message: "node ended the tunnel without a terminal"})
	}
	return n, t.fail(transportErr(rerr))
}

func endErr(e *iopv1.ProviderTunnelEnd) *TunnelError {
	return &TunnelError{Code: tunnelCodeFrom(e.GetError()), Message: nodewire.Note(e.GetMessage())}
}

func transportErr(err error) *TunnelError {
	var se *wire.StreamError
	if errors.As(err, &se) && !se.Remote {
		return &TunnelError{Code: TunnelCanceled, Message: "closed by the caller"}
	}
	if wire.IsRefused(err) {
		return &TunnelError{Code: TunnelNotStarted, Message: "the node refused the stream before it ran: " + err.Error()}
	}
	return &TunnelError{Code: TunnelTransport, Message: "node connection ended: " + closeReason(err)}
}

func (t *Tunnel) fail(e *TunnelError) error {
	t.finish(e)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// finish records the terminal once and releases the slot.
func (t *Tunnel) finish(e *TunnelError) {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return
	}
	t.ended = true
	if e != nil {
		t.err = e
	}
	t.mu.Unlock()
	t.claim.release()
}

// SetReadDeadline makes Read return wire.ErrDeadlineExceeded (which is not
// a terminal) when no body byte arrives before t; a zero t clears it.
func (t *Tunnel) SetReadDeadline(d time.Time) error { return t.st.SetReadDeadline(d) }

// Close ends the tunnel: if it has not ended, its stream is reset (the
// Node cancels the upstream request). Safe to call more than once.
func (t *Tunnel) Close() error {
	t.mu.Lock()
	ended := t.ended
	t.mu.Unlock()
	if !ended {
		t.st.Reset(wire.ResetCancel)
		t.finish(&TunnelError{Code: TunnelCanceled, Message: "closed by the caller"})
	}
	return nil
}
