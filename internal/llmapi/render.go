package llmapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/sse"
)

// Renderer renders canonical events in one client format. Event returns
// the stream bytes for each event; after the terminal (Stop or Error),
// Body returns the buffered answer: the same events, the same terminal.
type Renderer interface {
	Event(e Event) []byte
	Body() (status int, body []byte)
}

// AnthropicPing is the event Anthropic's API sends to say a stream goes
// on. Its clients skip it wherever it comes; a client that watches a
// stream for events, not bytes, counts it.
const AnthropicPing = "event: ping\ndata: {\"type\":\"ping\"}\n\n"

var anthropicPing = []byte(AnthropicPing)

// adoptID is the renderers' AdoptID: field (their ID) takes id until the
// answer has started.
func adoptID(field *string, started bool, id string) bool {
	if started {
		return false
	}
	*field = id
	return true
}

// state accumulates a canonical answer.
type state struct {
	id, model string
	blocks    []*Part      // by canonical index
	bufs      []*blockBufs // by canonical index, beside blocks
	usage     Usage
	stop      StopReason
	err       *APIError
	done      bool
	// eventsOnly: the answer is rendered as events only, so no Body will
	// repeat it: text, thinking and signatures are not kept (tool
	// arguments are: a custom tool call's input leaves whole).
	eventsOnly bool
}

// blockBufs build one block's text, signature and tool arguments: a delta
// is appended in amortized constant time, and the Part's field is the
// builder's String, which copies nothing (+= would copy the whole text on
// every delta: quadratic in a long answer).
type blockBufs struct{ text, sig, args strings.Builder }

func (s *state) apply(e Event) {
	switch e.Kind {
	case EvStart:
		if s.id == "" {
			s.id = e.ID
		}
		if s.model == "" {
			s.model = e.Model
		}
	case EvBlockStart:
		p := &Part{ID: e.ToolID, Name: e.Name}
		switch e.Block {
		case BlockText:
			p.Kind = PartText
		case BlockThinking:
			p.Kind = PartThinking
		case BlockToolUse:
			p.Kind = PartToolUse
		}
		for len(s.blocks) <= e.Index {
			s.blocks = append(s.blocks, nil)
			s.bufs = append(s.bufs, nil)
		}
		s.blocks[e.Index], s.bufs[e.Index] = p, &blockBufs{}
	case EvDelta:
		if e.Index < len(s.blocks) && s.blocks[e.Index] != nil {
			b, bb := s.blocks[e.Index], s.bufs[e.Index]
			if b.Kind == PartToolUse {
				bb.args.WriteString(e.Text)
			} else if e.Text != "" && !s.eventsOnly {
				bb.text.WriteString(e.Text)
				b.Text = bb.text.String()
			}
			if e.Signature != "" && !s.eventsOnly {
				bb.sig.WriteString(e.Signature)
				b.Signature = bb.sig.String()
			}
		}
	case EvUsage:
		s.usage = e.Usage
	case EvStop:
		s.stop, s.done = e.Reason, true
	case EvError:
		s.err, s.done = e.Err, true
	}
}

func (s *state) toolCalls() int {
	n := 0
	for _, b := range s.blocks {
		if b != nil && b.Kind == PartToolUse {
			n++
		}
	}
	return n
}

// toolArgs returns a tool call's complete arguments as its deltas carried
// them (so that an event repeating them whole matches their join), or {}
// when there were none.
func (s *state) toolArgs(i int) string {
	raw := s.bufs[i].args.String()
	if trimJSONSpace(raw) == "" {
		return "{}"
	}
	return raw
}

// toolInput returns a tool call's complete arguments as a JSON object.
func (s *state) toolInput(i int) json.RawMessage {
	raw := trimJSONSpace(s.bufs[i].args.String())
	if raw == "" {
		return json.RawMessage("{}")
	}
	return json.RawMessage(raw)
}

// finalStop is the stop reason clients see: tool_use exactly when the
// turn has a tool call. A provider's tool_use without a call ends the
// turn: clients that see tool_use (or tool_calls) look for the calls to
// run.
func (s *state) finalStop() StopReason {
	if s.toolCalls() > 0 {
		return StopToolUse
	}
	if s.stop == "" || s.stop == StopToolUse {
		return StopEnd
	}
	return s.stop
}

// mustBuffer panics when a Streamed renderer is asked for a Body: it
// would render an answer without its text.
func mustBuffer(streamed bool) {
	if streamed {
		panic("llmapi: Body called on a Streamed renderer")
	}
}

// --- Anthropic Messages ---------------------------------------------------

