package llmapi

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/sse"
)

// Projector turns a run's ordered events into one client format. The same
// projector serves buffered and streamed answers: Event returns the stream
// bytes for each event (a buffered answer ignores them) while accumulating
// what Body returns after the terminal, so both see one interpretation of
// the run and one terminal.
type Projector interface {
	// Event consumes the next event and returns the SSE bytes to send.
	Event(e execution.Event) []byte
	// Body returns the buffered answer; valid after a Completed event.
	Body() []byte
}

// acc accumulates what every projector needs.
type acc struct {
	text, reasoning strings.Builder
	calls           []execution.ToolCall
	usage           *execution.Usage
	stop            string
	failure         *execution.Failure
}

func (a *acc) add(e execution.Event) {
	switch e.Kind {
	case execution.EventDelta:
		if e.Reasoning {
			a.reasoning.WriteString(e.Text)
		} else {
			a.text.WriteString(e.Text)
		}
	case execution.EventToolCall:
		a.calls = append(a.calls, *e.ToolCall)
	case execution.EventUsage:
		u := *e.Usage
		a.usage = &u
	case execution.EventCompleted:
		a.stop = e.StopReason
	case execution.EventFailed:
		a.failure = e.Failure
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("llmapi: marshal: " + err.Error())
	}
	return b
}

// ChatUsage renders usage in Chat Completions' shape.
func ChatUsage(u *execution.Usage) map[string]any {
	if u == nil {
		u = &execution.Usage{}
	}
	return map[string]any{
		"prompt_tokens":             u.InputTokens,
		"completion_tokens":         u.OutputTokens,
		"total_tokens":              u.InputTokens + u.OutputTokens,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedInputTokens},
		"completion_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
	}
}

// ChatProjector renders Chat Completions.
type ChatProjector struct {
	ID           string
	Model        string
	Created      int64
	IncludeUsage bool
	acc
	ncalls int
}

var _ Projector = (*ChatProjector)(nil)

func (p *ChatProjector) chunk(delta map[string]any, finish any) []byte {
	return sse.AppendEvent(nil, "", mustJSON(map[string]any{
		"id": p.ID, "object": "chat.completion.chunk", "created": p.Created, "model": p.Model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
	}))
}

// Event implements Projector.
func (p *ChatProjector) Event(e execution.Event) []byte {
	p.add(e)
	switch e.Kind {
	case execution.EventStarted:
		return p.chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	case execution.EventDelta:
		if e.Reasoning {
			return p.chunk(map[string]any{"reasoning_content": e.Text}, nil)
		}
		return p.chunk(map[string]any{"content": e.Text}, nil)
	case execution.EventToolCall:
		i := p.ncalls
		p.ncalls++
		return p.chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": e.ToolCall.ID, "type": "function",
			"function": map[string]any{"name": e.ToolCall.Name, "arguments": e.ToolCall.Arguments},
		}}}, nil)
	case execution.EventCompleted:
		out := p.chunk(map[string]any{}, FinishReason(e.StopReason, len(p.calls)))
		if p.IncludeUsage {
			out = append(out, sse.AppendEvent(nil, "", mustJSON(map[string]any{
				"id": p.ID, "object": "chat.completion.chunk", "created": p.Created, "model": p.Model,
				"choices": []any{}, "usage": ChatUsage(p.usage),
			}))...)
		}
		return append(out, "data: [DONE]\n\n"...)
	case execution.EventFailed:
		status, body := OpenAIError(e.Failure)
		_ = status
		return sse.AppendEvent(nil, "", body)
	}
	return nil
}

