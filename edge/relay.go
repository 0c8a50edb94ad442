package edge

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/sse"
	"github.com/iop-dev/iop/wire"
)

// maxCapture bounds the buffered answer kept to read usage from.
const maxCapture = 32 << 20

// maxDecoded bounds what the Edge holds of a decoded answer (translated,
// or from a run): the bytes of a whole answer read to be decoded, and of
// a streamed one what the client format's renderer keeps: its tool
// arguments, and for a buffered body or a Responses stream (whose last
// events repeat what came before) its text and signatures too. A Chat or
// Anthropic stream keeps no text, so its text is not counted. An answer
// beyond it ends with the error tooLarge gives, so a provider that never
// stops (a local model generating without a token limit, a broken
// upstream, a faulty Node) costs the Edge a bounded amount of memory.
const maxDecoded = 32 << 20

// blockCost is what a block is charged against maxDecoded beyond its
// bytes: what the decoder and the renderer keep for it, so that a stream
// of tiny blocks (text and reasoning alternating a byte at a time) is
// bounded too.
const blockCost = 256

// tooLarge is the error that ends a decoded answer beyond its bound.
func (s *Server) tooLarge() *llmapi.APIError {
	return &llmapi.APIError{Status: http.StatusBadGateway, Type: "api_error",
		Message: fmt.Sprintf("The model provider's answer exceeds the gateway's %d MiB limit.", s.maxDecoded>>20)}
}

// answerKeys are the top-level keys booked from a whole answer.
var answerKeys = []string{"usage", "id"}

// answerBufs holds the buffers whole JSON answers are read into; one kept
// is at most maxPooledAnswer.
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxPooledAnswer = 256 << 10

func putAnswerBuf(b *bytes.Buffer) {
	if b.Cap() <= maxPooledAnswer {
		b.Reset()
		answerBufs.Put(b)
	}
}

// relayTunnel answers from the provider's own HTTP answer: status, allowed
// headers and body as they come. For streams it passes events through
// unchanged (only re-framed), keeps a silent stream alive (keepAliveFor),
// reads usage for the books, and drops the usage chunk the client did not
// ask for. A successful answer of the other kind than asked (a provider
// that ignores the stream flag) is decoded and rendered as asked. A
// stream whose provider is slow to send its head begins with a head of
// the Edge's instead (awaitHead), and a failure that head brings is the
// stream's error event (failHead).
func (s *Server) relayTunnel(ctx context.Context, w http.ResponseWriter, req *request, x *exchange) {
	tn := x.tunnel
	s.metrics.upstreamBytes().Add(float64(len(req.body)))
	if rec, ok := w.(*recorder); ok {
		before := rec.written
		defer func() { s.metrics.downstreamBytes().Add(float64(rec.written - before)) }()
	}
	stop := context.AfterFunc(ctx, func() { tn.Close() }) // a client that leaves cancels the upstream
	defer stop()
	// begun: the client's stream began before the provider's head came
	// (awaitHead), with a head of the Edge's (200, an event stream) and
	// keep-alives that fit anywhere in it (Anthropic's ping, a comment):
	// the provider's own start comes later, as its stream's first event.
	// A Responses stream waits for the provider's head instead: nothing
	// of the format may come before the provider's response.created, and
	// its head would start Codex's idle timeout, which counts no comment
	// (Codex waits for a head without one).
	begun := false
	var keepAlive func() bool
	if req.api != apiResponses {
		keepAlive = func() bool {
			if !begun {
				begun = true
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Cache-Control", "no-cache")
				w.WriteHeader(http.StatusOK)
			}
			_, err := w.Write(keepAliveFor(req.api))
			flush(w)
			return err == nil
		}
	}
	status, hdr, err := awaitHead(ctx, req, tn, keepAlive)
	// em renders what the Edge itself says in a begun stream (a failure,
	// or the answer of a provider that ignored the stream flag).
	var em *emitter
	if begun {
		em = newEmitter(s, w, req)
		em.resume()
		defer em.finish()
	}
	if !s.headCame(ctx, w, req, x, em, status, hdr, err) {
		return
	}
	ct := hdr.Get("Content-Type")
	isSSE := sse.Streamed(ct, false)
	if begun && status != http.StatusOK {
		refuseHead(w, req, em, tn, status, hdr)
		return
	}
	if f, ok := clientFormat(req.api); ok && status == http.StatusOK && sse.Streamed(ct, req.stream) != req.stream {
		// The provider ignored the stream flag: its answer is of the
		// client's own format, so it is decoded and rendered as asked
		// instead of passed on in a shape the client cannot read (what
		// the canonical form does not carry is lost; the answer keeps the
		// provider's id, as a tunnelled one does).
		s.relayDecoded(ctx, w, req, x, !req.stream, f, true, em)
		return
	}
	if !begun {
		for k, vs := range hdr {
			w.Header()[k] = vs
		}
	}
	if !req.stream || status != http.StatusOK || !isSSE {
		if !isSSE {
			// A JSON answer is read whole (bounded) and checked before the
			// client sees it, so a broken or malformed one becomes one
			// clean error instead of a truncated body.
			buf := answerBufs.Get().(*bytes.Buffer)
			defer putAnswerBuf(buf)
			_, err := buf.ReadFrom(io.LimitReader(tn, maxCapture+1))
			body := buf.Bytes()
			whole := err == nil && len(body) <= maxCapture
			var f llmapi.Fields
			var serr error
			if whole {
				// One pass validates the answer and finds what is booked.
				f, serr = llmapi.Scan(body, answerKeys...)
			}
			switch {
			case err != nil && deadlinePassed(ctx):
				fail(w, req.api, http.StatusGatewayTimeout, "timeout", "The request exceeded its deadline.", nil)
				return
			case err != nil:
				if ctx.Err() == nil {
					fail(w, req.api, http.StatusBadGateway, "api_error", "The model provider's answer broke off.", nil)
				}
				return
			case errors.Is(serr, llmapi.ErrNotJSON):
				s.log.Warn("provider answered malformed JSON", "request_id", req.rid, "status", status)
				fail(w, req.api, http.StatusBadGateway, "api_error", "The model provider's answer was malformed.", nil)
				return
			}
			w.Header().Del("Content-Length")
			if whole && len(body) > 0 { // an empty body (a 204) gets none
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			}
			w.WriteHeader(status)
			w.Write(body)
			out := int64(len(body))
			if len(body) > maxCapture {
				n, _ := io.Copy(w, tn) // beyond the capture bound: passed on unchecked
				out += n
			}
			req.passedThrough(status, out)
			if status == http.StatusOK && whole && serr == nil {
				s.bookFields(req, x, &f)
			}
			return
		}
		// An error status sent as an event stream (or an embeddings
		// answer sent as one) is passed on as it comes; it reports no
		// usage.
		w.WriteHeader(status)
		n, err := io.Copy(w, tn)
		if err != nil {
			s.log.Debug("tunnel body ended early", "request_id", req.rid, "error", err)
		}
		req.passedThrough(status, n)
		return
	}
	if !begun {
		w.WriteHeader(status)
	}
	req.answered = true
	head := streamHead{w: w, pending: !begun}
	r := sse.NewReader(tn, 0)
	defer r.Release()
	keep := req.snap.keepAlive
	// out holds the events of a burst not yet written: a burst (the events
	// the reader already holds) leaves in one Write and one flush. It is
	// empty whenever the next NextShared may read (more is false), so no
	// event waits on the provider's next bytes.
	bp := burstBufs.Get().(*[]byte)
	out := (*bp)[:0]
	defer func() {
		if cap(out) <= 2*maxBurst {
			*bp = out[:0]
			burstBufs.Put(bp)
		}
	}()
	more := false // the reader holds another whole event: the next one needs no read
	terminated := false
	var created createdResponse // a Responses stream's response, once created
	// Usage events are cumulative snapshots (a Chat stream with
	// continuous usage stats repeats it on every chunk; Anthropic's
	// message_delta totals the output so far): only the last is booked,
	// once, however the stream ends, as on the translate path.
	var usage *execution.Usage
	defer func() {
		if usage != nil {
			s.recordUsage(req, usage)
		}
		req.cut = !terminated
	}()
	for {
		if !more || head.pending {
			// Only a read waits, so only then is the deadline moved.
			tn.SetReadDeadline(time.Now().Add(head.wait(keep)))
		}
		ev, err := r.NextShared() // nothing below keeps ev past this turn
		if errors.Is(err, wire.ErrDeadlineExceeded) {
			keep := keepAliveFor(req.api)
			if created.created && !terminated && !head.pending {
				keep = created.heartbeat()
			}
			if !head.idle(keep) {
				return
			}
			continue
		}
		if err == io.EOF {
			if !terminated {
				// The provider's stream ended without its last event.
				s.streamError(w, req, out, &created, errors.New("the provider's stream ended without its terminal event"))
			}
			return
		}
		if err != nil {
			if ctx.Err() == nil || deadlinePassed(ctx) {
				s.streamError(w, req, out, &created, err)
			}
			return
		}
		// One pass checks the event and finds whether it carries usage
		// (Chat Completions' last chunk, Responses' response.completed,
		// Anthropic's message_start and message_delta).
		ok, hasUsage := true, false
		if string(ev.Data) != "[DONE]" {
			ok, hasUsage = llmapi.ValidFind(ev.Data, "usage")
		}
		if deltaEvent(ev) {
			req.estOut++ // the estimate's rule: a delta is a token
		}
		if !ok {
			// A malformed event is not passed on: the stream ends with the
			// API's error event, and the upstream call is cancelled.
			s.streamError(w, req, out, &created, errors.New("the provider sent a malformed event"))
			return
		}
		terminated = terminated || streamTerminal(req.api, ev)
		if req.api == apiResponses {
			if created.note(ev) {
				s.rememberResponse(req, x, created.id)
			}
		}
		pass := true
		if hasUsage {
			if u, usageOnly := streamUsage(req, ev, usage); u != nil {
				usage = u
				// A usage chunk asked for by the Edge, not by the client,
				// is not passed on.
				pass = !(usageOnly && req.api == apiChat && !req.includeUsage)
			}
		}
		if pass {
			data := ev.Data
			if created.shift > 0 { // heartbeats went: the provider's numbers move on
				data = created.renumber(data)
			}
			out = sse.AppendEvent(out, ev.Type, data)
		}
		more = r.Ready()
		if head.pending || !more || len(out) >= maxBurst {
			// Write and flush unless another whole event is already here:
			// a burst leaves in one write, a lone event at once. The first
			// event never waits for a burst behind it: the time to the
			// first token is the figure a streaming client feels most.
			if len(out) > 0 {
				if _, err := w.Write(out); err != nil {
					return
				}
				out = out[:0]
			}
			head.flush()
		}
	}
}

