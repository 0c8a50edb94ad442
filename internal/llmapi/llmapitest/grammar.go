package llmapitest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/iop-dev/iop/internal/sse"
)

// CheckAnthropic, CheckChat and CheckResponses hold a stream, as a client
// reads it, to its format's event grammar: what an SDK's accumulator or an
// agent such as Claude Code or Codex relies on, whatever the provider
// sent. They decode into generic JSON, so that the fuzzers that call them
// build no SDK. Each returns the first violation.

// obj is one event's JSON.
type obj = map[string]any

// typed parses the JSON of ev, the i-th event, whose "type" must be the
// event's own.
func typed(i int, ev sse.Event) (obj, error) {
	var o obj
	if err := json.Unmarshal(ev.Data, &o); err != nil {
		return nil, fmt.Errorf("event %d (%q): %v", i, ev.Type, err)
	}
	if t := str(o, "type"); t != ev.Type {
		return nil, fmt.Errorf("event %d: SSE type %q, JSON type %q", i, ev.Type, t)
	}
	return o, nil
}

func str(o obj, k string) string { s, _ := o[k].(string); return s }

func num(o obj, k string) (int, bool) {
	f, ok := o[k].(float64)
	return int(f), ok
}

func sub(o obj, k string) obj { m, _ := o[k].(obj); return m }

// jsonObject reports whether s, a tool call's complete arguments, is a
// JSON object.
func jsonObject(s string) bool {
	var m map[string]any
	return json.Unmarshal([]byte(s), &m) == nil && m != nil
}

// CheckAnthropic: one message_start first; blocks started in index order
// from 0, never overlapping, each delta of its block's kind; a tool_use
// block's input_json_delta fragments join into a JSON object; then
// message_delta (tool_use exactly when a tool was called) and
// message_stop, last, with no block open. An error event ends the stream
// wherever it comes.
func CheckAnthropic(evs []sse.Event) error {
	open, next := -1, 0
	kind := ""
	var args strings.Builder
	tools := 0
	stopReason := ""
	for i, ev := range evs {
		o, err := typed(i, ev)
		if err != nil {
			return err
		}
		if ev.Type == "error" {
			if i != len(evs)-1 {
				return fmt.Errorf("error event at %d of %d", i, len(evs))
			}
			if e := sub(o, "error"); str(e, "type") == "" || str(e, "message") == "" {
				return fmt.Errorf("error event without type and message: %s", ev.Data)
			}
			return nil
		}
		if i == 0 && ev.Type != "message_start" {
			return fmt.Errorf("stream starts with %q", ev.Type)
		}
		idx, hasIdx := num(o, "index")
		switch ev.Type {
		case "message_start":
			if i != 0 {
				return fmt.Errorf("message_start at %d", i)
			}
			m := sub(o, "message")
			if str(m, "id") == "" || str(m, "role") != "assistant" || sub(m, "usage") == nil {
				return fmt.Errorf("message_start without id, role or usage: %s", ev.Data)
			}
		case "content_block_start":
			if open != -1 || !hasIdx || idx != next {
				return fmt.Errorf("block %d started while %d open (next %d)", idx, open, next)
			}
			cb := sub(o, "content_block")
			kind = str(cb, "type")
			switch kind {
			case "text", "thinking":
			case "tool_use":
				tools++
				if str(cb, "id") == "" || str(cb, "name") == "" || sub(cb, "input") == nil {
					return fmt.Errorf("tool_use block without id, name or input: %s", ev.Data)
				}
			default:
				return fmt.Errorf("block of kind %q", kind)
			}
			open, next = idx, next+1
			args.Reset()
		case "content_block_delta":
			if open == -1 || idx != open {
				return fmt.Errorf("delta for block %d while %d open", idx, open)
			}
			d := sub(o, "delta")
			want := map[string][]string{"text": {"text_delta"}, "thinking": {"thinking_delta", "signature_delta"}, "tool_use": {"input_json_delta"}}[kind]
			if !slices.Contains(want, str(d, "type")) {
				return fmt.Errorf("%q delta in a %s block", str(d, "type"), kind)
			}
			if kind == "tool_use" {
				args.WriteString(str(d, "partial_json"))
			}
		case "content_block_stop":
			if open == -1 || idx != open {
				return fmt.Errorf("stop for block %d while %d open", idx, open)
			}
			if kind == "tool_use" && args.Len() > 0 && !jsonObject(args.String()) {
				return fmt.Errorf("tool_use input %q is not a JSON object", args.String())
			}
			open = -1
		case "message_delta":
			if open != -1 {
				return fmt.Errorf("message_delta while block %d open", open)
			}
			if i != len(evs)-2 {
				return fmt.Errorf("message_delta at %d of %d", i, len(evs))
			}
			stopReason = str(sub(o, "delta"), "stop_reason")
			if sub(o, "usage") == nil {
				return fmt.Errorf("message_delta without usage")
			}
		case "message_stop":
			if i != len(evs)-1 || stopReason == "" {
				return fmt.Errorf("message_stop at %d of %d, after stop reason %q", i, len(evs), stopReason)
			}
			if (tools > 0) != (stopReason == "tool_use") {
				return fmt.Errorf("stop reason %q with %d tool calls", stopReason, tools)
			}
			return nil
		case "ping":
		default:
			return fmt.Errorf("unknown event %q", ev.Type)
		}
	}
	if len(evs) > 0 {
		return fmt.Errorf("stream ends with %q, not message_stop or error", evs[len(evs)-1].Type)
	}
	return nil
}

