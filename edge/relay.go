package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/sse"
	"github.com/iop-dev/iop/wire"
)

// maxCapture bounds the buffered answer kept to read usage from.
const maxCapture = 32 << 20

// relayTunnel answers from the provider's own HTTP answer: status, allowed
// headers and body as they come. For streams it passes events through
// unchanged (only re-framed), keeps a silent stream alive with comments,
// reads usage for the books, and drops the usage chunk the client did not
// ask for.
func (s *Server) relayTunnel(ctx context.Context, w http.ResponseWriter, req *request, x *exchange) {
	tn := x.tunnel
	s.metrics.tunnelBytes.WithLabelValues("upstream").Add(float64(len(req.body)))
	if rec, ok := w.(*recorder); ok {
		before := rec.written
		defer func() { s.metrics.tunnelBytes.WithLabelValues("downstream").Add(float64(rec.written - before)) }()
	}
	stop := context.AfterFunc(ctx, func() { tn.Close() }) // a client that leaves cancels the upstream
	defer stop()
	status, hdr, err := tn.Response(ctx)
	if err != nil {
		s.tunnelRefused(w, req, err)
		return
	}
	for k, vs := range hdr {
		w.Header()[k] = vs
	}
	isSSE := bytes.HasPrefix([]byte(hdr.Get("Content-Type")), []byte("text/event-stream"))
	if !req.stream || status != http.StatusOK || !isSSE {
		w.WriteHeader(status)
		var capture bytes.Buffer
		dst := io.Writer(w)
		if status == http.StatusOK {
			dst = io.MultiWriter(w, &limitWriter{&capture, maxCapture})
		}
		if _, err := io.Copy(dst, tn); err != nil {
			s.log.Debug("tunnel body ended early", "request_id", req.rid, "error", err)
			return
		}
		if status == http.StatusOK {
			if f, err := llmapi.Scan(capture.Bytes(), "usage"); err == nil && f.Raw("usage") != nil {
				s.recordUsage(req, usageFromChat(f.Raw("usage")))
			}
		}
		return
	}
	w.WriteHeader(status)
	flush(w)
	r := sse.NewReader(tn, 0)
	keep := req.snap.keepAlive
	var out []byte
	for {
		tn.SetReadDeadline(time.Now().Add(keep))
		ev, err := r.Next()
		if errors.Is(err, wire.ErrDeadlineExceeded) {
			if _, err := w.Write(keepAliveComment); err != nil {
				return
			}
			flush(w)
			continue
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				s.streamError(w, req, err)
			}
			return
		}
		if bytes.Contains(ev.Data, []byte(`"usage":{`)) {
			if u, usageOnly := streamUsage(req, ev); u != nil {
				s.recordUsage(req, u)
				if usageOnly && req.api == apiChat && !req.includeUsage {
					continue // asked for by the Edge, not by the client
				}
			}
		}
		out = sse.AppendEvent(out[:0], ev.Type, ev.Data)
		if _, err := w.Write(out); err != nil {
			return
		}
		if !r.Ready() {
			// Flush unless another whole event is already here: a burst
			// leaves in one write, a lone event at once.
			flush(w)
		}
	}
}