// maxBurst bounds the events a streamed answer holds back for one write.
const maxBurst = 32 << 10

// passedThrough notes a provider's whole answer of n bytes passed through
// with status, for chargeEstimate: a successful one is answered, its
// output estimated at a token per four bytes (none for embeddings, which
// generate no output).
func (req *request) passedThrough(status int, n int64) {
	if status != http.StatusOK {
		return
	}
	req.answered = true
	if req.api != apiEmbeddings {
		req.estOut += (n + 3) / 4
	}
}

// burstBufs holds the buffers a streamed answer's bursts are written from.
var burstBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// createdResponse follows a Responses stream passed through: the
// response its response.created event named, and the sequence number the
// next event takes, so that a stream the provider breaks off ends with
// that response's failure, and a silent one is kept alive with
// response.in_progress events (heartbeat), which Codex's idle timeout
// counts where it counts no comment. The provider's events after a
// heartbeat are renumbered to follow it: the sequence stays one.
type createdResponse struct {
	id      string
	created bool
	next    int // the sequence number after the last event passed
	// model and createdAt are the created response's, for heartbeats.
	model     string
	createdAt int64
	// shift is how many heartbeats the stream holds: each later event's
	// sequence_number is the provider's plus shift.
	shift int
}

// note follows ev, an event passed on; it reports whether ev created the
// response.
func (c *createdResponse) note(ev sse.Event) bool {
	c.next++
	if ev.Type != "response.created" || c.created {
		return false
	}
	var m struct {
		Seq      int `json:"sequence_number"`
		Response struct {
			ID        string `json:"id"`
			Model     string `json:"model"`
			CreatedAt int64  `json:"created_at"`
		} `json:"response"`
	}
	if json.Unmarshal(ev.Data, &m) != nil {
		return false
	}
	c.id, c.created, c.next = m.Response.ID, true, m.Seq+1
	c.model, c.createdAt = m.Response.Model, m.Response.CreatedAt
	return true
}

