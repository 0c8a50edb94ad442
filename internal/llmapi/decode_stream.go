package llmapi

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/iop-dev/iop/internal/sse"
)

// Decoder turns a provider's answer into canonical events, in order.
type Decoder interface {
	// Next returns the next event; io.EOF after the terminal (Stop or
	// Error).
	Next() (Event, error)
	// Release gives back what the decoder holds (a stream decoder's read
	// buffer, for the next stream); Next returns io.EOF after it. A
	// decoder never released costs only that its buffer is not reused.
	Release()
	// Ready reports whether Next would return without reading: a caller
	// relaying events holds its flush only while that is so.
	Ready() bool
}

// errUpstream is a malformed provider answer.
func errUpstream(format string, args ...any) *APIError {
	return &APIError{Status: 502, Type: "api_error", Message: fmt.Sprintf(format, args...)}
}

// providerFailed is the error a provider reported in its answer, of the
// canonical type typ, with the HTTP status that type stands for when it
// is the whole answer (a body, or a stream that failed before any output):
// a rate limit is 429 and an overload 503, as when the provider says so
// with its status, so that clients' retry rules apply; a refused request
// is 400; any other failure of the provider is 502. The message is msg,
// never the provider's own text, but for a prompt past the context
// window, which says so in the words clients act on (ContextOverflow).
func providerFailed(typ, msg string) *APIError {
	status := http.StatusBadGateway
	switch typ {
	case "rate_limit":
		status = http.StatusTooManyRequests
	case "overloaded":
		status = http.StatusServiceUnavailable
	case "invalid_request":
		status = http.StatusBadRequest
	case "context_length":
		status, msg = http.StatusBadRequest, "the prompt is too long for the model's context window"
	}
	return &APIError{Status: status, Type: typ, Message: msg}
}

// blockSeq assigns canonical block indices and keeps blocks from
// overlapping: a new block closes the open one first.
type blockSeq struct {
	out    []Event
	open   bool
	index  int
	kind   BlockKind
	toolID string
	name   string
	args   strings.Builder // the open tool call's arguments
	// argsBegun: the open tool call's arguments have passed their leading
	// whitespace.
	argsBegun bool
	nextIx    int
}

func (b *blockSeq) start(kind BlockKind, toolID, name string) {
	b.stop()
	if kind == BlockToolUse {
		if name == "" {
			b.out = append(b.out, errToolName())
			return
		}
		toolID = toolCallID(toolID)
	}
	b.open, b.kind, b.toolID, b.name, b.index = true, kind, toolID, name, b.nextIx
	b.args.Reset()
	b.argsBegun = false
	b.nextIx++
	b.out = append(b.out, Event{Kind: EvBlockStart, Index: b.index, Block: kind, ToolID: toolID, Name: name})
}

func (b *blockSeq) delta(text, sig string) {
	if b.kind == BlockToolUse {
		b.args.WriteString(text)
		if !b.argsBegun {
			// Whitespace before the arguments' JSON means nothing, and
			// arguments of whitespace alone, passed on, are no JSON to a
			// client that parses them: it is not passed on.
			if trimJSONSpace(text) == "" {
				return
			}
			b.argsBegun = true
		}
	}
	b.out = append(b.out, Event{Kind: EvDelta, Index: b.index, Block: b.kind, Text: text, Signature: sig})
}

func (b *blockSeq) stop() {
	if !b.open {
		return
	}
	b.open = false
	if b.kind == BlockToolUse && !toolArgsOK(b.args.String()) {
		b.out = append(b.out, errToolArgs(b.name))
		return
	}
	b.out = append(b.out, Event{Kind: EvBlockStop, Index: b.index, Block: b.kind})
}

// toolArgsOK reports whether a tool call's complete arguments are a JSON
// object (or empty, meaning no arguments). Anthropic clients parse input
// as an object; arguments that are not one cannot be translated and end
// the answer with an error instead of reaching the client half-valid.
func toolArgsOK(s string) bool {
	s = trimJSONSpace(s)
	return s == "" || (s[0] == '{' && json.Valid([]byte(s)))
}

// errToolName ends an answer whose provider called a tool without naming
// it: no client can run such a call, nor answer it.
func errToolName() Event {
	return Event{Kind: EvError, Err: errUpstream("the provider returned a tool call without a tool name")}
}

// toolCallID is a tool call's id: the provider's, or a new one when it
// gave none (some OpenAI-compatible servers do not). Clients answer a call
// by its id, and an Anthropic-format history refuses two calls with one
// id, so a made-up id is unique, never a counter.
func toolCallID(id string) string {
	if id != "" {
		return id
	}
	return "call_" + rand.Text()
}

func errToolArgs(name string) Event {
	return Event{Kind: EvError, Err: errUpstream("the provider returned arguments for tool %q that are not a JSON object", name)}
}

// queue is a Decoder fed by a step function that appends events.
type queue struct {
	events  []Event
	done    bool
	started bool         // the answer's start (or its error) was returned
	step    func() error // appends to events; io.EOF when the source ended
	rd      *sse.Reader  // the stream step reads, released by Release
}

func (q *queue) Release() {
	q.done, q.events = true, nil // Next never steps again
	if q.rd != nil {
		q.rd.Release()
		q.rd = nil
	}
}