// AnthropicRenderer renders Anthropic Messages: message_start, then each
// block's content_block_start / deltas / content_block_stop with the
// canonical (increasing, non-overlapping) indices, message_delta with the
// stop reason and cumulative usage, message_stop.
type AnthropicRenderer struct {
	ID, Model string
	// RequestID, when set, goes into the error body or event as
	// request_id, where Anthropic's SDKs look for it.
	RequestID string
	// Streamed says the answer leaves as events only: the renderer then
	// keeps none of its text, and Body must not be called.
	Streamed bool
	st       state
	started  bool
	scratch  []byte // a delta event's JSON, before it is framed
}

// delta appends a content_block_delta event whose delta is {"type": typ,
// field: text}. It writes the bytes json.Marshal gives for the map form
// (keys sorted: field sorts before "type" for every delta type) without
// building the maps: the one event a stream repeats per token.
func (r *AnthropicRenderer) delta(out []byte, index int, typ, field, text string) []byte {
	b := append(r.scratch[:0], `{"delta":{"`...)
	b = append(b, field...)
	b = append(b, `":`...)
	b = appendQuoted(b, text)
	b = append(b, `,"type":"`...)
	b = append(b, typ...)
	b = append(b, `"},"index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	b = append(b, `,"type":"content_block_delta"}`...)
	r.scratch = b
	return sse.AppendEvent(out, "content_block_delta", b)
}

var _ Renderer = (*AnthropicRenderer)(nil)

func anthropicStopName(s StopReason) string {
	switch s {
	case StopLength:
		return "max_tokens"
	case StopToolUse:
		return "tool_use"
	case StopSequence:
		return "stop_sequence"
	case StopRefusal:
		return "refusal"
	}
	return "end_turn"
}

func anthropicUsage(u Usage) map[string]any {
	return map[string]any{"input_tokens": u.Input - u.Cached, "output_tokens": u.Output, "cache_read_input_tokens": u.Cached, "cache_creation_input_tokens": 0}
}

func (r *AnthropicRenderer) ev(out []byte, typ string, v map[string]any) []byte {
	v["type"] = typ
	return sse.AppendEvent(out, typ, mustJSON(v))
}

// AdoptID makes id the answer's id, in place of ID, unless the answer's
// start was rendered already (the id is fixed from then on); it reports
// whether it did.
func (r *AnthropicRenderer) AdoptID(id string) bool { return adoptID(&r.ID, r.started, id) }

// Heartbeat returns what a stream silent for a while is sent, in place
// of a comment, so that a client that gives up on a stream without events
// (as Claude Code's stall watchdog does) waits on: a ping once the
// message has started, the message_start itself before (the answer's id
// is then r.ID: AdoptID takes no other). It returns nil after the
// answer's end. The bytes returned must not be modified.
func (r *AnthropicRenderer) Heartbeat() []byte {
	switch {
	case r.st.done:
		return nil
	case r.started:
		return anthropicPing
	}
	return r.Event(Event{Kind: EvStart})
}

// Event implements Renderer.
func (r *AnthropicRenderer) Event(e Event) []byte {
	r.st.eventsOnly = r.Streamed
	r.st.apply(e)
	var out []byte
	switch e.Kind {
	case EvStart:
		if r.started {
			return nil // one message_start, whatever the provider sent
		}
		r.started = true
		out = r.ev(out, "message_start", map[string]any{"message": map[string]any{
			"id": r.ID, "type": "message", "role": "assistant", "model": r.Model, "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(Usage{}),
		}})
	case EvBlockStart:
		var cb map[string]any
		switch e.Block {
		case BlockText:
			cb = map[string]any{"type": "text", "text": ""}
		case BlockThinking:
			cb = map[string]any{"type": "thinking", "thinking": "", "signature": ""}
		case BlockToolUse:
			cb = map[string]any{"type": "tool_use", "id": e.ToolID, "name": e.Name, "input": map[string]any{}}
		}
		out = r.ev(out, "content_block_start", map[string]any{"index": e.Index, "content_block": cb})
	case EvDelta:
		switch e.Block {
		case BlockText:
			out = r.delta(out, e.Index, "text_delta", "text", e.Text)
		case BlockThinking:
			if e.Text != "" {
				out = r.delta(out, e.Index, "thinking_delta", "thinking", e.Text)
			}
			if sig := anthropicSignature(e.Signature); sig != "" {
				out = r.delta(out, e.Index, "signature_delta", "signature", sig)
			}
		case BlockToolUse:
			out = r.delta(out, e.Index, "input_json_delta", "partial_json", e.Text)
		default: // not a block kind: as the map form always wrote it
			var d map[string]any
			out = r.ev(out, "content_block_delta", map[string]any{"index": e.Index, "delta": d})
		}
	case EvBlockStop:
		out = r.ev(out, "content_block_stop", map[string]any{"index": e.Index})
	case EvStop:
		out = r.ev(out, "message_delta", map[string]any{"delta": map[string]any{"stop_reason": anthropicStopName(r.st.finalStop()), "stop_sequence": nil}, "usage": anthropicUsage(r.st.usage)})
		out = r.ev(out, "message_stop", map[string]any{})
	case EvError:
		out = sse.AppendEvent(out, "error", AnthropicErrorBody(anthropicErrorType(e.Err), e.Err.Message, r.RequestID))
	}
	return out
}

// anthropicSignature is the signature an Anthropic client is given for a
// thinking block: none for a redacted one. Only an Anthropic provider
// redacts, and its answers reach Anthropic clients untranslated, so such
// a block is not rendered as the redacted_thinking it was; the stream,
// whose block began before its data came, could not.
func anthropicSignature(sig string) string {
	if strings.HasPrefix(sig, redactedPrefix) {
		return ""
	}
	return sig
}

// Body implements Renderer. It panics when r is Streamed: such a
// renderer kept no text to render.
func (r *AnthropicRenderer) Body() (int, []byte) {
	mustBuffer(r.Streamed)
	if r.st.err != nil {
		return r.errorBody(r.st.err)
	}
	content := []any{}
	for i, b := range r.st.blocks {
		if b == nil {
			continue
		}
		switch b.Kind {
		case PartText:
			content = append(content, map[string]any{"type": "text", "text": b.Text})
		case PartThinking:
			content = append(content, map[string]any{"type": "thinking", "thinking": b.Text, "signature": anthropicSignature(b.Signature)})
		case PartToolUse:
			if !toolArgsOK(r.st.bufs[i].args.String()) { // decoders refuse these; never panic on one
				return r.errorBody(errToolArgs(b.Name).Err)
			}
			content = append(content, map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": r.st.toolInput(i)})
		}
	}
	return http.StatusOK, mustJSON(map[string]any{
		"id": r.ID, "type": "message", "role": "assistant", "model": r.Model, "content": content,
		"stop_reason": anthropicStopName(r.st.finalStop()), "stop_sequence": nil, "usage": anthropicUsage(r.st.usage),
	})
}

func anthropicErrorType(e *APIError) string {
	switch e.Type {
	case "invalid_request", "context_length":
		return "invalid_request_error"
	case "authentication":
		return "authentication_error"
	case "permission":
		return "permission_error"
	case "not_found":
		return "not_found_error"
	case "rate_limit":
		return "rate_limit_error"
	case "overloaded":
		return "overloaded_error"
	case "timeout":
		return "timeout_error"
	}
	return "api_error"
}

// AnthropicErrorBody renders Anthropic's error shape, with the request id
// when there is one (Anthropic's SDKs show it in their errors).
func AnthropicErrorBody(typ, msg, requestID string) []byte {
	body := map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}}
	if requestID != "" {
		body["request_id"] = requestID
	}
	return mustJSON(body)
}

// errorBody maps a failure to Anthropic's status and error body.
func (r *AnthropicRenderer) errorBody(e *APIError) (int, []byte) {
	status := e.Status
	if status == 0 {
		status = 500
	}
	if e.Type == "overloaded" {
		status = 529
	}
	return status, AnthropicErrorBody(anthropicErrorType(e), e.Message, r.RequestID)
}

// --- Chat Completions -----------------------------------------------------

// ChatRenderer renders Chat Completions: the role in the first delta,
// content and reasoning deltas, tool calls with their argument fragments,
// finish_reason, a usage chunk with empty choices when asked (and then
// "usage": null on every other chunk), [DONE].
type ChatRenderer struct {
	ID, Model    string
	Created      int64
	IncludeUsage bool
	// Freeform names the client's custom tools (Request.FreeformTools).
	// A call of one is a custom tool call whose input is the string the
	// model gave as the function's FreeformParam (its whole arguments when
	// it gave no such string). The input is whole only once the call is,
	// so it is streamed in one delta, when the call ends.
	Freeform map[string]bool
	// Streamed says the answer leaves as events only: the renderer then
	// keeps none of its text, and Body must not be called.
	Streamed  bool
	st        state
	started   bool
	callIndex map[int]int // canonical block index -> tool_calls index
	scratch   []byte      // a text chunk's JSON, before it is framed
}

var _ Renderer = (*ChatRenderer)(nil)

// textChunk is chunk(map[string]any{field: text}, nil), written without
// building the maps (the bytes are json.Marshal's, keys sorted): the one
// chunk a stream repeats per token.
func (r *ChatRenderer) textChunk(field, text string) []byte {
	b := append(r.scratch[:0], `{"choices":[{"delta":{"`...)
	b = append(b, field...)
	b = append(b, `":`...)
	b = appendQuoted(b, text)
	b = append(b, `},"finish_reason":null,"index":0,"logprobs":null}],"created":`...)
	b = strconv.AppendInt(b, r.Created, 10)
	b = append(b, `,"id":`...)
	b = appendQuoted(b, r.ID)
	b = append(b, `,"model":`...)
	b = appendQuoted(b, r.Model)
	b = append(b, `,"object":"chat.completion.chunk"`...)
	if r.IncludeUsage {
		b = append(b, `,"usage":null`...)
	}
	b = append(b, '}')
	r.scratch = b
	return sse.AppendEvent(nil, "", b)
}

// chunk renders a chunk with one choice. When usage was asked for, its
// usage is null, as OpenAI sends it on every chunk but the last.
func (r *ChatRenderer) chunk(delta map[string]any, finish any) []byte {
	c := map[string]any{
		"id": r.ID, "object": "chat.completion.chunk", "created": r.Created, "model": r.Model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
	}
	if r.IncludeUsage {
		c["usage"] = nil
	}
	return sse.AppendEvent(nil, "", mustJSON(c))
}

func chatFinish(s StopReason) string {
	switch s {
	case StopLength:
		return "length"
	case StopToolUse:
		return "tool_calls"
	case StopRefusal:
		return "content_filter"
	}
	return "stop"
}

func chatUsage(u Usage) map[string]any {
	return map[string]any{
		"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.Cached},
		"completion_tokens_details": map[string]any{"reasoning_tokens": u.Reasoning},
	}
}

// AdoptID makes id the answer's id, in place of ID, unless the answer's
// start was rendered already (the id is fixed from then on); it reports
// whether it did.
func (r *ChatRenderer) AdoptID(id string) bool { return adoptID(&r.ID, r.started, id) }

// Event implements Renderer.
func (r *ChatRenderer) Event(e Event) []byte {
	r.st.eventsOnly = r.Streamed
	r.st.apply(e)
	if r.callIndex == nil {
		r.callIndex = map[int]int{}
	}
	switch e.Kind {
	case EvStart:
		if r.started {
			return nil
		}
		r.started = true
		return r.chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	case EvBlockStart:
		if e.Block == BlockToolUse {
			i := len(r.callIndex)
			r.callIndex[e.Index] = i
			if r.Freeform[e.Name] {
				return r.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": e.ToolID, "type": "custom",
					"custom": map[string]any{"name": e.Name, "input": ""}}}}, nil)
			}
			return r.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": e.ToolID, "type": "function",
				"function": map[string]any{"name": e.Name, "arguments": ""}}}}, nil)
		}
	case EvBlockStop:
		if e.Block != BlockToolUse || e.Index >= len(r.st.bufs) || r.st.bufs[e.Index] == nil {
			break
		}
		if r.custom(e.Index) {
			if in := freeformInput(r.st.toolInput(e.Index)); in != "" {
				return r.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": r.callIndex[e.Index], "custom": map[string]any{"input": in}}}}, nil)
			}
			break
		}
		// A call that carried no arguments has {}, as the whole answer
		// says and as OpenAI streams a call of a tool without
		// parameters: a client parses the fragments it joined, and ""
		// is not JSON.
		if trimJSONSpace(r.st.bufs[e.Index].args.String()) == "" {
			return r.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": r.callIndex[e.Index], "function": map[string]any{"arguments": "{}"}}}}, nil)
		}
	case EvDelta:
		switch e.Block {
		case BlockText:
			return r.textChunk("content", e.Text)
		case BlockThinking:
			if e.Text != "" {
				return r.textChunk("reasoning_content", e.Text)
			}
		case BlockToolUse:
			if !r.custom(e.Index) {
				return r.chunk(map[string]any{"tool_calls": []any{map[string]any{"index": r.callIndex[e.Index], "function": map[string]any{"arguments": e.Text}}}}, nil)
			}
		}
	case EvStop:
		out := r.chunk(map[string]any{}, chatFinish(r.st.finalStop()))
		if r.IncludeUsage {
			out = append(out, sse.AppendEvent(nil, "", mustJSON(map[string]any{
				"id": r.ID, "object": "chat.completion.chunk", "created": r.Created, "model": r.Model,
				"choices": []any{}, "usage": chatUsage(r.st.usage),
			}))...)
		}
		return append(out, "data: [DONE]\n\n"...)
	case EvError:
		_, body := OpenAIErrorFrom(e.Err)
		return sse.AppendEvent(nil, "", body)
	}
	return nil
}

