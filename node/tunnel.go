package node

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/internal/tunnelhdr"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// tunnel relays one raw HTTP exchange for the Edge: the request body
// arrives as stream data, the upstream's answer leaves as a response head,
// body data, and exactly one ProviderTunnelEnd. It ends on the upstream's
// end or error, a reset of the stream (the Edge cancelled), the deadline or
// the connection's end; never on silence.
func (s *session) tunnel(st *wire.Stream, m *iopv1.ProviderTunnelRequest) {
	out := &tunnelWriter{st: st}
	if m.GetGeneration() != s.gen {
		out.end(iopv1.TunnelError_TUNNEL_ERROR_STALE_GENERATION, "generation fenced")
		return
	}
	tn, h, note := s.admitTunnel(m.GetProviderId())
	if tn == nil {
		code := iopv1.TunnelError_TUNNEL_ERROR_REFUSED
		if note == noteAtCapacity {
			code = iopv1.TunnelError_TUNNEL_ERROR_AT_CAPACITY
		}
		out.end(code, note)
		return
	}
	// The slot is free before the terminal leaves: the Edge frees its own
	// slot when it reads the terminal and may send the next tunnel at
	// once, which must not find this one still counted.
	released := false // release runs on this goroutine only
	release := func() {
		if !released {
			released = true
			s.releaseTunnel(m.GetProviderId())
		}
	}
	defer release()

	// One context carries both the cancel and the deadline. A reset by the
	// Edge, or the connection's end, cancels it through the stream (the
	// stream ends abortively when its session closes), so it needs no
	// parent: deriving it from the session's context registered every
	// call with that one context, under its lock, only to be told what
	// OnAbort already tells.
	var ctx context.Context
	var cancel context.CancelFunc
	if ms := m.GetDeadlineUnixMs(); ms > 0 {
		ctx, cancel = context.WithDeadline(context.Background(), time.UnixMilli(ms))
	} else {
		ctx, cancel = context.WithCancel(context.Background())
	}
	defer cancel()
	defer st.OnAbort(cancel)()
	ctx, clearSecret, err := s.openGrant(ctx, h, nodewire.GrantFrom(m.GetGrant()), m.GetSlot(), m.GetTarget())
	if err != nil {
		release()
		out.end(iopv1.TunnelError_TUNNEL_ERROR_REFUSED, errLeaseRefused.Error())
		return
	}
	defer clearSecret()

	// Only allowed headers reach the adapter, whatever the Edge sent.
	header := tunnelhdr.Collect(m.GetHeaders(), tunnelhdr.Request)
	req := &execution.TunnelRequest{
		ProviderID: m.GetProviderId(),
		Method:     m.GetMethod(),
		Path:       m.GetPath(),
		Header:     header,
		Body:       &streamBody{st: st},
	}
	if m.GetInlineBody() {
		req.Body = bytes.NewReader(m.GetBody())
	}
	if len(h.models) > 0 {
		// A provider limited to some models: the model the body names is
		// checked, so a streamed body is read whole first.
		body := m.GetBody()
		if !m.GetInlineBody() {
			if ms := m.GetDeadlineUnixMs(); ms > 0 {
				st.SetReadDeadline(time.UnixMilli(ms))
			}
			if body, err = readBounded(req.Body, maxCheckedBody); err != nil {
				release()
				out.end(tunnelCode(ctx, err, false), "request body: "+failureNote(err))
				return
			}
		}
		if note := checkModel(h, m.GetTarget(), body); note != "" {
			release()
			out.end(iopv1.TunnelError_TUNNEL_ERROR_REFUSED, note)
			return
		}
		if !m.GetInlineBody() {
			req.Body = bytes.NewReader(body)
		}
	}
	err = s.rt.contain("tunnel", m.GetProviderId(), func() error { return tn.Tunnel(ctx, req, out) })
	release()
	if err == nil {
		out.finish(&iopv1.ProviderTunnelEnd{Ok: true})
		return
	}
	code := tunnelCode(ctx, err, out.headSent())
	if code == iopv1.TunnelError_TUNNEL_ERROR_UPSTREAM_UNREACHABLE {
		s.suspect(m.GetProviderId())
	}
	out.end(code, failureNote(err))
}

const noteAtCapacity = "provider at capacity"

// maxCheckedBody bounds a tunnel body the Node reads whole to check its
// model (see checkModel): the Edge's own default bound is 16 MiB.
const maxCheckedBody = 64 << 20

var errBodyTooLarge = execution.Failf(execution.FailureInvalidRequest, "request body above %d bytes", maxCheckedBody)

// readBounded reads r whole, at most limit bytes.
func readBounded(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err == nil && int64(len(b)) > limit {
		return nil, errBodyTooLarge
	}
	return b, err
}

// modelKey is the key checkModel scans for, a package variable so that
// the scan allocates no argument slice.
var modelKey = []string{"model"}

// checkModel enforces a limited provider's models on a tunnel, as
// admitRun does on a run: the Node's allow-list binds the requests the
// Edge sends, not only the configuration it sends. A body must be a JSON
// object whose one top-level "model" is the tunnel's target, and the
// provider must offer that model; a request without a body (a GET of a
// stored response, of the model list) names no model. The reason it
// refuses is returned, "" when it admits. Scan refuses a duplicated or
// case-folded "model", so the upstream reads the model checked here.
func checkModel(h *hosted, target string, body []byte) string {
	if len(body) == 0 {
		return ""
	}
	f, err := llmapi.Scan(body, modelKey...)
	switch {
	case err != nil:
		return "request body is not one JSON object with one model"
	case !f.Has("model"):
		return "request body names no model"
	case !f.StringIs("model", target):
		return "request body names a model other than the tunnel's target"
	case !h.allows(target):
		return "model not offered by this provider"
	}
	return ""
}