func (q *queue) Next() (Event, error) {
	for len(q.events) == 0 {
		if q.done {
			return Event{}, io.EOF
		}
		if err := q.advance(); err != nil {
			return Event{}, err
		}
	}
	e := q.events[0]
	if !q.started && e.Kind != EvStart && e.Kind != EvError {
		// Whatever the provider sent first, a client's answer starts
		// before its content and its end.
		q.started = true
		return Event{Kind: EvStart}, nil
	}
	q.started = true
	q.events = q.events[1:]
	if e.Kind == EvStop || e.Kind == EvError {
		q.done = true
		q.events = nil
	}
	return e, nil
}

// advance runs one step. A read deadline (the caller's keep-alive tick)
// is returned, not a terminal: the stream resumes on the next call. Any
// other end of the source becomes the stream's terminal event.
func (q *queue) advance() error {
	err := q.step()
	if err == nil {
		return nil
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return err
	}
	var ae *APIError
	switch {
	case errors.As(err, &ae):
		q.events = append(q.events, Event{Kind: EvError, Err: ae})
	case err == io.EOF:
		q.events = append(q.events, Event{Kind: EvError, Err: errUpstream("the provider's stream ended without a terminal")})
	default:
		q.events = append(q.events, Event{Kind: EvError, Err: errUpstream("the provider's stream broke")})
	}
	q.done = true
	return nil
}

// Ready implements Decoder. Each step reads one source event, and the
// reader says exactly when it holds a whole one, so while it does, steps
// that yield no canonical event (a role chunk, an empty delta) are taken
// here, without reading.
func (q *queue) Ready() bool {
	for len(q.events) == 0 && !q.done {
		if q.rd == nil || !q.rd.Ready() || q.advance() != nil {
			return false
		}
	}
	return true
}

// --- Chat Completions stream -------------------------------------------