// streamUsage reads usage from a stream event: a Chat Completions usage
// chunk (reporting whether it carries nothing else) or a Responses
// response.completed event.
func streamUsage(req *request, ev sse.Event) (*execution.Usage, bool) {
	if req.api == apiResponses {
		var m struct {
			Type     string `json:"type"`
			Response struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"response"`
		}
		if json.Unmarshal(ev.Data, &m) != nil || m.Response.Usage == nil {
			return nil, false
		}
		return usageFromChat(m.Response.Usage), false
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	if json.Unmarshal(ev.Data, &c) != nil || len(c.Usage) == 0 || string(c.Usage) == "null" {
		return nil, false
	}
	return usageFromChat(c.Usage), len(c.Choices) == 0
}

// tunnelRefused answers a tunnel that failed before the upstream's head.
func (s *Server) tunnelRefused(w http.ResponseWriter, req *request, err error) {
	var te *nodes.TunnelError
	if !errors.As(err, &te) {
		return // the client went away
	}
	s.log.Warn("tunnel failed before the answer", "request_id", req.rid, "code", te.Code.String())
	switch te.Code {
	case nodes.TunnelCanceled:
		return
	case nodes.TunnelDeadline:
		apiError(w, http.StatusGatewayTimeout, "The request exceeded its deadline.", "timeout", nil)
	case nodes.TunnelUpstreamUnreachable, nodes.TunnelTransport, nodes.TunnelStaleGeneration:
		w.Header().Set("Retry-After", "1")
		apiError(w, http.StatusServiceUnavailable, "The model provider is unavailable.", "server_error", nil)
	default:
		apiError(w, http.StatusBadGateway, "The model provider could not serve the request.", "server_error", nil)
	}
}

// streamError ends an SSE answer with the client format's own error event.
func (s *Server) streamError(w http.ResponseWriter, req *request, err error) {
	s.log.Warn("stream ended with an error", "request_id", req.rid, "error", err)
	body := llmapi.OpenAIErrorBody("The model provider failed mid-stream.", "server_error", nil)
	var out []byte
	if req.api == apiResponses {
		out = sse.AppendEvent(nil, "error", []byte(`{"type":"error","code":"server_error","message":"The model provider failed mid-stream.","param":null}`))
	} else {
		out = sse.AppendEvent(nil, "", body)
	}
	w.Write(out)
	flush(w)
}

// relayRun answers from a normalized run through the client format's
// projector: the same projector renders the stream or the buffered body.
func (s *Server) relayRun(ctx context.Context, w http.ResponseWriter, req *request, x *exchange) {
	stop := context.AfterFunc(ctx, func() { x.run.Close() })
	defer stop()
	created := time.Now().Unix()
	var proj llmapi.Projector
	if req.api == apiResponses {
		proj = &llmapi.ResponsesProjector{ID: "resp_" + req.rid, Model: req.route.Model, Created: created}
	} else {
		proj = &llmapi.ChatProjector{ID: "chatcmpl-" + req.rid, Model: req.route.Model, Created: created, IncludeUsage: req.includeUsage}
	}
	if req.stream {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		flush(w)
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, req.snap.keepAlive)
		ev, err := x.run.Next(nctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return // the client left or the deadline passed; close cancels the run
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if req.stream {
					if _, err := w.Write(keepAliveComment); err != nil {
						return
					}
					flush(w)
				}
				continue
			}
			return // io.EOF after a terminal cannot happen here
		}
		if ev.Kind == execution.EventUsage {
			s.recordUsage(req, ev.Usage)
		}
		out := proj.Event(ev)
		if req.stream {
			if _, err := w.Write(out); err != nil {
				return
			}
			flush(w)
		}
		if !ev.Kind.Terminal() {
			continue
		}
		if req.stream {
			return
		}
		if ev.Kind == execution.EventFailed {
			status, body := llmapi.OpenAIError(ev.Failure)
			if status == 499 {
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			w.Write(body)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(proj.Body())
		return
	}
}

// limitWriter keeps at most n bytes and then drops the rest silently.
type limitWriter struct {
	buf *bytes.Buffer
	n   int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if room := l.n - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// recordUsage books reported usage: per-key usage, the key's token budget,
// and the token metrics.
func (s *Server) recordUsage(req *request, u *execution.Usage) {
	if u == nil {
		return
	}
	s.usage.tokens(req.key.Name, u)
	s.limits.spend(req.key, u.InputTokens+u.OutputTokens)
	s.metrics.tokens.WithLabelValues(req.key.Name, "input").Add(float64(u.InputTokens))
	s.metrics.tokens.WithLabelValues(req.key.Name, "output").Add(float64(u.OutputTokens))
}