func (s *session) admitTunnel(id string) (execution.Tunneler, *hosted, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.plan.providers[id]
	if h == nil {
		return nil, nil, "provider not hosted"
	}
	tn, ok := h.p.(execution.Tunneler)
	if !ok {
		return nil, nil, "provider has no raw tunnel"
	}
	if s.inflight[id] >= h.cap {
		return nil, nil, noteAtCapacity
	}
	s.inflight[id]++
	return tn, h, ""
}

func (s *session) releaseTunnel(id string) {
	s.mu.Lock()
	if n := s.inflight[id]; n > 0 {
		s.inflight[id] = n - 1
	}
	s.mu.Unlock()
}

func failureNote(err error) string {
	var f *execution.Failure
	if errors.As(err, &f) {
		return nodewire.Note(f.Message)
	}
	return "failed"
}

func tunnelCode(ctx context.Context, err error, headSent bool) iopv1.TunnelError {
	f := execution.Classify(ctx, err)
	switch f.Class {
	case execution.FailureCanceled, execution.FailureTransport:
		return iopv1.TunnelError_TUNNEL_ERROR_CANCELED
	case execution.FailureDeadline:
		return iopv1.TunnelError_TUNNEL_ERROR_DEADLINE_EXCEEDED
	case execution.FailureInvalidRequest:
		if !headSent {
			return iopv1.TunnelError_TUNNEL_ERROR_REFUSED
		}
	case execution.FailureUnavailable, execution.FailureRateLimited:
		if !headSent {
			return iopv1.TunnelError_TUNNEL_ERROR_UPSTREAM_UNREACHABLE
		}
	case execution.FailureInternal:
		return iopv1.TunnelError_TUNNEL_ERROR_INTERNAL
	}
	return iopv1.TunnelError_TUNNEL_ERROR_UPSTREAM_BROKEN
}

// streamBody reads the request body from the stream's data.
type streamBody struct{ st *wire.Stream }

var errTunnelProtocol = errors.New("node: message inside a tunnel request body")

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.st.Read(p)
	if errors.Is(err, wire.ErrMessageNext) {
		b.st.Reset(wire.ResetProtocolError)
		return n, errTunnelProtocol
	}
	return n, err
}

// tunnelWriter sends the upstream's answer on the stream. A JSON answer's
// head, body and end are held back and leave together, in one write: a
// JSON document is of use only whole (the Edge reads it whole before it
// answers). Anything else (an event stream, NDJSON) leaves as it comes,
// except that its head waits for the first body bytes, at most headHold:
// a provider sends its first event right after its head as a rule, and
// the two then cost the Edge one wake-up instead of two.
type tunnelWriter struct {
	st   *wire.Stream
	mu   sync.Mutex
	head bool
	done bool
	// holding is set while a streamed answer's head waits for its body;
	// its timer flushes the head alone if the body is slow.
	holding *time.Timer
	// hold, when set, replaces headHold (tests).
	hold time.Duration
}

// headHold bounds how long a streamed answer's head waits for its first
// body bytes. The Edge starts the client's answer, and its keep-alive
// comments, on the head, so a provider slow to its first event still has
// its head passed on at once.
const headHold = 20 * time.Millisecond

var errHeadTwice = errors.New("node: tunnel head written twice")

func (w *tunnelWriter) headSent() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.head
}

// WriteHead implements execution.TunnelWriter.
func (w *tunnelWriter) WriteHead(status int, header http.Header) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.head || w.done {
		return errHeadTwice
	}
	w.head = true
	// Held until finish for JSON, else until the first body bytes or
	// headHold; waiting for send credit flushes earlier.
	w.st.Hold()
	if mt, _, _ := strings.Cut(header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
		w.holding = time.AfterFunc(cmp.Or(w.hold, headHold), w.st.Flush)
	}
	// Only allowed headers leave, whatever the adapter passed.
	resp := &iopv1.ProviderTunnelResponse{Status: uint32(status),
		Headers: nodewire.Headers(tunnelhdr.Allowed(header, tunnelhdr.Response), len(header))}
	return w.st.WriteMessage(nodewire.Msg(resp))
}

// Write implements execution.TunnelWriter.
func (w *tunnelWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	head, holding := w.head, w.holding
	w.holding = nil
	w.mu.Unlock()
	if !head {
		return 0, io.ErrClosedPipe
	}
	n, err := w.st.Write(p)
	if holding != nil {
		// The head leaves with the first body bytes.
		holding.Stop()
		w.st.Flush()
	}
	return n, err
}

func (w *tunnelWriter) end(code iopv1.TunnelError, msg string) {
	w.finish(&iopv1.ProviderTunnelEnd{Error: code, Message: nodewire.Note(msg)})
}

// finish writes the one terminal and ends the direction.
func (w *tunnelWriter) finish(e *iopv1.ProviderTunnelEnd) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	w.done = true
	if w.holding != nil {
		w.holding.Stop() // CloseWrite ends the hold
		w.holding = nil
	}
	w.st.WriteMessage(nodewire.Msg(e))
	w.st.CloseWrite()
}