// Body implements Renderer. It panics when r is Streamed: such a
// renderer kept no text to render.
func (r *ChatRenderer) Body() (int, []byte) {
	mustBuffer(r.Streamed)
	if r.st.err != nil {
		return OpenAIErrorFrom(r.st.err)
	}
	var text, reasoning strings.Builder
	var calls []any
	for i, b := range r.st.blocks {
		if b == nil {
			continue
		}
		switch b.Kind {
		case PartText:
			text.WriteString(b.Text)
		case PartThinking:
			reasoning.WriteString(b.Text)
		case PartToolUse:
			if r.Freeform[b.Name] {
				calls = append(calls, map[string]any{"id": b.ID, "type": "custom", "custom": map[string]any{"name": b.Name, "input": freeformInput(r.st.toolInput(i))}})
				continue
			}
			calls = append(calls, map[string]any{"id": b.ID, "type": "function", "function": map[string]any{"name": b.Name, "arguments": string(r.st.toolInput(i))}})
		}
	}
	msg := map[string]any{"role": "assistant", "content": text.String(), "refusal": nil}
	if reasoning.Len() > 0 {
		msg["reasoning_content"] = reasoning.String()
	}
	if calls != nil {
		msg["tool_calls"] = calls
		if text.Len() == 0 {
			msg["content"] = nil
		}
	}
	return http.StatusOK, mustJSON(map[string]any{
		"id": r.ID, "object": "chat.completion", "created": r.Created, "model": r.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": chatFinish(r.st.finalStop()), "logprobs": nil}},
		"usage":   chatUsage(r.st.usage),
	})
}