// heartbeat returns a response.in_progress event for the created
// response, as it was created (no output), numbered next; the events
// after it are renumbered to follow it.
func (c *createdResponse) heartbeat() []byte {
	// The map holds strings and numbers only: Marshal cannot fail.
	b, _ := json.Marshal(map[string]any{
		"type": "response.in_progress", "sequence_number": c.next,
		"response": map[string]any{
			"id": c.id, "object": "response", "created_at": c.createdAt, "status": "in_progress", "model": c.model,
			"output": []any{}, "error": nil, "incomplete_details": nil, "usage": nil,
		},
	})
	c.next++
	c.shift++
	return sse.AppendEvent(nil, "response.in_progress", b)
}

// renumber returns data, a provider's event passed on after a
// heartbeat, with its sequence_number moved past the heartbeats before
// it; data itself when it has no number.
func (c *createdResponse) renumber(data []byte) []byte {
	f, err := llmapi.Scan(data, "sequence_number")
	if err != nil {
		return data
	}
	n, err := strconv.ParseInt(string(f.Raw("sequence_number")), 10, 64)
	if err != nil {
		return data
	}
	return f.Splice("sequence_number", strconv.AppendInt(nil, n+int64(c.shift), 10))
}

// bookFields records the usage (and a Responses id) found in a scanned
// answer.
func (s *Server) bookFields(req *request, x *exchange, f *llmapi.Fields) {
	if f.Raw("usage") != nil {
		s.recordUsage(req, readUsage(f.Raw("usage")))
	}
	if id, ok := f.String("id"); ok && req.api == apiResponses {
		s.rememberResponse(req, x, id)
	}
}

// rememberResponse records a Responses id for the request's key, for
// GET /v1/responses/{id} and previous_response_id.
func (s *Server) rememberResponse(req *request, x *exchange, id string) {
	if s.responses.remember(id, x.lease.NodeID, x.lease.ProviderID, req.key.Name) {
		s.log.Warn("provider returned a Responses id another key's response holds; not remembered", "request_id", req.rid, "provider", x.lease.ProviderID)
	}
}

// streamUsage reads the usage snapshot a stream event carries, given the
// stream's latest one (prev, nil before any): a Chat Completions usage
// chunk (reporting whether it carries nothing else), a Responses
// response.completed (or incomplete, or failed) event, or an Anthropic
// message_start or message_delta. It returns nil for an event without
// usage.
func streamUsage(req *request, ev sse.Event, prev *execution.Usage) (*execution.Usage, bool) {
	if req.api == apiMessages {
		// message_start carries the input (and an output of one or so),
		// message_delta the output so far, and in newer API versions the
		// input again; both are totals, not increments.
		var m struct {
			Message struct {
				Usage json.RawMessage `json:"usage"`
			} `json:"message"`
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(ev.Data, &m) != nil {
			return nil, false
		}
		var u struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
			CacheRead    int64 `json:"cache_read_input_tokens"`
			CacheWrite   int64 `json:"cache_creation_input_tokens"`
		}
		// Anthropic's input_tokens leaves out the cache's reads and
		// writes; the prompt is all three (as readUsage counts it).
		switch ev.Type {
		case "message_start":
			if json.Unmarshal(m.Message.Usage, &u) != nil {
				return nil, false
			}
			return &execution.Usage{InputTokens: llmapi.SumTokens(u.InputTokens, u.CacheRead, u.CacheWrite), OutputTokens: u.OutputTokens, CachedInputTokens: u.CacheRead}, false
		case "message_delta":
			if json.Unmarshal(m.Usage, &u) != nil {
				return nil, false
			}
			next := execution.Usage{}
			if prev != nil {
				next = *prev
			}
			next.OutputTokens = u.OutputTokens
			if u.InputTokens != 0 { // absent: message_start's stands; negative: impossible
				next.InputTokens, next.CachedInputTokens = llmapi.SumTokens(u.InputTokens, u.CacheRead, u.CacheWrite), u.CacheRead
			}
			return &next, false
		}
		return nil, false
	}
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
		return readUsage(m.Response.Usage), false
	}
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   json.RawMessage   `json:"usage"`
	}
	if json.Unmarshal(ev.Data, &c) != nil || len(c.Usage) == 0 || string(c.Usage) == "null" {
		return nil, false
	}
	return readUsage(c.Usage), len(c.Choices) == 0
}

// failHead answers ae, a provider's failure before its answer could be
// read: with ae's status, or, when em began the client's stream already
// (awaitHead), as the stream's error event, the request counted under
// the outcome that status would have had (the 200 says nothing of it).
func failHead(w http.ResponseWriter, req *request, em *emitter, ae *llmapi.APIError) {
	if em == nil {
		fail(w, req.api, ae.Status, ae.Type, ae.Message, nil)
		return
	}
	if rec, ok := w.(*recorder); ok {
		rec.outcome = statusOutcome(ae.Status)
	}
	em.event(llmapi.Event{Kind: llmapi.EvError, Err: ae})
}

// headCame takes what awaitHead brought: a client that went away is
// answered nothing, a tunnel's failure its error (failHead); a head is
// noted (a refusal cools the provider, its request id is kept). It
// reports whether the head came.
func (s *Server) headCame(ctx context.Context, w http.ResponseWriter, req *request, x *exchange, em *emitter, status int, hdr http.Header, err error) bool {
	switch {
	case errors.Is(err, errClientLeft):
		return false
	case err != nil:
		if ae, ok := s.tunnelFailure(ctx, req, err); ok {
			failHead(w, req, em, ae)
		}
		return false
	}
	s.noteRefusal(req, x, status, hdr)
	req.providerRID = providerRequestID(hdr)
	return true
}

// refuseHead answers a provider's error status in the client's terms
// (providerError, from the first 64 KiB of its body), with the
// provider's Retry-After where the answer is still a status (em nil).
func refuseHead(w http.ResponseWriter, req *request, em *emitter, body io.Reader, status int, hdr http.Header) {
	b, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	ae := providerError(status, b)
	if v := hdr.Get("Retry-After"); v != "" && em == nil && (ae.Status == http.StatusTooManyRequests || ae.Status == http.StatusServiceUnavailable) {
		w.Header().Set("Retry-After", retryAfter(v))
	}
	failHead(w, req, em, ae)
}