// DecodeChatStream decodes a Chat Completions SSE stream. Tool-call
// fragments are grouped by their index into one tool_use block each;
// text, reasoning and tool calls never overlap.
func DecodeChatStream(r io.Reader) Decoder {
	rd := sse.NewReader(r, 0)
	var seq blockSeq
	started, finished := false, false
	finish := ""
	refused := false // a refusal came in place of content
	var usage *Usage
	toolIdx := map[int]bool{}
	var callIndex = -1
	callID := ""                 // the open call's id, as the provider gave it
	callIDs := map[string]bool{} // the ids of the calls begun
	calls := 0
	d := &queue{rd: rd}
	d.step = func() error {
		ev, err := rd.Next()
		if err == io.EOF && (finished || finish != "") {
			seq.stop()
			if usage != nil {
				seq.out = append(seq.out, Event{Kind: EvUsage, Usage: *usage})
			}
			stop := chatStop(finish, calls)
			if refused && stop != StopToolUse {
				stop = StopRefusal
			}
			seq.out = append(seq.out, Event{Kind: EvStop, Reason: stop})
			d.events, seq.out = append(d.events, seq.out...), nil
			return nil
		}
		if err != nil {
			return err
		}
		if string(ev.Data) == "[DONE]" {
			finished = true
			return nil
		}
		var c chatChunk
		if err := decodeChatChunk(ev.Data, &c); err != nil {
			return errUpstream("malformed stream chunk")
		}
		if c.Error != nil {
			return providerFailed(chatErrorType(c.Error.Code), "the provider failed mid-stream")
		}
		if !started {
			started = true
			seq.out = append(seq.out, Event{Kind: EvStart, ID: c.ID, Model: c.Model})
		}
		for _, ch := range c.Choices {
			reasoning := ch.Delta.ReasoningContent
			if reasoning == nil {
				reasoning = ch.Delta.Reasoning
			}
			if reasoning != nil && *reasoning != "" {
				if !seq.open || seq.kind != BlockThinking {
					seq.start(BlockThinking, "", "")
				}
				seq.delta(*reasoning, "")
			}
			if ch.Delta.Content != nil && *ch.Delta.Content != "" {
				if !seq.open || seq.kind != BlockText {
					seq.start(BlockText, "", "")
				}
				seq.delta(*ch.Delta.Content, "")
			}
			if ch.Delta.Refusal != nil && *ch.Delta.Refusal != "" {
				// The refusal's text is the answer's text; the answer
				// ends as a refusal.
				refused = true
				if !seq.open || seq.kind != BlockText {
					seq.start(BlockText, "", "")
				}
				seq.delta(*ch.Delta.Refusal, "")
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index < 0 || tc.Index > 1024 {
					return errUpstream("tool call index out of range")
				}
				// A fragment with an id the open call does not have
				// begins a call: Gemini sends each call whole, without
				// an index, so parallel calls all come as index 0.
				newID := tc.ID != "" && tc.ID != callID
				if tc.Index != callIndex || !seq.open || seq.kind != BlockToolUse || newID {
					if toolIdx[tc.Index] && !newID || newID && callIDs[tc.ID] {
						return errUpstream("tool call %d resumed after another block", tc.Index)
					}
					if calls == maxChatCalls {
						return errUpstream("more than %d tool calls", maxChatCalls)
					}
					calls++
					toolIdx[tc.Index] = true
					callIndex, callID = tc.Index, tc.ID
					if tc.ID != "" {
						callIDs[tc.ID] = true
					}
					id := tc.ID
					if len(tc.ExtraContent) > 0 {
						id = withCallSignature(toolCallID(id), tc.ExtraContent)
					}
					seq.start(BlockToolUse, id, tc.Function.Name)
				}
				if tc.Function.Arguments != "" {
					seq.delta(tc.Function.Arguments, "")
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			u := c.Usage.canonical()
			usage = &u
		}
		d.events, seq.out = append(d.events, seq.out...), nil
		return nil
	}
	return d
}

// maxChatCalls bounds the tool calls of one Chat Completions answer, as
// its indices (0 to 1024) bound them for a provider that numbers them.
const maxChatCalls = 1025

// chatChunk is a Chat Completions stream chunk, as the decoder reads it.
type chatChunk struct {
	ID      string         `json:"id"`
	Model   string         `json:"model"`
	Choices []chatChoice   `json:"choices"`
	Usage   *chatUsageJSON `json:"usage"`
	Error   *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		// Code is, from vLLM and other OpenAI-compatible servers, the
		// HTTP status the error stands for (OpenAI's own codes are
		// strings).
		Code json.RawMessage `json:"code"`
	} `json:"error"`
}

// chatErrorType is the canonical type of a Chat Completions stream error
// whose code is an HTTP status (rate_limit for 429, overloaded for 503 and
// 529, invalid_request for 400, 413 and 422) or OpenAI's
// context_length_exceeded (context_length); any other code is an
// api_error.
func chatErrorType(code json.RawMessage) string {
	if string(code) == `"context_length_exceeded"` {
		return "context_length"
	}
	switch status, _ := strconv.Atoi(string(code)); status {
	case 429:
		return "rate_limit"
	case 503, 529:
		return "overloaded"
	case 400, 413, 422:
		return "invalid_request"
	}
	return "api_error"
}

type chatChoice struct {
	Delta struct {
		Content          *string `json:"content"`
		ReasoningContent *string `json:"reasoning_content"`
		Reasoning        *string `json:"reasoning"`
		// Refusal is the model's refusal of a structured-output request,
		// in place of content.
		Refusal   *string `json:"refusal"`
		ToolCalls []struct {
			Index    int          `json:"index"`
			ID       string       `json:"id"`
			Function chatFunction `json:"function"`
			// ExtraContent is Gemini's: the call's thought signature,
			// to be sent back with it (withCallSignature).
			ExtraContent json.RawMessage `json:"extra_content"`
		} `json:"tool_calls"`
	} `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// decodeChatChunk reads one Chat Completions stream chunk into c, as
// json.Unmarshal would. The usual chunk (an id, a model, one choice whose
// delta carries text) is read by a walk over its bytes instead of by
// reflection; a chunk in any other shape, or with anything the walk does
// not read exactly as encoding/json does (a key that differs from a known
// one only in case, a repeated key, a value of another type, tool calls,
// usage), goes to json.Unmarshal. A differential fuzz target holds the
// two to the same result.
func decodeChatChunk(data []byte, c *chatChunk) error {
	if fastChatChunk(data, c) {
		return nil
	}
	*c = chatChunk{}
	return json.Unmarshal(data, c)
}

var (
	chunkKeys  = []string{"id", "model", "choices", "usage", "error"}
	choiceKeys = []string{"delta", "finish_reason"}
	deltaKeys  = []string{"content", "reasoning_content", "reasoning", "refusal", "tool_calls"}
)

// fastChatChunk is decodeChatChunk's walk; it reports false, with c in
// any state, for a chunk it leaves to encoding/json.
func fastChatChunk(data []byte, c *chatChunk) bool {
	f, err := Scan(data, chunkKeys...) // valid JSON, an object, no repeated or case-folded key
	if err != nil || !isNull(f.Raw("usage")) || !isNull(f.Raw("error")) {
		return false
	}
	ok := true
	c.ID, ok = plainString(f.Raw("id"), ok)
	c.Model, ok = plainString(f.Raw("model"), ok)
	choices := f.Raw("choices")
	if !ok || choices == nil || choices[0] == 'n' {
		return ok // no choices (or null): nothing more to read
	}
	if choices[0] != '[' {
		return false
	}
	// A valid array: its elements are walked with the skip helpers.
	i := skipWS(choices, 1)
	if choices[i] == ']' {
		return true
	}
	c.Choices = c.Choices[:0]
	for {
		end := skipValue(choices, i)
		elem := choices[i:end]
		if elem[0] != '{' {
			return false
		}
		cf, err := scanValid(elem, choiceKeys) // checked with data
		if err != nil {
			return false
		}
		c.Choices = append(c.Choices, chatChoice{})
		ch := &c.Choices[len(c.Choices)-1]
		if ch.FinishReason, ok = plainStringPtr(cf.Raw("finish_reason")); !ok {
			return false
		}
		if d := cf.Raw("delta"); d != nil && d[0] != 'n' {
			if d[0] != '{' {
				return false
			}
			df, err := scanValid(d, deltaKeys)
			if err != nil || !isNull(df.Raw("tool_calls")) {
				return false
			}
			if ch.Delta.Content, ok = plainStringPtr(df.Raw("content")); !ok {
				return false
			}
			if ch.Delta.ReasoningContent, ok = plainStringPtr(df.Raw("reasoning_content")); !ok {
				return false
			}
			if ch.Delta.Reasoning, ok = plainStringPtr(df.Raw("reasoning")); !ok {
				return false
			}
			if ch.Delta.Refusal, ok = plainStringPtr(df.Raw("refusal")); !ok {
				return false
			}
		}
		i = skipWS(choices, end)
		if choices[i] == ']' {
			return true
		}
		i = skipWS(choices, i+1) // the comma
	}
}

// isNull reports whether a scanned value is absent or null.
func isNull(raw []byte) bool { return raw == nil || string(raw) == "null" }

// plainString reads a scanned string value as json.Unmarshal does into a
// string: absent or null leaves it empty. Anything but a string reports
// false (so does an earlier false, passed in as ok).
func plainString(raw []byte, ok bool) (string, bool) {
	if !ok {
		return "", false
	}
	if isNull(raw) {
		return "", true
	}
	if raw[0] != '"' {
		return "", false
	}
	return stringValue(raw)
}

// plainStringPtr reads a scanned value as json.Unmarshal does into a
// *string: absent or null is nil.
func plainStringPtr(raw []byte) (*string, bool) {
	if isNull(raw) {
		return nil, true
	}
	if raw[0] != '"' {
		return nil, false
	}
	s, ok := stringValue(raw)
	return &s, ok
}

// stringValue decodes a JSON string literal: one without escapes and
// all ASCII is its bytes; any other (escapes, or bytes from 0x80 up,
// which encoding/json checks as UTF-8) goes through encoding/json.
func stringValue(lit []byte) (string, bool) {
	inner := lit[1 : len(lit)-1]
	for _, b := range inner {
		if b == '\\' || b >= 0x80 {
			s, err := unquote(lit)
			return s, err == nil
		}
	}
	return string(inner), true
}

// chatFunction is a Chat Completions tool call's function: in a request's
// messages, a buffered answer and a stream chunk alike.
type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatUsageJSON struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (u *chatUsageJSON) canonical() Usage {
	out := Usage{Input: u.PromptTokens, Output: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.Cached = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		out.Reasoning = u.CompletionTokensDetails.ReasoningTokens
	}
	return out
}

// chatStop maps finish_reason; a turn with a tool call is tool_use.
func chatStop(finish string, toolCalls int) StopReason {
	if toolCalls > 0 {
		return StopToolUse
	}
	switch finish {
	case "length":
		return StopLength
	case "content_filter":
		return StopRefusal
	case "tool_calls", "function_call":
		return StopToolUse
	}
	return StopEnd
}

// --- Anthropic Messages stream ------------------------------------------

// DecodeAnthropicStream decodes an Anthropic Messages SSE stream.
func DecodeAnthropicStream(r io.Reader) Decoder {
	rd := sse.NewReader(r, 0)
	var usage Usage
	stop := StopReason("")
	// provider index -> canonical index, so a provider's indices are never
	// trusted to be increasing or unique.
	var seq blockSeq
	provOpen := map[int]bool{}
	started := false
	d := &queue{rd: rd}
	d.step = func() error {
		ev, err := rd.Next()
		if err != nil {
			return err
		}
		var m anthropicEvent
		if err := decodeAnthropicEvent(ev.Data, &m); err != nil {
			return errUpstream("malformed stream event")
		}
		switch m.Type {
		case "message_start":
			if started {
				return errUpstream("a second message_start")
			}
			started = true
			usage = m.Message.Usage.canonical()
			d.events = append(d.events, Event{Kind: EvStart, ID: m.Message.ID, Model: m.Message.Model})
		case "content_block_start":
			if !started || provOpen[m.Index] {
				return errUpstream("content_block_start out of order")
			}
			if len(provOpen) >= maxOpenBlocks {
				return errUpstream("too many content blocks open at once")
			}
			provOpen[m.Index] = true
			switch cb := m.ContentBlock; cb.Type {
			case "text":
				seq.start(BlockText, "", "")
				if cb.Text != "" {
					seq.delta(cb.Text, "")
				}
			case "thinking":
				seq.start(BlockThinking, "", "")
				if cb.Thinking != "" {
					seq.delta(cb.Thinking, "")
				}
			case "redacted_thinking":
				// Its data, whole in the start, is the block's signature
				// (redactedPrefix), as a request's redacted block is.
				seq.start(BlockThinking, "", "")
				if cb.Data != "" {
					seq.delta("", redactedPrefix+cb.Data)
				}
			case "tool_use", "server_tool_use":
				seq.start(BlockToolUse, cb.ID, cb.Name)
				if in := strings.TrimSpace(string(cb.Input)); in != "" && in != "{}" {
					seq.delta(in, "")
				}
			default:
				seq.start(BlockText, "", "") // unknown block kinds carry no text
			}
		case "content_block_delta":
			if !provOpen[m.Index] {
				return errUpstream("delta for a block that is not open")
			}
			switch m.Delta.Type {
			case "text_delta":
				seq.delta(m.Delta.Text, "")
			case "thinking_delta":
				seq.delta(m.Delta.Thinking, "")
			case "signature_delta":
				seq.delta("", m.Delta.Signature)
			case "input_json_delta":
				seq.delta(m.Delta.PartialJSON, "")
			}
		case "content_block_stop":
			if !provOpen[m.Index] {
				return errUpstream("stop for a block that is not open")
			}
			delete(provOpen, m.Index)
			seq.stop()
		case "message_delta":
			stop = anthropicStop(m.Delta.StopReason)
			if m.Usage != nil {
				usage.Output = m.Usage.OutputTokens
				if m.Usage.InputTokens != 0 {
					// Newer API versions total the input here too, the
					// cache reads with it. An absent count reads 0 and
					// leaves message_start's; a negative one is taken, and
					// SumTokens makes the total impossible.
					usage.Input = SumTokens(m.Usage.InputTokens, m.Usage.CacheReadInputTokens, m.Usage.CacheCreationInputTokens)
					usage.Cached = m.Usage.CacheReadInputTokens
				}
			}
		case "message_stop":
			seq.stop()
			seq.out = append(seq.out, Event{Kind: EvUsage, Usage: usage}, Event{Kind: EvStop, Reason: orEnd(stop)})
		case "error":
			return providerFailed(errorTypeFromAnthropic(m.Error.Type), "the provider failed mid-stream")
		}
		d.events, seq.out = append(d.events, seq.out...), nil
		return nil
	}
	return d
}

// maxOpenBlocks bounds the content blocks an Anthropic stream holds open
// at once (a provider's indices are its own; each open one is remembered
// until its content_block_stop).
const maxOpenBlocks = 1024

// anthropicEvent is an Anthropic Messages stream event, as the decoder
// reads it.
type anthropicEvent struct {
	Type    string `json:"type"`
	Index   int    `json:"index"`
	Message struct {
		ID    string             `json:"id"`
		Model string             `json:"model"`
		Usage anthropicUsageJSON `json:"usage"`
	} `json:"message"`
	ContentBlock struct {
		Type      string          `json:"type"`
		ID        string          `json:"id"`
		Name      string          `json:"name"`
		Text      string          `json:"text"`
		Thinking  string          `json:"thinking"`
		Input     json.RawMessage `json:"input"`
		Signature string          `json:"signature"`
		Data      string          `json:"data"` // redacted_thinking
	} `json:"content_block"`
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		Thinking    string `json:"thinking"`
		Signature   string `json:"signature"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthropicUsageJSON `json:"usage"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// decodeAnthropicEvent reads one Anthropic stream event into m, as
// json.Unmarshal would. A content_block_delta (the event a stream repeats
// per token) is read by a walk over its bytes; any other event, or a delta
// with anything the walk does not read exactly as encoding/json does,
// goes to json.Unmarshal (see decodeChatChunk). FuzzAnthropicEvent holds
// the two to the same result.
func decodeAnthropicEvent(data []byte, m *anthropicEvent) error {
	if fastAnthropicDelta(data, m) {
		return nil
	}
	*m = anthropicEvent{}
	return json.Unmarshal(data, m)
}

var (
	anthropicEventKeys = []string{"type", "index", "message", "content_block", "delta", "usage", "error"}
	anthropicDeltaKeys = []string{"type", "text", "thinking", "signature", "partial_json", "stop_reason"}
)

// fastAnthropicDelta is decodeAnthropicEvent's walk for a
// content_block_delta; it reports false, with m in any state, for an event
// it leaves to encoding/json.
func fastAnthropicDelta(data []byte, m *anthropicEvent) bool {
	f, err := Scan(data, anthropicEventKeys...)
	if err != nil || string(f.Raw("type")) != `"content_block_delta"` ||
		!isNull(f.Raw("message")) || !isNull(f.Raw("content_block")) || !isNull(f.Raw("usage")) || !isNull(f.Raw("error")) {
		return false
	}
	m.Type = "content_block_delta"
	if raw := f.Raw("index"); !isNull(raw) {
		n, err := strconv.Atoi(string(raw)) // an integer in int's range, as encoding/json takes into an int
		if err != nil {
			return false
		}
		m.Index = n
	}
	d := f.Raw("delta")
	if isNull(d) {
		return true
	}
	if d[0] != '{' {
		return false
	}
	df, err := scanValid(d, anthropicDeltaKeys) // checked with data
	if err != nil {
		return false
	}
	ok := true
	m.Delta.Type, ok = plainString(df.Raw("type"), ok)
	m.Delta.Text, ok = plainString(df.Raw("text"), ok)
	m.Delta.Thinking, ok = plainString(df.Raw("thinking"), ok)
	m.Delta.Signature, ok = plainString(df.Raw("signature"), ok)
	m.Delta.PartialJSON, ok = plainString(df.Raw("partial_json"), ok)
	m.Delta.StopReason, ok = plainString(df.Raw("stop_reason"), ok)
	return ok
}

func orEnd(s StopReason) StopReason {
	if s == "" {
		return StopEnd
	}
	return s
}

type anthropicUsageJSON struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

func (u anthropicUsageJSON) canonical() Usage {
	return Usage{Input: SumTokens(u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens), Output: u.OutputTokens, Cached: u.CacheReadInputTokens}
}

func anthropicStop(s string) StopReason {
	switch s {
	case "max_tokens", "model_context_window_exceeded":
		// The answer was cut off: by its limit, or by the context window.
		return StopLength
	case "tool_use":
		return StopToolUse
	case "stop_sequence":
		return StopSequence
	case "refusal":
		return StopRefusal
	}
	return StopEnd
}

// errorTypeFromAnthropic is the canonical type of an Anthropic error
// event's type; one outside the API's documented set is api_error.
func errorTypeFromAnthropic(t string) string {
	switch t {
	case "overloaded_error":
		return "overloaded"
	case "rate_limit_error":
		return "rate_limit"
	case "invalid_request_error", "request_too_large":
		return "invalid_request"
	case "authentication_error":
		return "authentication"
	case "permission_error":
		return "permission"
	case "not_found_error":
		return "not_found"
	}
	return "api_error"
}

// --- Responses stream ----------------------------------------------------

// DecodeResponsesStream decodes a Responses SSE stream. A function call's
// arguments that arrive only in the .done event become one delta. A
// refusal's text is the answer's text, and the answer ends as a refusal
// (as a Chat Completions refusal does).
func DecodeResponsesStream(r io.Reader) Decoder {
	rd := sse.NewReader(r, 0)
	var seq blockSeq
	started, refused := false, false
	got := map[string]bool{} // item id -> saw argument or text deltas
	openItem := ""
	tools := 0
	d := &queue{rd: rd}
	d.step = func() error {
		ev, err := rd.Next()
		if err != nil {
			return err
		}
		var m struct {
			Type     string          `json:"type"`
			ItemID   string          `json:"item_id"`
			Delta    string          `json:"delta"`
			Text     string          `json:"text"`
			Args     string          `json:"arguments"`
			Refusal  string          `json:"refusal"`
			Summary  int             `json:"summary_index"`
			Item     responsesItem   `json:"item"`
			Response *responsesBody  `json:"response"`
			Message  string          `json:"message"`
			Code     json.RawMessage `json:"code"`
		}
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			return errUpstream("malformed stream event")
		}
		if !started && m.Response != nil {
			started = true
			d.events = append(d.events, Event{Kind: EvStart, ID: m.Response.ID, Model: m.Response.Model})
		}
		switch m.Type {
		case "response.output_item.added":
			openItem = m.Item.ID
			switch m.Item.Type {
			case "message":
				seq.start(BlockText, "", "")
			case "reasoning":
				seq.start(BlockThinking, "", "")
			case "function_call":
				tools++
				seq.start(BlockToolUse, m.Item.CallID, m.Item.Name)
			default:
				seq.start(BlockText, "", "")
			}
		case "response.output_text.delta", "response.reasoning_summary_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta":
			if m.ItemID != openItem || !seq.open {
				return errUpstream("delta for an item that is not open")
			}
			got[m.ItemID] = true
			seq.delta(m.Delta, "")
		case "response.reasoning_summary_part.added":
			// A summary's parts are paragraphs (each a titled step);
			// in one thinking block they are kept apart.
			if m.ItemID == openItem && seq.open && seq.kind == BlockThinking && m.Summary > 0 {
				seq.delta("\n\n", "")
			}
		case "response.refusal.delta", "response.refusal.done":
			if m.ItemID != openItem || !seq.open {
				return errUpstream("delta for an item that is not open")
			}
			refused = true
			text := m.Delta
			if m.Type == "response.refusal.done" {
				if got[m.ItemID] {
					break // the deltas had it
				}
				text = m.Refusal // it came only whole
			}
			got[m.ItemID] = true
			if text != "" {
				seq.delta(text, "")
			}
		case "response.function_call_arguments.done":
			if m.ItemID == openItem && seq.open && !got[m.ItemID] && m.Args != "" {
				seq.delta(m.Args, "") // the arguments came only whole
				got[m.ItemID] = true
			}
		case "response.output_text.done":
			if m.ItemID == openItem && seq.open && !got[m.ItemID] && m.Text != "" {
				seq.delta(m.Text, "")
				got[m.ItemID] = true
			}
		case "response.output_item.done":
			if m.Item.ID == openItem {
				if m.Item.Type == "function_call" && !got[m.Item.ID] && m.Item.Arguments != "" && seq.open {
					seq.delta(m.Item.Arguments, "")
					got[m.Item.ID] = true
				}
				if m.Item.Type == "reasoning" && m.Item.EncryptedContent != "" && seq.open && seq.kind == BlockThinking {
					seq.delta("", reasoningSignature(m.Item.EncryptedContent))
				}
				if m.Item.Type == "message" && !got[m.Item.ID] && seq.open {
					// The text came only in the finished item.
					for _, c := range m.Item.Content {
						if t := c.Text + c.Refusal; t != "" {
							seq.delta(t, "")
						}
						refused = refused || c.Type == "refusal"
					}
					got[m.Item.ID] = true
				}
				seq.stop()
				openItem = ""
			}
		case "response.completed", "response.incomplete":
			seq.stop()
			if m.Response != nil && m.Response.Usage != nil {
				seq.out = append(seq.out, Event{Kind: EvUsage, Usage: m.Response.Usage.canonical()})
			}
			reason := StopEnd
			switch {
			case tools > 0:
				reason = StopToolUse
			case m.Type == "response.incomplete":
				reason = m.Response.incompleteStop()
			case refused:
				reason = StopRefusal
			}
			seq.out = append(seq.out, Event{Kind: EvStop, Reason: reason})
		case "response.failed":
			var code json.RawMessage
			if m.Response != nil && m.Response.Error != nil {
				code = m.Response.Error.Code
			}
			return providerFailed(responsesErrorType(code), "the provider failed mid-stream")
		case "error":
			return providerFailed(responsesErrorType(m.Code), "the provider failed mid-stream")
		}
		d.events, seq.out = append(d.events, seq.out...), nil
		return nil
	}
	return d
}

type responsesItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	// EncryptedContent is a reasoning item's state, when the request
	// included it (reasoningSignature).
	EncryptedContent string `json:"encrypted_content"`
	// Content is a message's output_text and refusal parts, or a
	// reasoning item's reasoning_text parts.
	Content []struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Refusal string `json:"refusal"`
	} `json:"content"`
	Summary []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

type responsesBody struct {
	ID                string          `json:"id"`
	Model             string          `json:"model"`
	Status            string          `json:"status"`
	Output            []responsesItem `json:"output"`
	Usage             *responsesUsage `json:"usage"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	// Error is a failed response's (status "failed").
	Error *struct {
		Code json.RawMessage `json:"code"`
	} `json:"error"`
}

// responsesErrorType is the canonical type of a Responses error code:
// rate_limit_exceeded; context_length_exceeded; invalid_prompt and the
// codes of an image the request carried (invalid_image, image_too_large,
// ...), which are the request's; an HTTP status, as some compatible
// servers send it (see chatErrorType); anything else (server_error) is an
// api_error.
func responsesErrorType(code json.RawMessage) string {
	var c string
	if json.Unmarshal(code, &c) != nil {
		return chatErrorType(code)
	}
	switch {
	case c == "rate_limit_exceeded":
		return "rate_limit"
	case c == "context_length_exceeded":
		return "context_length"
	case c == "invalid_prompt", strings.HasPrefix(c, "invalid_"), strings.Contains(c, "image"):
		return "invalid_request"
	}
	return "api_error"
}

// reasoningSignature is the Signature of a thinking block that was a
// Responses reasoning item whose state is encrypted (openAIReasoningPrefix).
func reasoningSignature(encrypted string) string {
	return openAIReasoningPrefix + encrypted
}

// incompleteStop is why a Responses answer is incomplete, canonically: a
// content filter withheld the rest (a refusal), or it was cut off.
func (r *responsesBody) incompleteStop() StopReason {
	if r != nil && r.IncompleteDetails != nil && r.IncompleteDetails.Reason == "content_filter" {
		return StopRefusal
	}
	return StopLength
}

type responsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

func (u *responsesUsage) canonical() Usage {
	out := Usage{Input: u.InputTokens, Output: u.OutputTokens}
	if u.InputTokensDetails != nil {
		out.Cached = u.InputTokensDetails.CachedTokens
	}
	if u.OutputTokensDetails != nil {
		out.Reasoning = u.OutputTokensDetails.ReasoningTokens
	}
	return out
}

// --- buffered answers ----------------------------------------------------

// answer is a buffered provider answer in canonical form.
type answer struct {
	id, model string
	blocks    []Part
	stop      StopReason
	usage     Usage
}

// events renders a buffered answer as the event sequence a stream would
// have produced, so buffered answers reach clients through the same
// projectors.
func (a *answer) events() []Event {
	out := []Event{{Kind: EvStart, ID: a.id, Model: a.model}}
	for i, b := range a.blocks {
		switch b.Kind {
		case PartText:
			out = append(out, Event{Kind: EvBlockStart, Index: i, Block: BlockText})
			if b.Text != "" {
				out = append(out, Event{Kind: EvDelta, Index: i, Block: BlockText, Text: b.Text})
			}
			out = append(out, Event{Kind: EvBlockStop, Index: i, Block: BlockText})
		case PartThinking:
			out = append(out, Event{Kind: EvBlockStart, Index: i, Block: BlockThinking},
				Event{Kind: EvDelta, Index: i, Block: BlockThinking, Text: b.Text, Signature: b.Signature},
				Event{Kind: EvBlockStop, Index: i, Block: BlockThinking})
		case PartToolUse:
			if b.Name == "" {
				return append(out, errToolName())
			}
			out = append(out, Event{Kind: EvBlockStart, Index: i, Block: BlockToolUse, ToolID: toolCallID(b.ID), Name: b.Name})
			if !toolArgsOK(string(b.Input)) {
				return append(out, errToolArgs(b.Name))
			}
			if len(bytes.TrimSpace(b.Input)) > 0 { // whitespace alone is no arguments
				out = append(out, Event{Kind: EvDelta, Index: i, Block: BlockToolUse, Text: string(b.Input)})
			}
			out = append(out, Event{Kind: EvBlockStop, Index: i, Block: BlockToolUse})
		}
	}
	return append(out, Event{Kind: EvUsage, Usage: a.usage}, Event{Kind: EvStop, Reason: a.stop})
}

type listDecoder struct{ events []Event }

func (l *listDecoder) Release() { l.events = nil }

func (l *listDecoder) Ready() bool { return true } // nothing to read

func (l *listDecoder) Next() (Event, error) {
	if len(l.events) == 0 {
		return Event{}, io.EOF
	}
	e := l.events[0]
	l.events = l.events[1:]
	return e, nil
}

// unmarshalObject decodes body, which must be one JSON object, into v:
// json.Unmarshal alone takes null as a no-op, and an empty success would
// reach the client in place of the provider's broken answer.
func unmarshalObject(body []byte, v any) error {
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errors.New("not a JSON object")
	}
	return json.Unmarshal(body, v)
}