// OpenAIErrorFrom maps a failure to an HTTP status and OpenAI's error body.
func OpenAIErrorFrom(e *APIError) (int, []byte) {
	status := e.Status
	if status == 0 {
		status = 500
	}
	if e.Type == "overloaded" && status == 529 {
		status = 503
	}
	return status, OpenAIErrorBody(e.Message, openAIErrorType(e), OpenAIErrorCode(e.Type))
}

// openAIErrorType is the OpenAI error type a failure's canonical type
// stands for.
func openAIErrorType(e *APIError) string {
	switch e.Type {
	case "invalid_request", "context_length", "not_found":
		return "invalid_request_error"
	case "authentication":
		return "authentication_error"
	case "rate_limit":
		return "rate_limit_error"
	}
	return "server_error"
}

// --- Responses -----------------------------------------------------------

// ResponsesRenderer renders the Responses API: sequence_number on every
// event, response.output_item.added before any delta of an item, a
// message's content part and a reasoning item's summary part added
// before its deltas, the .done events, and a terminal event carrying the
// full response:
// response.failed, with its error, when the answer fails after the
// response was created (an error event when it fails before).
type ResponsesRenderer struct {
	ID, Model string
	Created   int64
	// Freeform names the client's custom tools (Request.FreeformTools).
	// A call of one is a custom_tool_call item whose input is the string
	// the model gave as the function's FreeformParam (its whole arguments
	// when it gave no such string). The input is whole only once the call
	// is, so it is streamed as one delta, right before its .done event.
	Freeform map[string]bool
	// Namespaced names the client's tools of a namespace
	// (Request.NamespacedTools): a call of one names the namespace and
	// the tool's own name, as the client gave them.
	Namespaced map[string]ToolRef
	// ToolSearch names the tool a client's tool_search is carried as
	// (Request.SearchTool): a call of it is a tool_search_call item,
	// whose arguments are an object, whole in its .done event.
	ToolSearch string
	// Seal gives a reasoning item an encrypted_content holding its
	// thinking block (SealedPrefix): its text, and an Anthropic model's
	// signature. OpenAI gives its own reasoning state so to a client that
	// includes reasoning.encrypted_content (Request.SealReasoning). A
	// client that sends the item back, as Codex does, has Anthropic go on
	// thinking through a tool loop, which it does only given its signed
	// thinking back, and has DeepSeek given its reasoning back
	// (ClassReasoningContent).
	Seal bool
	// Compact renders the answer to a request for a compaction's summary
	// (Request.Compact, from a compaction_trigger item) as the
	// compaction Codex waits for: one compaction item whose
	// encrypted_content carries the summary (sealedCompactionPrefix;
	// sent back, it is the user message of the summary), and none of the
	// answer's own items. An answer with no summary fails with 502; one
	// cut short by its output limit is taken as far as it goes.
	Compact bool
	st      state
	seq     int
	started bool
	itemIDs map[int]string
	closed  map[int]bool // the blocks stopped (their items done)
}