// tunnelFailure is the error a tunnel that failed before its answer's
// head is answered with; ok is false when no one is there to answer (the
// client went away or cancelled).
func (s *Server) tunnelFailure(ctx context.Context, req *request, err error) (ae *llmapi.APIError, ok bool) {
	if deadlinePassed(ctx) {
		// The request's hard deadline closed the tunnel: the client is
		// still there and gets its one answer.
		return timeoutEvent.Err, true
	}
	var te *nodes.TunnelError
	if !errors.As(err, &te) {
		return nil, false // the client went away
	}
	s.log.Warn("tunnel failed before the answer", "request_id", req.rid, "code", te.Code.String())
	switch te.Code {
	case nodes.TunnelCanceled:
		return nil, false
	case nodes.TunnelDeadline:
		return timeoutEvent.Err, true
	case nodes.TunnelUpstreamUnreachable, nodes.TunnelTransport, nodes.TunnelStaleGeneration, nodes.TunnelAtCapacity, nodes.TunnelNotStarted:
		return &llmapi.APIError{Status: http.StatusServiceUnavailable, Type: "overloaded", Message: "The model provider is unavailable."}, true
	}
	return &llmapi.APIError{Status: http.StatusBadGateway, Type: "api_error", Message: "The model provider could not serve the request."}, true
}