// CheckChat: data-only events; the first chunk's delta carries the role;
// each tool call's first fragment carries its id, type and name and later
// ones none, the calls numbered from 0 in order; a function call's
// argument fragments join into a JSON object ({} for a call without
// arguments: clients parse what they joined); one finish_reason, on the
// last chunk with a choice, tool_calls exactly when a tool was called;
// with usage asked, every chunk's usage null but one last chunk with
// empty choices and the usage; then [DONE]. A {"error":...} chunk ends
// the stream wherever it comes, with no [DONE] after it.
func CheckChat(evs []sse.Event, includeUsage bool) error {
	type call struct {
		typ  string
		args strings.Builder
	}
	var calls []*call
	finish := ""
	usageSeen := false
	for i, ev := range evs {
		if ev.Type != "" {
			return fmt.Errorf("event %d has a type %q", i, ev.Type)
		}
		if string(ev.Data) == "[DONE]" {
			if i != len(evs)-1 {
				return fmt.Errorf("[DONE] at %d of %d", i, len(evs))
			}
			if finish == "" || includeUsage != usageSeen {
				return fmt.Errorf("[DONE] after finish %q, usage seen %v", finish, usageSeen)
			}
			return nil
		}
		var o obj
		if err := json.Unmarshal(ev.Data, &o); err != nil {
			return fmt.Errorf("event %d: %v", i, err)
		}
		if e := sub(o, "error"); e != nil {
			if i != len(evs)-1 {
				return fmt.Errorf("error chunk at %d of %d", i, len(evs))
			}
			if str(e, "message") == "" {
				return fmt.Errorf("error without message: %s", ev.Data)
			}
			return nil
		}
		if str(o, "object") != "chat.completion.chunk" || str(o, "id") == "" {
			return fmt.Errorf("chunk without object or id: %s", ev.Data)
		}
		if usageSeen {
			return fmt.Errorf("chunk after the usage chunk: %s", ev.Data)
		}
		choices, _ := o["choices"].([]any)
		u, hasUsage := o["usage"]
		if len(choices) == 0 {
			if !includeUsage || finish == "" || u == nil {
				return fmt.Errorf("chunk without choices: %s", ev.Data)
			}
			usageSeen = true
			continue
		}
		if includeUsage && (!hasUsage || u != nil) {
			return fmt.Errorf("usage asked, chunk's usage is not null: %s", ev.Data)
		}
		if finish != "" {
			return fmt.Errorf("chunk after finish_reason %q: %s", finish, ev.Data)
		}
		c, _ := choices[0].(obj)
		d := sub(c, "delta")
		if (i == 0) != (str(d, "role") != "") || (i == 0 && str(d, "role") != "assistant") {
			return fmt.Errorf("role %q in chunk %d", str(d, "role"), i)
		}
		tcs, _ := d["tool_calls"].([]any)
		for _, tc := range tcs {
			t, _ := tc.(obj)
			n, ok := num(t, "index")
			if !ok || n > len(calls) {
				return fmt.Errorf("tool call index %d with %d calls", n, len(calls))
			}
			if n == len(calls) {
				typ := str(t, "type")
				name := str(sub(t, "function"), "name")
				if typ == "custom" {
					name = str(sub(t, "custom"), "name")
				}
				if str(t, "id") == "" || name == "" || (typ != "function" && typ != "custom") {
					return fmt.Errorf("a call's first fragment without id, type or name: %s", ev.Data)
				}
				calls = append(calls, &call{typ: typ})
			} else if str(t, "id") != "" {
				return fmt.Errorf("a later fragment of call %d carries an id: %s", n, ev.Data)
			}
			calls[n].args.WriteString(str(sub(t, "function"), "arguments"))
		}
		if f := str(c, "finish_reason"); f != "" {
			if (len(calls) > 0) != (f == "tool_calls") {
				return fmt.Errorf("finish_reason %q with %d tool calls", f, len(calls))
			}
			for n, cl := range calls {
				if cl.typ == "function" && !jsonObject(cl.args.String()) {
					return fmt.Errorf("call %d's arguments %q are not a JSON object", n, cl.args.String())
				}
			}
			finish = f
		}
	}
	if len(evs) > 0 {
		return fmt.Errorf("stream ends without [DONE] or an error")
	}
	return nil
}