// Body implements Projector.
func (p *ChatProjector) Body() []byte {
	msg := map[string]any{"role": "assistant", "content": p.text.String(), "refusal": nil}
	if p.reasoning.Len() > 0 {
		msg["reasoning_content"] = p.reasoning.String()
	}
	if len(p.calls) > 0 {
		if p.text.Len() == 0 {
			msg["content"] = nil
		}
		var calls []any
		for _, c := range p.calls {
			calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		msg["tool_calls"] = calls
	}
	return mustJSON(map[string]any{
		"id": p.ID, "object": "chat.completion", "created": p.Created, "model": p.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": FinishReason(p.stop, len(p.calls)), "logprobs": nil}},
		"usage":   ChatUsage(p.usage),
	})
}

// ResponsesProjector renders the Responses API.
type ResponsesProjector struct {
	ID      string
	Model   string
	Created int64
	acc
	seq     int
	items   []map[string]any // output items, in order
	openMsg int              // index of the open message item, -1 when none
	started bool
}

var _ Projector = (*ResponsesProjector)(nil)

func (p *ResponsesProjector) ev(out []byte, typ string, fields map[string]any) []byte {
	fields["type"] = typ
	fields["sequence_number"] = p.seq
	p.seq++
	return sse.AppendEvent(out, typ, mustJSON(fields))
}

func (p *ResponsesProjector) response(status string) map[string]any {
	out := make([]any, 0, len(p.items))
	for _, it := range p.items {
		out = append(out, it)
	}
	r := map[string]any{"id": p.ID, "object": "response", "created_at": p.Created, "status": status, "model": p.Model,
		"output": out, "error": nil, "incomplete_details": nil, "usage": nil}
	if status == "completed" || status == "incomplete" {
		u := p.usage
		if u == nil {
			u = &execution.Usage{}
		}
		r["usage"] = map[string]any{
			"input_tokens": u.InputTokens, "input_tokens_details": map[string]any{"cached_tokens": u.CachedInputTokens},
			"output_tokens": u.OutputTokens, "output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
			"total_tokens": u.InputTokens + u.OutputTokens,
		}
	}
	if status == "incomplete" {
		r["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	return r
}

func (p *ResponsesProjector) closeMsg(out []byte) []byte {
	if p.openMsg < 0 {
		return out
	}
	i := p.openMsg
	item := p.items[i]
	text := item["content"].([]any)[0].(map[string]any)["text"].(string)
	part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	item["status"] = "completed"
	out = p.ev(out, "response.output_text.done", map[string]any{"item_id": item["id"], "output_index": i, "content_index": 0, "text": text})
	out = p.ev(out, "response.content_part.done", map[string]any{"item_id": item["id"], "output_index": i, "content_index": 0, "part": part})
	out = p.ev(out, "response.output_item.done", map[string]any{"output_index": i, "item": item})
	p.openMsg = -1
	return out
}

// Event implements Projector.
func (p *ResponsesProjector) Event(e execution.Event) []byte {
	if !p.started {
		p.started = true
		p.openMsg = -1
	}
	p.add(e)
	var out []byte
	switch e.Kind {
	case execution.EventStarted:
		out = p.ev(out, "response.created", map[string]any{"response": p.response("in_progress")})
		out = p.ev(out, "response.in_progress", map[string]any{"response": p.response("in_progress")})
	case execution.EventDelta:
		if e.Reasoning {
			// Reasoning is summarized on a reasoning item of its own.
			out = p.closeMsg(out)
			i := len(p.items)
			if i == 0 || p.items[i-1]["type"] != "reasoning" {
				item := map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%s_%d", p.ID, i), "summary": []any{map[string]any{"type": "summary_text", "text": ""}}}
				p.items = append(p.items, item)
				out = p.ev(out, "response.output_item.added", map[string]any{"output_index": i, "item": item})
			} else {
				i--
			}
			s := p.items[i]["summary"].([]any)[0].(map[string]any)
			s["text"] = s["text"].(string) + e.Text
			out = p.ev(out, "response.reasoning_summary_text.delta", map[string]any{"item_id": p.items[i]["id"], "output_index": i, "summary_index": 0, "delta": e.Text})
			return out
		}
		if p.openMsg < 0 {
			i := len(p.items)
			item := map[string]any{"type": "message", "id": fmt.Sprintf("msg_%s_%d", p.ID, i), "status": "in_progress", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": "", "annotations": []any{}}}}
			p.items = append(p.items, item)
			p.openMsg = i
			added := map[string]any{"type": "message", "id": item["id"], "status": "in_progress", "role": "assistant", "content": []any{}}
			out = p.ev(out, "response.output_item.added", map[string]any{"output_index": i, "item": added})
			out = p.ev(out, "response.content_part.added", map[string]any{"item_id": item["id"], "output_index": i, "content_index": 0,
				"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		}
		i := p.openMsg
		part := p.items[i]["content"].([]any)[0].(map[string]any)
		part["text"] = part["text"].(string) + e.Text
		out = p.ev(out, "response.output_text.delta", map[string]any{"item_id": p.items[i]["id"], "output_index": i, "content_index": 0, "delta": e.Text})
	case execution.EventToolCall:
		out = p.closeMsg(out)
		i := len(p.items)
		tc := e.ToolCall
		item := map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%s_%d", p.ID, i), "call_id": tc.ID, "name": tc.Name, "arguments": tc.Arguments, "status": "completed"}
		p.items = append(p.items, item)
		added := map[string]any{"type": "function_call", "id": item["id"], "call_id": tc.ID, "name": tc.Name, "arguments": "", "status": "in_progress"}
		out = p.ev(out, "response.output_item.added", map[string]any{"output_index": i, "item": added})
		out = p.ev(out, "response.function_call_arguments.delta", map[string]any{"item_id": item["id"], "output_index": i, "delta": tc.Arguments})
		out = p.ev(out, "response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": i, "arguments": tc.Arguments})
		out = p.ev(out, "response.output_item.done", map[string]any{"output_index": i, "item": item})
	case execution.EventCompleted:
		out = p.closeMsg(out)
		status := "completed"
		if e.StopReason == "length" {
			status = "incomplete"
		}
		out = p.ev(out, "response."+status, map[string]any{"response": p.response(status)})
	case execution.EventFailed:
		_, body := OpenAIError(e.Failure)
		var eb struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
				Code    any    `json:"code"`
			} `json:"error"`
		}
		json.Unmarshal(body, &eb)
		out = p.ev(out, "error", map[string]any{"code": eb.Error.Type, "message": eb.Error.Message, "param": nil})
	}
	return out
}

// Body implements Projector.
func (p *ResponsesProjector) Body() []byte {
	if p.openMsg >= 0 {
		p.items[p.openMsg]["status"] = "completed"
	}
	status := "completed"
	if p.stop == "length" {
		status = "incomplete"
	}
	return mustJSON(p.response(status))
}