// deadlinePassed reports whether the request's own hard deadline ended
// ctx (as opposed to the client leaving, which cancels it).
func deadlinePassed(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// timeoutEvent ends an answer whose hard deadline passed.
var timeoutEvent = llmapi.Event{Kind: llmapi.EvError, Err: &llmapi.APIError{Status: http.StatusGatewayTimeout, Type: "timeout", Message: "The request exceeded its deadline."}}

// streamTerminal reports whether a passed-through event ends its stream
// in the client's API (an answer's last event or the API's error event).
func streamTerminal(a api, ev sse.Event) bool {
	switch a {
	case apiMessages:
		return ev.Type == "message_stop" || ev.Type == "error"
	case apiResponses:
		return ev.Type == "response.completed" || ev.Type == "response.failed" || ev.Type == "response.incomplete" || ev.Type == "error"
	}
	return string(ev.Data) == "[DONE]" || bytes.HasPrefix(ev.Data, []byte(`{"error"`))
}

// deltaEvent reports whether ev counts as a token in the estimate of a
// stream passed through (chargeEstimate): a delta event (Anthropic's
// content_block_delta, a Responses event named *.delta), or, in a stream
// that names no event types (Chat Completions), any event but [DONE].
func deltaEvent(ev sse.Event) bool {
	if ev.Type == "" {
		return string(ev.Data) != "[DONE]"
	}
	return ev.Type == "content_block_delta" || strings.HasSuffix(ev.Type, ".delta")
}

// streamError ends an SSE answer with the client format's own error event:
// for a Responses stream whose response was created, that response's
// failure, its terminal (Codex reads a bare error event as a broken
// stream). The events in pending (not yet written) leave first, in the
// same write.
func (s *Server) streamError(w http.ResponseWriter, req *request, pending []byte, created *createdResponse, err error) {
	s.log.Warn("stream ended with an error", "request_id", req.rid, "error", err)
	out := pending
	switch {
	case req.api == apiResponses && created.created:
		// The map holds strings and numbers only: Marshal cannot fail.
		failed, _ := json.Marshal(map[string]any{
			"type": "response.failed", "sequence_number": created.next,
			"response": map[string]any{
				"id": created.id, "object": "response", "status": "failed", "model": req.route.Model, "output": []any{},
				"error":              map[string]any{"code": "server_error", "message": "The model provider failed mid-stream."},
				"incomplete_details": nil, "usage": nil,
			},
		})
		out = sse.AppendEvent(out, "response.failed", failed)
	case req.api == apiResponses:
		out = sse.AppendEvent(out, "error", []byte(`{"type":"error","code":"server_error","message":"The model provider failed mid-stream.","param":null}`))
	case req.api == apiMessages:
		out = sse.AppendEvent(out, "error", llmapi.AnthropicErrorBody("api_error", "The model provider failed mid-stream.", req.rid))
	default:
		out = sse.AppendEvent(out, "", llmapi.OpenAIErrorBody("The model provider failed mid-stream.", "server_error", nil))
	}
	w.Write(out)
	flush(w)
}

// renderer returns the client format's renderer for req, and whether it
// keeps the answer's text. A streamed Chat or Anthropic answer is
// rendered as events only, and its renderer keeps none of its text; a
// buffered body, and a Responses stream (whose last events repeat the
// whole answer), keep it.
func renderer(req *request) (rend llmapi.Renderer, keepsText bool) {
	created := time.Now().Unix()
	switch req.api {
	case apiMessages:
		return &llmapi.AnthropicRenderer{ID: "msg_" + req.rid, Model: req.route.Model, RequestID: req.rid, Streamed: req.stream}, !req.stream
	case apiCompact:
		return req.compaction.Renderer("resp_"+req.rid, created), true
	case apiResponses:
		r := &llmapi.ResponsesRenderer{ID: "resp_" + req.rid, Model: req.route.Model, Created: created}
		if req.ir != nil {
			r.Freeform = req.ir.FreeformTools()
			r.Namespaced = req.ir.NamespacedTools()
			r.ToolSearch = req.ir.SearchTool()
			r.Seal = req.ir.SealReasoning
			r.Compact = req.ir.Compact
		}
		return r, true
	}
	r := &llmapi.ChatRenderer{ID: "chatcmpl-" + req.rid, Model: req.route.Model, Created: created, IncludeUsage: req.includeUsage, Streamed: req.stream}
	if req.ir != nil {
		r.Freeform = req.ir.FreeformTools()
	}
	return r, !req.stream
}

// headHold bounds how long a streamed answer's head waits for its first
// event. A provider sends its first event right after its head as a rule;
// the two then leave in one write, one wake-up for the client instead of
// two. A provider slow to its first event still has the head passed on
// promptly, and keep-alives follow it.
const headHold = 20 * time.Millisecond

// streamHead flushes a streamed answer, holding its head (written, not
// flushed) until the first flush or headHold.
type streamHead struct {
	w       http.ResponseWriter
	pending bool
}

// wait returns how long to wait for the next event: up to headHold while
// the head waits, the keep-alive interval after.
func (h *streamHead) wait(keep time.Duration) time.Duration {
	if h.pending {
		return min(keep, headHold)
	}
	return keep
}

// flush sends what was written, the head with it.
func (h *streamHead) flush() {
	h.pending = false
	flush(h.w)
}

// idle is called when a wait ended without an event: the head leaves
// alone if it has not left, otherwise keep (a keep-alive) does. It
// reports whether the client is still there.
func (h *streamHead) idle(keep []byte) bool {
	if !h.pending {
		if _, err := h.w.Write(keep); err != nil {
			return false
		}
	}
	h.flush()
	return true
}

// emitter writes a rendered answer: stream events as they come (with
// keep-alives between them), or one buffered body at the
// terminal. Buffered and streamed answers come from the same renderer.
type emitter struct {
	s     *Server
	w     http.ResponseWriter
	req   *request
	rend  llmapi.Renderer
	usage *execution.Usage // the latest cumulative snapshot, booked by finish
	head  streamHead
	// more says the source holds the next event already (set by the
	// caller before each event): a burst's events are written as they
	// come and flushed once, after the last.
	more  bool
	begun bool // a stream's status was written
	// shown: content (a block) or the answer's end went to the renderer;
	// before it, a failure is answered with its status.
	shown bool
	// early holds a stream's start (and usage) rendered before any
	// content: it leaves with the first content, or when the head's hold
	// passes, and is dropped when the answer fails first.
	early     []byte
	unflushed bool // written since the last flush
	held      int  // what the answer holds so far, bounded by maxDecoded
	// keepsText: the renderer holds the answer's text (a buffered body,
	// a Responses stream); otherwise only tool arguments count in held.
	keepsText bool
	// out counts the output's text bytes, and ended says the answer
	// reached its successful end, for chargeEstimate.
	out   int
	ended bool
	// quiet is when the stream's events began to render to nothing (a
	// compaction's answer is gathered whole), zero while they render.
	quiet time.Time
}

// newEmitter returns the emitter of req's answer, rendered in its
// client's format.
func newEmitter(s *Server, w http.ResponseWriter, req *request) *emitter {
	rend, keepsText := renderer(req)
	return &emitter{s: s, w: w, req: req, rend: rend, keepsText: keepsText}
}

// finish books the answer's usage once, however the answer ended, and
// notes what it carried for chargeEstimate.
func (e *emitter) finish() {
	if e.usage != nil {
		e.s.recordUsage(e.req, e.usage)
		e.usage = nil
	}
	if e.out > 0 || e.ended {
		e.req.answered = true
		e.req.estOut = int64(e.out+3) / 4
		e.req.cut = !e.ended
	}
}

// start prepares a stream's head. Its status (200) is written with the
// answer's first content (its start is held until then), or when the
// head's hold passes without it (begin): an answer that fails before any
// content is answered with the failure's own status instead.
func (e *emitter) start() {
	if e.req.stream {
		e.w.Header().Set("Content-Type", "text/event-stream")
		e.w.Header().Set("Cache-Control", "no-cache")
		e.head = streamHead{w: e.w, pending: true}
	}
}

// resume takes over a stream whose head was written already (relayTunnel's,
// begun before the provider's head came).
func (e *emitter) resume() {
	e.head = streamHead{w: e.w}
	e.begun = true
}

// begin writes a stream's status, once.
func (e *emitter) begin() {
	if !e.begun {
		e.begun = true
		e.w.WriteHeader(http.StatusOK)
	}
}

// wait returns how long to wait for the next event before idle.
func (e *emitter) wait() time.Duration { return e.head.wait(e.req.snap.keepAlive) }

// idle is called when a wait ended without an event; it reports whether
// the client is still there.
func (e *emitter) idle() bool {
	if !e.req.stream {
		return true
	}
	e.begin()
	if len(e.early) > 0 {
		if _, err := e.w.Write(e.early); err != nil {
			return false
		}
		e.early = nil
	}
	e.quiet = time.Time{} // the keep-alive below is the stream's latest word
	var keep []byte
	if !e.head.pending {
		keep = e.keepAlive()
	}
	return e.head.idle(keep)
}

// keepAlive is what the silent stream is sent: an event of the client's
// format that says the answer goes on where the renderer has one (an
// Anthropic ping; a Responses response.in_progress, which Codex's idle
// timeout counts where it counts no comment), the answer's start in its
// place when it has not started; a comment otherwise (Chat Completions
// has no such event). An answer that keeps the provider's id
// (relayDecoded's ownID) is never silent before its start: such a stream
// is rendered from a whole body, read first.
func (e *emitter) keepAlive() []byte {
	if h, ok := e.rend.(interface{ Heartbeat() []byte }); ok {
		if b := h.Heartbeat(); b != nil {
			return b
		}
	}
	return keepAliveComment
}

// event renders one canonical event; it reports whether to go on.
func (e *emitter) event(ev llmapi.Event) bool {
	switch ev.Kind {
	case llmapi.EvDelta:
		if e.keepsText || ev.Block == llmapi.BlockToolUse {
			e.held += len(ev.Text) + len(ev.Signature)
		}
		e.out += len(ev.Text)
	case llmapi.EvBlockStart:
		e.held += blockCost
	case llmapi.EvStop:
		e.ended = true
	}
	if e.held > e.s.maxDecoded {
		e.s.log.Warn("provider answer beyond the decoded limit", "request_id", e.req.rid, "limit_bytes", e.s.maxDecoded)
		ev = llmapi.Event{Kind: llmapi.EvError, Err: e.s.tooLarge()}
	}
	if ev.Kind == llmapi.EvUsage {
		// Usage events are cumulative snapshots: only the last counts.
		u := ev.Usage
		e.usage = &execution.Usage{InputTokens: u.Input, OutputTokens: u.Output, CachedInputTokens: u.Cached, ReasoningTokens: u.Reasoning}
	}
	if e.req.stream && !e.begun {
		switch ev.Kind {
		case llmapi.EvError:
			// Nothing was sent: the failure is the answer, with its own
			// status (429 for a rate limit, 503 or 529 for an overload),
			// as a provider's refusal before its head is, since clients'
			// retry rules read the status, not an error event inside a
			// 200 stream.
			if ae := ev.Err; ae == nil {
				fail(e.w, e.req.api, http.StatusBadGateway, "api_error", "The model provider failed.", nil)
			} else if ae.Status != 499 { // 499: the caller left
				fail(e.w, e.req.api, ae.Status, ae.Type, ae.Message, nil)
			}
			return false
		case llmapi.EvStart, llmapi.EvUsage:
			// Nothing a client shows: held with the head.
			e.early = append(e.early, e.rend.Event(ev)...)
			return true
		}
		e.begin()
	}
	switch ev.Kind {
	case llmapi.EvBlockStart, llmapi.EvDelta, llmapi.EvBlockStop, llmapi.EvStop:
		e.shown = true
	}
	out := e.rend.Event(ev)
	if len(e.early) > 0 {
		out = append(e.early, out...)
		e.early = nil
	}
	if e.req.stream {
		end := ev.Kind == llmapi.EvStop || ev.Kind == llmapi.EvError
		if len(out) > 0 {
			if _, err := e.w.Write(out); err != nil {
				return false
			}
			e.unflushed = true
			e.quiet = time.Time{}
		} else if !end && !e.quietKept() {
			return false
		}
		// The first event and the last leave at once, and so does a
		// burst's last: nothing waits on the provider's next bytes.
		if e.unflushed && (!e.more || e.head.pending || end) {
			e.head.flush()
			e.unflushed = false
		}
		return !end
	}
	if ev.Kind != llmapi.EvStop && ev.Kind != llmapi.EvError {
		return true
	}
	status, body := e.rend.Body()
	if ev.Kind == llmapi.EvError && ev.Err != nil && ev.Err.Status == 499 {
		return false
	}
	e.w.Header().Set("Content-Type", "application/json")
	retryHint(e.w.Header(), status)
	e.w.WriteHeader(status)
	e.w.Write(body)
	return false
}

// quietKept keeps a stream whose events render to nothing (the
// provider is busy, the client is shown nothing yet) from going silent:
// once its events have rendered to nothing for the keep-alive interval,
// a keep-alive goes, as between events, so that a client or a proxy that
// drops a silent connection keeps it. It reports whether the
// client is still there. The clock is read only for such events.
func (e *emitter) quietKept() bool {
	now := time.Now()
	switch {
	case e.quiet.IsZero():
		e.quiet = now
	case now.Sub(e.quiet) >= e.req.snap.keepAlive:
		e.quiet = now
		return e.idle()
	}
	return true
}

// relayRun answers from a normalized run through the client format's
// renderer.
func (s *Server) relayRun(ctx context.Context, w http.ResponseWriter, req *request, x *exchange) {
	stop := context.AfterFunc(ctx, func() { x.run.Close() })
	defer stop()
	em := newEmitter(s, w, req)
	defer em.finish()
	var conv llmapi.RunEvents
	held, ok := s.holdRun(ctx, w, req, x, &conv)
	if !ok {
		return
	}
	em.start()
	if len(held) == 0 && !em.idle() {
		return // the head leaves alone: its hold has passed
	}
	for _, c := range held {
		if !em.event(c) {
			return
		}
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, em.wait())
		ev, err := x.run.Next(nctx)
		cancel()
		if err != nil {
			if deadlinePassed(ctx) {
				em.event(timeoutEvent)
				return
			}
			if ctx.Err() != nil {
				return // the client left; close cancels the run
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if !em.idle() {
					return
				}
				continue
			}
			return
		}
		if ev.Kind == execution.EventFailed && ctx.Err() != nil {
			// The request's end closed the run; the terminal that came
			// of it is not the provider's.
			if deadlinePassed(ctx) {
				em.event(timeoutEvent)
			}
			return
		}
		for _, c := range conv.Convert(ev) {
			if !em.event(c) {
				return
			}
		}
	}
}