func malformedAnswer() Decoder {
	return &listDecoder{events: []Event{{Kind: EvError, Err: errUpstream("malformed answer")}}}
}

// DecodeChat decodes a buffered Chat Completions answer.
func DecodeChat(body []byte) Decoder {
	var c struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content          *string `json:"content"`
				ReasoningContent *string `json:"reasoning_content"`
				Reasoning        *string `json:"reasoning"`
				Refusal          *string `json:"refusal"`
				ToolCalls        []struct {
					ID           string          `json:"id"`
					Function     chatFunction    `json:"function"`
					ExtraContent json.RawMessage `json:"extra_content"` // see withCallSignature
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *chatUsageJSON `json:"usage"`
		Error *struct {
			Code json.RawMessage `json:"code"`
		} `json:"error"`
	}
	if err := unmarshalObject(body, &c); err != nil {
		return malformedAnswer()
	}
	if c.Error != nil && len(c.Choices) == 0 {
		// An error body sent with a success status.
		return &listDecoder{events: []Event{{Kind: EvError, Err: providerFailed(chatErrorType(c.Error.Code), "the provider failed")}}}
	}
	if len(c.Choices) == 0 {
		return malformedAnswer()
	}
	ch := c.Choices[0]
	a := &answer{id: c.ID, model: c.Model, stop: chatStop(ch.FinishReason, len(ch.Message.ToolCalls))}
	reasoning := ch.Message.ReasoningContent
	if reasoning == nil {
		reasoning = ch.Message.Reasoning // Ollama's and newer vLLM's name
	}
	if r := reasoning; r != nil && *r != "" {
		a.blocks = append(a.blocks, Part{Kind: PartThinking, Text: *r})
	}
	if t := ch.Message.Content; t != nil && *t != "" {
		a.blocks = append(a.blocks, Part{Kind: PartText, Text: *t})
	}
	if t := ch.Message.Refusal; t != nil && *t != "" {
		a.blocks = append(a.blocks, Part{Kind: PartText, Text: *t})
		if a.stop != StopToolUse {
			a.stop = StopRefusal
		}
	}
	for _, tc := range ch.Message.ToolCalls {
		id := tc.ID
		if len(tc.ExtraContent) > 0 {
			id = withCallSignature(toolCallID(id), tc.ExtraContent)
		}
		a.blocks = append(a.blocks, Part{Kind: PartToolUse, ID: id, Name: tc.Function.Name, Input: json.RawMessage(tc.Function.Arguments)})
	}
	if c.Usage != nil {
		a.usage = c.Usage.canonical()
	}
	return &listDecoder{events: a.events()}
}