// CheckResponses: every event typed as its JSON says, sequence_number 0,
// 1, 2...; response.created then response.in_progress first; each output
// item added once, output_index from 0 in order, before any event of it,
// its events naming its id; a message's deltas inside its content part,
// a reasoning item's inside its summary part, each part added and done
// once; an item's deltas join into what its .done events carry; every
// item done before one terminal (completed, incomplete or failed), last,
// whose response lists the items (a failed one carries its error instead,
// and may leave items unfinished). An error event before the response was
// created ends the stream.
func CheckResponses(evs []sse.Event) error {
	type item struct {
		id, typ string
		done    bool
		text    strings.Builder
		part    int // content or summary part: 0 none, 1 added, 2 done
	}
	var items []*item
	for i, ev := range evs {
		o, err := typed(i, ev)
		if err != nil {
			return err
		}
		if seq, ok := num(o, "sequence_number"); !ok || seq != i {
			return fmt.Errorf("event %d has sequence_number %v", i, o["sequence_number"])
		}
		if ev.Type == "error" && i == 0 {
			if len(evs) != 1 || str(o, "message") == "" {
				return fmt.Errorf("error event at 0 of %d, message %q", len(evs), str(o, "message"))
			}
			return nil
		}
		if want := []string{"response.created", "response.in_progress"}; i < 2 && ev.Type != want[i] {
			return fmt.Errorf("event %d is %q, want %q", i, ev.Type, want[i])
		}
		oi, hasOI := num(o, "output_index")
		var it *item
		if hasOI && ev.Type != "response.output_item.added" {
			if oi >= len(items) {
				return fmt.Errorf("%s for output %d before it was added", ev.Type, oi)
			}
			it = items[oi]
			if it.done {
				return fmt.Errorf("%s for output %d after it was done", ev.Type, oi)
			}
			if id := str(o, "item_id"); id != "" && id != it.id {
				return fmt.Errorf("%s names item %q, output %d is %q", ev.Type, id, oi, it.id)
			}
		}
		switch ev.Type {
		case "response.created", "response.in_progress":
			r := sub(o, "response")
			if str(r, "id") == "" || str(r, "object") != "response" || str(r, "status") != "in_progress" {
				return fmt.Errorf("%s without id, object or status: %s", ev.Type, ev.Data)
			}
		case "response.output_item.added":
			if !hasOI || oi != len(items) {
				return fmt.Errorf("output %d added after %d", oi, len(items))
			}
			for _, p := range items {
				if !p.done {
					return fmt.Errorf("output %d added while %q is not done", oi, p.id)
				}
			}
			in := sub(o, "item")
			if str(in, "id") == "" {
				return fmt.Errorf("item without an id: %s", ev.Data)
			}
			items = append(items, &item{id: str(in, "id"), typ: str(in, "type")})
		case "response.output_text.delta", "response.function_call_arguments.delta",
			"response.reasoning_summary_text.delta", "response.custom_tool_call_input.delta":
			if it == nil {
				return fmt.Errorf("%s without output_index", ev.Type)
			}
			if (it.typ == "message" || it.typ == "reasoning") && it.part != 1 {
				return fmt.Errorf("%s outside an open part", ev.Type)
			}
			it.text.WriteString(str(o, "delta"))
		case "response.output_text.done", "response.reasoning_summary_text.done":
			if it == nil || it.part != 1 || str(o, "text") != it.text.String() {
				return fmt.Errorf("%s %q after deltas %q", ev.Type, str(o, "text"), it.text.String())
			}
		case "response.function_call_arguments.done":
			if it == nil || it.typ != "function_call" {
				return fmt.Errorf("arguments done for a non-call")
			}
			a := str(o, "arguments")
			if it.text.Len() > 0 && a != it.text.String() {
				return fmt.Errorf("arguments done %q after deltas %q", a, it.text.String())
			}
			if !jsonObject(a) {
				return fmt.Errorf("arguments %q are not a JSON object", a)
			}
		case "response.custom_tool_call_input.done":
			if it == nil || it.typ != "custom_tool_call" || str(o, "input") != it.text.String() {
				return fmt.Errorf("custom input done %q after deltas", str(o, "input"))
			}
		case "response.content_part.added", "response.content_part.done",
			"response.reasoning_summary_part.added", "response.reasoning_summary_part.done":
			want, added := "message", strings.HasSuffix(ev.Type, ".added")
			if strings.HasPrefix(ev.Type, "response.reasoning") {
				want = "reasoning"
			}
			if it == nil || it.typ != want {
				return fmt.Errorf("%s outside a %s item", ev.Type, want)
			}
			if added != (it.part == 0) {
				return fmt.Errorf("%s with its part %d", ev.Type, it.part)
			}
			it.part++
			if t := str(sub(o, "part"), "text"); !added && t != it.text.String() {
				return fmt.Errorf("%s %q after deltas %q", ev.Type, t, it.text.String())
			}
		case "response.output_item.done":
			if it == nil {
				return fmt.Errorf("output_item.done without output_index")
			}
			if (it.typ == "message" || it.typ == "reasoning") && it.part != 2 {
				return fmt.Errorf("output_item.done for %s %q with its part %d", it.typ, it.id, it.part)
			}
			if in := sub(o, "item"); str(in, "id") != it.id || str(in, "type") != it.typ {
				return fmt.Errorf("output_item.done for %q is %s", it.id, ev.Data)
			}
			it.done = true
		case "response.completed", "response.incomplete", "response.failed":
			if i != len(evs)-1 {
				return fmt.Errorf("%s at %d of %d", ev.Type, i, len(evs))
			}
			r := sub(o, "response")
			if "response."+str(r, "status") != ev.Type || str(r, "id") == "" {
				return fmt.Errorf("%s with status %q", ev.Type, str(r, "status"))
			}
			if ev.Type == "response.failed" && str(sub(r, "error"), "message") == "" {
				return fmt.Errorf("response.failed without an error message: %s", ev.Data)
			}
			for _, p := range items {
				if !p.done && ev.Type != "response.failed" {
					return fmt.Errorf("%s while %q is not done", ev.Type, p.id)
				}
			}
			out, ok := r["output"].([]any)
			if !ok {
				return fmt.Errorf("%s without output: %s", ev.Type, ev.Data)
			}
			if ev.Type == "response.failed" {
				return nil // its output is not repeated
			}
			if len(out) != len(items) {
				return fmt.Errorf("%s lists %d items, %d were sent", ev.Type, len(out), len(items))
			}
			for k, p := range items {
				if m, _ := out[k].(obj); str(m, "id") != p.id {
					return fmt.Errorf("%s lists %q at %d, want %q", ev.Type, str(m, "id"), k, p.id)
				}
			}
			return nil
		default:
			return fmt.Errorf("unexpected event %q", ev.Type)
		}
	}
	if len(evs) > 0 {
		return fmt.Errorf("stream ends with %q, not a terminal", evs[len(evs)-1].Type)
	}
	return nil
}