// holdRun holds a run's answer back until the run's first event after
// Started (a stream's for at most the keep-alive interval, after which its
// head leaves alone and keep-alives follow), so that a run the Node refuses,
// or one that fails before any output, is answered with its failure's
// HTTP status (and Retry-After where a retry may succeed), as a refused
// tunnel is: clients' retry rules look at the status, not at an error
// event inside a 200 stream. A tunnel's head waits only headHold, since a
// provider's head is its own answer to pass on; a run's head is the
// Edge's, says nothing until output comes, and its command may take a
// while to start (or to fail) on a loaded Node. It returns the canonical
// events held; ok is false when the answer was given (or the client left).
func (s *Server) holdRun(ctx context.Context, w http.ResponseWriter, req *request, x *exchange, conv *llmapi.RunEvents) (held []llmapi.Event, ok bool) {
	until := time.Now().Add(req.snap.keepAlive)
	for {
		wait := req.snap.keepAlive
		if req.stream {
			if wait = time.Until(until); wait <= 0 {
				return held, true
			}
		}
		nctx, cancel := context.WithTimeout(ctx, wait)
		ev, err := x.run.Next(nctx)
		cancel()
		switch {
		case err == nil:
		case deadlinePassed(ctx):
			fail(w, req.api, http.StatusGatewayTimeout, "timeout", "The request exceeded its deadline.", nil)
			return nil, false
		case ctx.Err() != nil:
			return nil, false // the client left; close cancels the run
		case errors.Is(err, context.DeadlineExceeded):
			continue
		default:
			return nil, false
		}
		if ev.Kind == execution.EventFailed {
			switch {
			case deadlinePassed(ctx):
				// The deadline closed the run: its terminal says so, but
				// it may have raced the Node's own.
				fail(w, req.api, http.StatusGatewayTimeout, "timeout", "The request exceeded its deadline.", nil)
			case ctx.Err() != nil:
				// The client left.
			default:
				if ev.Failure != nil && ev.Failure.Class == execution.FailureRateLimited {
					s.coolDown(req, x, http.StatusTooManyRequests, defaultCooldown)
				}
				s.runRefused(w, req, ev.Failure)
			}
			return nil, false
		}
		held = append(held, conv.Convert(ev)...)
		if ev.Kind != execution.EventStarted {
			return held, true
		}
	}
}

// runRefused answers a run that failed before any output with the error
// every client format renders for its failure.
func (s *Server) runRefused(w http.ResponseWriter, req *request, f *execution.Failure) {
	ae := llmapi.FailureError(f)
	s.log.Warn("run failed before the answer", "request_id", req.rid, "status", ae.Status, "type", ae.Type)
	if ae.Status == 499 {
		return // the caller cancelled: no one is there to answer
	}
	fail(w, req.api, ae.Status, ae.Type, ae.Message, nil)
}