// custom reports whether block i is a call of a freeform tool.
func (r *ResponsesRenderer) custom(i int) bool { return r.st.custom(i, r.Freeform) }

// search reports whether block i is a call of the client's tool search.
func (r *ResponsesRenderer) search(i int) bool {
	if r.ToolSearch == "" || i >= len(r.st.blocks) || r.st.blocks[i] == nil {
		return false
	}
	b := r.st.blocks[i]
	return b.Kind == PartToolUse && b.Name == r.ToolSearch
}

// custom reports whether block i is a call of a freeform tool.
func (r *ChatRenderer) custom(i int) bool { return r.st.custom(i, r.Freeform) }

// custom reports whether block i is a call of one of the freeform tools.
func (s *state) custom(i int, freeform map[string]bool) bool {
	if i >= len(s.blocks) || s.blocks[i] == nil {
		return false
	}
	b := s.blocks[i]
	return b.Kind == PartToolUse && freeform[b.Name]
}

// freeformInput is a freeform tool's input, from the arguments of the
// function it was carried as.
func freeformInput(args json.RawMessage) string {
	var o map[string]json.RawMessage
	var in string
	if json.Unmarshal(args, &o) == nil && json.Unmarshal(o[FreeformParam], &in) == nil {
		return in
	}
	return string(args)
}