// DecodeAnthropic decodes a buffered Anthropic Messages answer.
func DecodeAnthropic(body []byte) Decoder {
	var m struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Content []struct {
			Type      string          `json:"type"`
			Text      string          `json:"text"`
			Thinking  string          `json:"thinking"`
			Signature string          `json:"signature"`
			Data      string          `json:"data"` // redacted_thinking
			ID        string          `json:"id"`
			Name      string          `json:"name"`
			Input     json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string             `json:"stop_reason"`
		Usage      anthropicUsageJSON `json:"usage"`
		Type       string             `json:"type"`
		Error      struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := unmarshalObject(body, &m); err != nil {
		return malformedAnswer()
	}
	if m.Type == "error" {
		// An error body sent with a success status.
		return &listDecoder{events: []Event{{Kind: EvError, Err: providerFailed(errorTypeFromAnthropic(m.Error.Type), "the provider failed")}}}
	}
	a := &answer{id: m.ID, model: m.Model, stop: anthropicStop(m.StopReason), usage: m.Usage.canonical()}
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			a.blocks = append(a.blocks, Part{Kind: PartText, Text: b.Text})
		case "thinking":
			a.blocks = append(a.blocks, Part{Kind: PartThinking, Text: b.Thinking, Signature: b.Signature})
		case "redacted_thinking":
			a.blocks = append(a.blocks, Part{Kind: PartThinking, Signature: redactedPrefix + b.Data})
		case "tool_use":
			a.blocks = append(a.blocks, Part{Kind: PartToolUse, ID: b.ID, Name: b.Name, Input: b.Input})
		}
	}
	for _, b := range a.blocks {
		if b.Kind == PartToolUse {
			a.stop = StopToolUse
		}
	}
	return &listDecoder{events: a.events()}
}