// relayTranslate answers from the provider's own format, translated: the
// provider's answer is decoded into canonical events and rendered in the
// client's format.
func (s *Server) relayTranslate(ctx context.Context, w http.ResponseWriter, req *request, x *exchange) {
	tn := x.tunnel
	stop := context.AfterFunc(ctx, func() { tn.Close() })
	defer stop()
	// em begins the client's stream when the provider's head is slow:
	// its head, its format's start (message_start, response.created),
	// then keep-alives (llmapi's heartbeats; a comment to Chat clients).
	var em *emitter
	status, hdr, err := awaitHead(ctx, req, tn, func() bool {
		if em == nil {
			em = newEmitter(s, w, req)
			em.start()
			em.idle() // the stream's head leaves
		}
		return em.idle()
	})
	if em != nil {
		defer em.finish()
	}
	if !s.headCame(ctx, w, req, x, em, status, hdr, err) {
		return
	}
	if status != http.StatusOK {
		refuseHead(w, req, em, tn, status, hdr)
		return
	}
	s.relayDecoded(ctx, w, req, x, sse.Streamed(hdr.Get("Content-Type"), req.stream), x.format, false, em)
}

// errClientLeft says the client went away while its answer waited.
var errClientLeft = errors.New("edge: the client went away")

// awaitHead waits for the provider's head (status and headers). A
// stream's head may be slow (Ollama sends none until its first token:
// after a model load and the prompt's prefill): once open has waited the
// keep-alive interval for it, keepAlive is called at once and then every
// interval while the wait goes on, so that the client's stream begins
// without it and neither a proxy nor a client that gives up on a silent
// request (Claude Code resends one that sent no byte for minutes) cuts
// it. keepAlive reports whether the client is still there; when it is
// not, awaitHead fails with errClientLeft. A nil keepAlive waits for the
// head as a whole answer does.
func awaitHead(ctx context.Context, req *request, tn *nodes.Tunnel, keepAlive func() bool) (status int, hdr http.Header, err error) {
	if !req.stream || keepAlive == nil {
		return tn.Response(ctx)
	}
	// wait waits up to d for the head, or only takes what is there (d 0:
	// open waited the interval already, and most heads are there); it
	// reports whether its own time ran out first.
	wait := func(d time.Duration) bool {
		hctx := doneCtx
		if d > 0 {
			var cancel context.CancelFunc
			hctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		status, hdr, err = tn.Response(hctx)
		return err != nil && ctx.Err() == nil && hctx.Err() != nil && errors.Is(err, hctx.Err())
	}
	for d := time.Duration(0); wait(d); d = req.snap.keepAlive {
		if !keepAlive() {
			return 0, nil, errClientLeft
		}
	}
	return status, hdr, err // the head, the tunnel's failure, or the request's end
}

// doneCtx is a context already done: a wait on it takes only what is
// there.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// relayDecoded answers from a provider's successful answer in format:
// decoded into canonical events as what it is (streamed or whole) and
// rendered in the client's format as what the client asked for, so a
// provider that ignores the stream flag (an event stream for a whole
// answer, or the reverse) is served all the same. ownID, set when format
// is the client's own (the raw tunnel's answer of the other kind), keeps
// the provider's answer id in place of the Edge's, and remembers a
// Responses one for GET and previous_response_id, as the tunnel does; a
// translated answer's ids are the Edge's (nothing at the provider answers
// to them). A refusal before any output cools x's provider. em, when not
// nil, is the emitter that began the client's stream while the
// provider's head was awaited (awaitHead); its caller finishes it.
func (s *Server) relayDecoded(ctx context.Context, w http.ResponseWriter, req *request, x *exchange, streamed bool, format wireFormat, ownID bool, em *emitter) {
	tn := x.tunnel
	var dec llmapi.Decoder
	switch {
	case streamed && format == formatChat:
		dec = llmapi.DecodeChatStream(tn)
	case streamed && format == formatResponses:
		dec = llmapi.DecodeResponsesStream(tn)
	case streamed:
		dec = llmapi.DecodeAnthropicStream(tn)
	default:
		b, err := io.ReadAll(io.LimitReader(tn, int64(s.maxDecoded)+1))
		if err != nil {
			if deadlinePassed(ctx) {
				failHead(w, req, em, timeoutEvent.Err)
			} else if ctx.Err() == nil {
				failHead(w, req, em, &llmapi.APIError{Status: http.StatusBadGateway, Type: "api_error", Message: "The model provider's answer broke off."})
			}
			return
		}
		if len(b) > s.maxDecoded {
			s.log.Warn("provider answer beyond the decoded limit", "request_id", req.rid, "limit_bytes", s.maxDecoded)
			failHead(w, req, em, s.tooLarge())
			return
		}
		switch format {
		case formatChat:
			dec = llmapi.DecodeChat(b)
		case formatResponses:
			dec = llmapi.DecodeResponses(b)
		default:
			dec = llmapi.DecodeAnthropic(b)
		}
	}
	defer dec.Release()
	// A translation renamed each tool name no provider takes
	// (llmapi.ProviderToolName); the answer's calls are given to the
	// client under its own names. A name not renamed is the client's
	// already, or one the model made up, and is given as it is.
	var toolNames map[string]string
	if !ownID && req.ir != nil {
		toolNames = req.ir.ToolNames()
	}
	if em == nil {
		em = newEmitter(s, w, req)
		defer em.finish()
		em.start()
	}
	for {
		tn.SetReadDeadline(time.Now().Add(em.wait()))
		ev, err := dec.Next()
		if err != nil {
			if errors.Is(err, wire.ErrDeadlineExceeded) {
				if !em.idle() {
					return
				}
				continue
			}
			if deadlinePassed(ctx) {
				em.event(timeoutEvent)
			}
			return
		}
		if ev.Kind == llmapi.EvError && deadlinePassed(ctx) {
			ev = timeoutEvent
		}
		if ownID && ev.Kind == llmapi.EvStart {
			s.keepAnswerID(req, x, em.rend, ev.ID)
		}
		if ev.Kind == llmapi.EvBlockStart && ev.Block == llmapi.BlockToolUse {
			if c, ok := toolNames[ev.Name]; ok {
				ev.Name = c
			}
		}
		if !em.shown && ev.Kind == llmapi.EvError && ev.Err != nil {
			// The provider refused before any output, inside its answer
			// (a 200 stream whose first content is its error): it cools
			// as for the same refusal made with its status.
			// Its status says which (the decoders give a rate limit 429
			// and an overload 503).
			if st := ev.Err.Status; st == http.StatusTooManyRequests || st == http.StatusServiceUnavailable {
				s.coolDown(req, x, st, defaultCooldown)
			}
		}
		em.more = dec.Ready()
		if !em.event(ev) {
			return
		}
	}
}

// keepAnswerID gives rend the provider's own answer id, once, in place of
// the Edge's, and remembers a Responses one for x's provider. An empty or
// over-long id is not taken.
func (s *Server) keepAnswerID(req *request, x *exchange, rend llmapi.Renderer, id string) {
	r, ok := rend.(interface{ AdoptID(string) bool })
	if id == "" || len(id) > 256 || !ok || !r.AdoptID(id) {
		return
	}
	if req.api == apiResponses {
		s.rememberResponse(req, x, id)
	}
}

// noteRefusal cools the provider of x when its upstream answered "not
// now": 429 (rate limited: the model asked for), 503 or 529 (overloaded,
// or a model still loading: the whole provider), for its Retry-After
// within the cooldown's bounds.
func (s *Server) noteRefusal(req *request, x *exchange, status int, hdr http.Header) {
	if status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable && status != 529 {
		return
	}
	s.coolDown(req, x, status, cooldownFor(hdr.Get("Retry-After")))
}

// coolDown keeps x's provider out of admission for d: it refused req with
// status (a run failed as rate limited counts as 429). A rate limit is
// the upstream's for the model asked for (hosted APIs limit each model on
// its own), so only that model cools; an overloaded provider (503, 529)
// cools as a whole.
func (s *Server) coolDown(req *request, x *exchange, status int, d time.Duration) {
	k := coolKey{provider: x.target.ProviderID}
	if status == http.StatusTooManyRequests {
		k.model = x.target.Model
	}
	s.cool.start(k, d, time.Now())
	s.log.Info("provider refused for now: cooling", "request_id", req.rid, "provider", k.provider, "model", k.model, "status", status, "for", d)
}

// maxRetryAfter bounds the delay a provider's Retry-After passes on.
const maxRetryAfter = time.Hour

// retryAfter is the Retry-After a translated refusal carries for the
// provider's: its delay in seconds, bounded by maxRetryAfter, or one
// second for one this does not read (an HTTP date, a fraction, anything
// else).
func retryAfter(provider string) string {
	n, err := strconv.Atoi(provider)
	if err != nil || n < 1 {
		return "1"
	}
	return strconv.Itoa(min(n, int(maxRetryAfter/time.Second)))
}

// providerError maps a provider's error answer to the client's terms. A
// message from a 4xx is passed on, bounded; a 5xx says only what failed.
// A refusal that says the prompt does not fit the model's context window
// (llmapi.ContextOverflow) is told as such, in words Claude Code acts on
// ("prompt is too long") and, to an OpenAI-format client, with OpenAI's
// code for it.
func providerError(status int, body []byte) *llmapi.APIError {
	msg, typ, code := providerErrorText(body)
	if len(msg) > 300 {
		msg = msg[:300]
	}
	switch {
	case status == http.StatusTooManyRequests:
		return &llmapi.APIError{Status: 429, Type: "rate_limit", Message: "The model provider is rate limiting."}
	case status == 529 || status == http.StatusServiceUnavailable:
		return &llmapi.APIError{Status: 503, Type: "overloaded", Message: "The model provider is overloaded."}
	case status == http.StatusBadRequest || status == http.StatusUnprocessableEntity || status == http.StatusRequestEntityTooLarge:
		if llmapi.ContextOverflow(msg, typ, code) {
			return &llmapi.APIError{Status: 400, Type: "context_length", Message: "The prompt is too long for the model's context window; the model provider said: " + msg}
		}
		if msg == "" {
			return &llmapi.APIError{Status: 400, Type: "invalid_request", Message: "The model provider refused the request."}
		}
		return &llmapi.APIError{Status: 400, Type: "invalid_request", Message: "The model provider refused the request: " + msg}
	}
	return &llmapi.APIError{Status: 502, Type: "api_error", Message: fmt.Sprintf("The model provider answered %d.", status)}
}

// providerErrorText reads an error answer's message, type and code in the
// shapes model servers give them: OpenAI's and Anthropic's {"error":
// {"message", "type", "code"}}, Ollama's and TGI's {"error": "..."},
// vLLM's older {"object": "error", "message", "type"} and FastAPI's
// {"detail": "..."}. What is not there is "".
func providerErrorText(body []byte) (msg, typ, code string) {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil {
		return "", "", ""
	}
	var inner struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(e.Error, &inner) == nil {
		msg, typ = inner.Message, inner.Type
		json.Unmarshal(inner.Code, &code) // a string; a number (vLLM's status) is no code
	} else {
		json.Unmarshal(e.Error, &msg)
	}
	if msg == "" {
		msg, typ = e.Message, cmp.Or(typ, e.Type)
	}
	if msg == "" {
		json.Unmarshal(e.Detail, &msg)
	}
	return msg, typ, code
}

// plausible reports whether every count in u is one a provider could have
// meant: none negative (the token counters cannot go down), none absurd.
func plausible(u *execution.Usage) bool {
	for _, n := range [...]int64{u.InputTokens, u.OutputTokens, u.CachedInputTokens, u.ReasoningTokens} {
		if n < 0 || n > llmapi.MaxTokens {
			return false
		}
	}
	return true
}

// recordUsage books reported usage: per-key usage, the key's token budget,
// and the token metrics. Usage with an impossible count is dropped whole.
func (s *Server) recordUsage(req *request, u *execution.Usage) {
	if u == nil {
		return
	}
	if !plausible(u) {
		s.log.Warn("provider reported impossible usage; not booked", "request_id", req.rid,
			"input_tokens", u.InputTokens, "output_tokens", u.OutputTokens,
			"cached_input_tokens", u.CachedInputTokens, "reasoning_tokens", u.ReasoningTokens)
		return
	}
	req.usage = u
	s.usage.tokens(req.key.Name, u)
	s.limits.spend(req.key, u.InputTokens+u.OutputTokens)
	tk := s.metrics.tokensBy.get(req.key.Name)
	tk[0].Add(float64(u.InputTokens))
	tk[1].Add(float64(u.OutputTokens))
}

// providerRequestID is the request id a provider's answer names:
// X-Request-Id (OpenAI and most compatible servers) or request-id
// (Anthropic). The headers came through the tunnel's allow-list, which
// bounds each value and refuses control bytes.
func providerRequestID(h http.Header) string {
	if v := h.Get("X-Request-Id"); v != "" {
		return v
	}
	return h.Get("Request-Id")
}