var _ Renderer = (*ResponsesRenderer)(nil)

func (r *ResponsesRenderer) ev(out []byte, typ string, f map[string]any) []byte {
	f["type"] = typ
	f["sequence_number"] = r.seq
	r.seq++
	return sse.AppendEvent(out, typ, mustJSON(f))
}

func (r *ResponsesRenderer) item(i int, final bool) map[string]any {
	b := r.st.blocks[i]
	id := r.itemIDs[i]
	status := "in_progress"
	if final {
		status = "completed"
	}
	switch b.Kind {
	case PartThinking:
		it := map[string]any{"type": "reasoning", "id": id, "summary": []any{map[string]any{"type": "summary_text", "text": b.Text}}}
		if final && r.Seal && (b.Text != "" || b.Signature != "") {
			it["encrypted_content"] = sealThinking(b.Text, b.Signature)
		}
		return it
	case PartToolUse:
		var it map[string]any
		if r.search(i) {
			var args any = map[string]any{}
			if in := r.st.toolInput(i); final && jsonObject(in) { // the decoders end an answer whose arguments are not
				args = in
			}
			return map[string]any{"type": "tool_search_call", "id": id, "call_id": b.ID, "execution": "client", "status": status, "arguments": args}
		}
		if r.Freeform[b.Name] {
			args := ""
			if final {
				args = freeformInput(r.st.toolInput(i))
			}
			it = map[string]any{"type": "custom_tool_call", "id": id, "call_id": b.ID, "name": b.Name, "input": args, "status": status}
		} else {
			args := ""
			if final {
				args = r.st.toolArgs(i)
			}
			it = map[string]any{"type": "function_call", "id": id, "call_id": b.ID, "name": b.Name, "arguments": args, "status": status}
		}
		if ref, ok := r.Namespaced[b.Name]; ok {
			it["namespace"], it["name"] = ref.Namespace, ref.Name
		}
		return it
	}
	content := []any{}
	if final {
		content = []any{map[string]any{"type": "output_text", "text": b.Text, "annotations": []any{}}}
	}
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant", "content": content}
}

// compaction is the compaction item of a Compact answer; ok is false
// when the answer has no summary.
func (r *ResponsesRenderer) compaction() (item map[string]any, ok bool) {
	summary, ok := r.st.summary()
	if !ok {
		return nil, false
	}
	return map[string]any{"type": "compaction", "id": "cmp_" + r.ID, "encrypted_content": sealCompaction(summary)}, true
}

// response is the response object with status. An in_progress one lists
// the items as they stand (those done in full, an open one as it was
// added), a finished one all of them in full.
func (r *ResponsesRenderer) response(status string) map[string]any {
	out := []any{}
	for i, b := range r.st.blocks {
		if b != nil && !r.Compact {
			out = append(out, r.item(i, status != "in_progress" || r.closed[i]))
		}
	}
	if it, ok := r.compaction(); r.Compact && ok && status == "completed" {
		out = append(out, it)
	}
	resp := map[string]any{"id": r.ID, "object": "response", "created_at": r.Created, "status": status, "model": r.Model,
		"output": out, "error": nil, "incomplete_details": nil, "usage": nil}
	if status == "completed" || status == "incomplete" {
		resp["usage"] = responsesUsageOf(r.st.usage)
	}
	if status == "incomplete" {
		reason := "max_output_tokens"
		if r.st.finalStop() == StopRefusal {
			reason = "content_filter"
		}
		resp["incomplete_details"] = map[string]any{"reason": reason}
	}
	return resp
}

// responsesUsageOf is u as a Responses usage object.
func responsesUsageOf(u Usage) map[string]any {
	return map[string]any{
		"input_tokens": u.Input, "input_tokens_details": map[string]any{"cached_tokens": u.Cached},
		"output_tokens": u.Output, "output_tokens_details": map[string]any{"reasoning_tokens": u.Reasoning},
		"total_tokens": u.Input + u.Output,
	}
}

// responsesStatus is a finished answer's Responses status: incomplete
// when it was cut off (by its limit) or withheld (a refusal, a content
// filter), completed otherwise.
func responsesStatus(s StopReason) string {
	if s == StopLength || s == StopRefusal {
		return "incomplete"
	}
	return "completed"
}