// DecodeResponses decodes a buffered Responses answer.
func DecodeResponses(body []byte) Decoder {
	var r responsesBody
	if err := unmarshalObject(body, &r); err != nil {
		return malformedAnswer()
	}
	if r.Status == "failed" {
		var code json.RawMessage
		if r.Error != nil {
			code = r.Error.Code
		}
		return &listDecoder{events: []Event{{Kind: EvError, Err: providerFailed(responsesErrorType(code), "the provider failed")}}}
	}
	a := &answer{id: r.ID, model: r.Model, stop: StopEnd}
	refused := false
	if r.Status == "incomplete" {
		a.stop = r.incompleteStop()
	}
	for _, it := range r.Output {
		switch it.Type {
		case "message":
			var b strings.Builder
			for _, c := range it.Content {
				b.WriteString(c.Text)
				if c.Type == "refusal" {
					// The refusal's text is the answer's text; the
					// answer ends as a refusal.
					b.WriteString(c.Refusal)
					refused = true
				}
			}
			a.blocks = append(a.blocks, Part{Kind: PartText, Text: b.String()})
		case "reasoning":
			// The summary, or else the reasoning itself (open-weight
			// models served in Responses format send it as
			// reasoning_text content).
			var b strings.Builder
			for i, s := range it.Summary {
				if i > 0 {
					b.WriteString("\n\n")
				}
				b.WriteString(s.Text)
			}
			if b.Len() == 0 {
				for _, c := range it.Content {
					b.WriteString(c.Text)
				}
			}
			p := Part{Kind: PartThinking, Text: b.String()}
			if it.EncryptedContent != "" {
				p.Signature = reasoningSignature(it.EncryptedContent)
			}
			a.blocks = append(a.blocks, p)
		case "function_call":
			a.blocks = append(a.blocks, Part{Kind: PartToolUse, ID: it.CallID, Name: it.Name, Input: json.RawMessage(it.Arguments)})
			a.stop = StopToolUse
		}
	}
	if refused && a.stop == StopEnd {
		a.stop = StopRefusal
	}
	if r.Usage != nil {
		a.usage = r.Usage.canonical()
	}
	return &listDecoder{events: a.events()}
}