// AdoptID makes id the answer's id, in place of ID, unless the answer's
// start was rendered already (the id is fixed from then on); it reports
// whether it did.
func (r *ResponsesRenderer) AdoptID(id string) bool { return adoptID(&r.ID, r.started, id) }

// Heartbeat returns what a stream silent for a while is sent, in place
// of a comment: a response.in_progress event (the response as it stands),
// which Codex counts as the stream's activity where it counts no comment
// (its idle timeout waits for an event), and which the SDKs' stream
// helpers pass over; before the answer's start, the response.created and
// response.in_progress that start it (its id is then r.ID: AdoptID takes
// no other). It returns nil after the terminal.
func (r *ResponsesRenderer) Heartbeat() []byte {
	switch {
	case r.st.done:
		return nil
	case r.started:
		return r.ev(nil, "response.in_progress", map[string]any{"response": r.response("in_progress")})
	}
	return r.Event(Event{Kind: EvStart})
}

// Event implements Renderer.
func (r *ResponsesRenderer) Event(e Event) []byte {
	r.st.apply(e)
	if r.itemIDs == nil {
		r.itemIDs = map[int]string{}
		r.closed = map[int]bool{}
	}
	var out []byte
	if r.Compact {
		switch e.Kind {
		case EvBlockStart, EvDelta, EvBlockStop:
			return nil // gathered for the summary
		case EvStop:
			it, ok := r.compaction()
			if !ok {
				e = Event{Kind: EvError, Err: errNoSummary}
				break
			}
			out = r.ev(out, "response.output_item.added", map[string]any{"output_index": 0, "item": it})
			out = r.ev(out, "response.output_item.done", map[string]any{"output_index": 0, "item": it})
			return r.ev(out, "response.completed", map[string]any{"response": r.response("completed")})
		}
	}
	switch e.Kind {
	case EvStart:
		if r.started {
			return nil
		}
		r.started = true
		out = r.ev(out, "response.created", map[string]any{"response": r.response("in_progress")})
		out = r.ev(out, "response.in_progress", map[string]any{"response": r.response("in_progress")})
	case EvBlockStart:
		prefix := map[BlockKind]string{BlockText: "msg", BlockThinking: "rs", BlockToolUse: "fc"}[e.Block]
		switch {
		case r.custom(e.Index):
			prefix = "ctc"
		case r.search(e.Index):
			prefix = "tsc"
		}
		r.itemIDs[e.Index] = fmt.Sprintf("%s_%s_%d", prefix, r.ID, e.Index)
		out = r.ev(out, "response.output_item.added", map[string]any{"output_index": e.Index, "item": r.item(e.Index, false)})
		switch e.Block {
		case BlockText:
			out = r.ev(out, "response.content_part.added", map[string]any{"item_id": r.itemIDs[e.Index], "output_index": e.Index, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		case BlockThinking:
			out = r.ev(out, "response.reasoning_summary_part.added", map[string]any{"item_id": r.itemIDs[e.Index], "output_index": e.Index, "summary_index": 0,
				"part": map[string]any{"type": "summary_text", "text": ""}})
		}
	case EvDelta:
		id := r.itemIDs[e.Index]
		switch e.Block {
		case BlockText:
			out = r.ev(out, "response.output_text.delta", map[string]any{"item_id": id, "output_index": e.Index, "content_index": 0, "delta": e.Text})
		case BlockThinking:
			if e.Text != "" {
				out = r.ev(out, "response.reasoning_summary_text.delta", map[string]any{"item_id": id, "output_index": e.Index, "summary_index": 0, "delta": e.Text})
			}
		case BlockToolUse:
			if !r.custom(e.Index) && !r.search(e.Index) {
				out = r.ev(out, "response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": e.Index, "delta": e.Text})
			}
		}
	case EvBlockStop:
		id, b := r.itemIDs[e.Index], r.st.blocks[e.Index]
		r.closed[e.Index] = true
		switch e.Block {
		case BlockText:
			part := map[string]any{"type": "output_text", "text": b.Text, "annotations": []any{}}
			out = r.ev(out, "response.output_text.done", map[string]any{"item_id": id, "output_index": e.Index, "content_index": 0, "text": b.Text})
			out = r.ev(out, "response.content_part.done", map[string]any{"item_id": id, "output_index": e.Index, "content_index": 0, "part": part})
		case BlockThinking:
			out = r.ev(out, "response.reasoning_summary_text.done", map[string]any{"item_id": id, "output_index": e.Index, "summary_index": 0, "text": b.Text})
			out = r.ev(out, "response.reasoning_summary_part.done", map[string]any{"item_id": id, "output_index": e.Index, "summary_index": 0,
				"part": map[string]any{"type": "summary_text", "text": b.Text}})
		case BlockToolUse:
			if r.custom(e.Index) {
				in := freeformInput(r.st.toolInput(e.Index))
				if in != "" {
					out = r.ev(out, "response.custom_tool_call_input.delta", map[string]any{"item_id": id, "output_index": e.Index, "delta": in})
				}
				out = r.ev(out, "response.custom_tool_call_input.done", map[string]any{"item_id": id, "output_index": e.Index, "input": in})
				break
			}
			if !r.search(e.Index) { // a search's arguments are in its item
				out = r.ev(out, "response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": e.Index, "arguments": r.st.toolArgs(e.Index)})
			}
		}
		out = r.ev(out, "response.output_item.done", map[string]any{"output_index": e.Index, "item": r.item(e.Index, true)})
	case EvStop:
		status := responsesStatus(r.st.finalStop())
		out = r.ev(out, "response."+status, map[string]any{"response": r.response(status)})
	case EvError:
		code, msg := responsesError(e.Err)
		if !r.started {
			// No response was created to fail: the stream is this event.
			out = r.ev(out, "error", map[string]any{"code": code, "message": msg, "param": nil})
			break
		}
		// A created response ends with one of its three terminals, as
		// Codex and the SDKs' stream helpers require; a failed one carries
		// its error (Codex shows it, and waits as told on a rate limit,
		// where a bare error event reads as a broken stream).
		// Its output is not sent again: the items went out as events, and
		// an answer cut for its size would leave twice.
		resp := r.response("failed")
		resp["output"] = []any{}
		resp["error"] = map[string]any{"code": code, "message": msg}
		out = r.ev(out, "response.failed", map[string]any{"response": resp})
	}
	return out
}

// responsesError is a failure's Responses error code and message: the
// OpenAI error type, but the codes OpenAI gives a failed response for a
// rate limit (rate_limit_exceeded, which Codex waits on) and for a prompt
// past the context window (context_length_exceeded, which Codex tells
// its user as such).
func responsesError(e *APIError) (code, msg string) {
	if c, ok := OpenAIErrorCode(e.Type).(string); ok {
		return c, e.Message
	}
	if code = openAIErrorType(e); code == "rate_limit_error" {
		code = "rate_limit_exceeded"
	}
	return code, e.Message
}

// Body implements Renderer.
func (r *ResponsesRenderer) Body() (int, []byte) {
	if r.st.err != nil {
		return OpenAIErrorFrom(r.st.err)
	}
	if r.Compact {
		if _, ok := r.compaction(); !ok {
			return OpenAIErrorFrom(errNoSummary)
		}
		return http.StatusOK, mustJSON(r.response("completed"))
	}
	return http.StatusOK, mustJSON(r.response(responsesStatus(r.st.finalStop())))
}

// --- normalized runs ---------------------------------------------------

// RunEvents turns a normalized run's events into canonical events, so
// runs render through the same Renderers. It keeps block state across
// calls.
type RunEvents struct {
	seq     blockSeq
	started bool
}

// Convert returns the canonical events for one run event. The answer
// starts before anything else, whether or not the run reported its start
// first.
func (c *RunEvents) Convert(e execution.Event) []Event {
	c.seq.out = nil
	if !c.started && e.Kind != execution.EventFailed {
		c.started = true
		c.seq.out = append(c.seq.out, Event{Kind: EvStart, Model: e.Model})
	}
	switch e.Kind {
	case execution.EventStarted:
		// Started above, or a repeat: the answer starts once.
	case execution.EventDelta:
		kind := BlockText
		if e.Reasoning {
			kind = BlockThinking
		}
		if !c.seq.open || c.seq.kind != kind {
			c.seq.start(kind, "", "")
		}
		c.seq.delta(e.Text, "")
	case execution.EventToolCall:
		c.seq.start(BlockToolUse, e.ToolCall.ID, e.ToolCall.Name)
		c.seq.delta(e.ToolCall.Arguments, "")
		c.seq.stop()
	case execution.EventUsage:
		c.seq.out = append(c.seq.out, Event{Kind: EvUsage, Usage: Usage{Input: e.Usage.InputTokens, Output: e.Usage.OutputTokens, Cached: e.Usage.CachedInputTokens, Reasoning: e.Usage.ReasoningTokens}})
	case execution.EventCompleted:
		c.seq.stop()
		reason := StopEnd
		switch e.StopReason {
		case "length":
			reason = StopLength
		case "tool_calls":
			reason = StopToolUse
		case "content_filter":
			reason = StopRefusal
		}
		c.seq.out = append(c.seq.out, Event{Kind: EvStop, Reason: reason})
	case execution.EventFailed:
		c.seq.stop()
		c.seq.out = append(c.seq.out, Event{Kind: EvError, Err: FailureError(e.Failure)})
	}
	return c.seq.out
}
