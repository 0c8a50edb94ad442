package llmapitest

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/iop-dev/iop/internal/sse"
)

// Answer is what a client makes of one answer, streamed or whole, in the
// terms every format shares: a client that streams and one that does not
// must end up holding the same Answer for the same provider answer.
// StreamAnswer and BodyAnswer read it from a stream and a whole body, as
// the formats' SDKs accumulate them; call ids are left out (each answer
// makes its own where the provider gave none), and a call's arguments
// are compared as JSON values, as clients parse them.
type Answer struct {
	Text      string
	Reasoning string
	// Signatures joins Anthropic thinking blocks' signatures, or the
	// encrypted_content of Responses reasoning items, which a client
	// sends back with them on its next turn.
	Signatures string
	Calls      []Call
	// Stop is the format's own stop reason: Anthropic's stop_reason,
	// Chat's finish_reason, a Responses status (with its incomplete
	// reason after a colon).
	Stop string
	// Input and Output are the token counts reported, input counting the
	// cached tokens in every format.
	Input, Output int
	// Error is the error's type (Anthropic) or message (OpenAI formats)
	// when the answer failed; the rest is then what arrived before it.
	Error string
}

// Call is one tool call: its name and its arguments, as the JSON value
// they parse to (a custom tool's input as a JSON string).
type Call struct {
	Name string
	Args string
}

// The client formats StreamAnswer and BodyAnswer read.
const (
	FormatAnthropic = "anthropic"
	FormatChat      = "chat"
	FormatResponses = "responses"
)

// args turns a call's complete arguments, as a client holds them, into
// their canonical JSON, or reports why a client could not parse them.
func args(raw string) (string, error) {
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		return "", fmt.Errorf("arguments %q do not parse: %v", raw, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func quoted(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func count(o obj, k string) int { n, _ := num(o, k); return n }

// StreamAnswer accumulates the stream evs of format as its SDK does. It
// reports what a client could not read (a call whose arguments do not
// parse); the grammar is CheckAnthropic's, CheckChat's and
// CheckResponses', not checked here.
func StreamAnswer(format string, evs []sse.Event) (Answer, error) {
	switch format {
	case FormatAnthropic:
		return anthropicStream(evs)
	case FormatChat:
		return chatStream(evs)
	case FormatResponses:
		return responsesStream(evs)
	}
	return Answer{}, fmt.Errorf("no format %q", format)
}

// BodyAnswer reads a whole answer of format.
func BodyAnswer(format string, body []byte) (Answer, error) {
	var o obj
	if err := json.Unmarshal(body, &o); err != nil {
		return Answer{}, fmt.Errorf("body: %v", err)
	}
	if e := sub(o, "error"); e != nil {
		if format == FormatAnthropic {
			return Answer{Error: str(e, "type")}, nil
		}
		return Answer{Error: str(e, "message")}, nil
	}
	switch format {
	case FormatAnthropic:
		return anthropicBody(o)
	case FormatChat:
		return chatBody(o)
	case FormatResponses:
		return responsesBody(o)
	}
	return Answer{}, fmt.Errorf("no format %q", format)
}

// anthropicUsage reads a body's usage, or merges a stream's into use as
// the SDK does: message_start gives every count, and message_delta's
// cumulative counts overwrite the ones it carries (the output always).
func anthropicUsage(use map[string]int, u obj) {
	for _, k := range []string{"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens"} {
		if n, ok := num(u, k); ok || k == "output_tokens" {
			use[k] = n
		}
	}
}

func (a *Answer) anthropicUsage(use map[string]int) {
	a.Input = use["input_tokens"] + use["cache_read_input_tokens"] + use["cache_creation_input_tokens"]
	a.Output = use["output_tokens"]
}

func anthropicStream(evs []sse.Event) (a Answer, _ error) {
	use := map[string]int{}
	defer func() { a.anthropicUsage(use) }() // a named result: the counts reach what is returned
	kind := ""
	var name string
	var input strings.Builder
	var start json.RawMessage
	for _, ev := range evs {
		var o obj
		if err := json.Unmarshal(ev.Data, &o); err != nil {
			return a, err
		}
		switch ev.Type {
		case "message_start":
			anthropicUsage(use, sub(sub(o, "message"), "usage"))
		case "content_block_start":
			cb := sub(o, "content_block")
			kind, name = str(cb, "type"), str(cb, "name")
			input.Reset()
			start, _ = json.Marshal(cb["input"])
		case "content_block_delta":
			d := sub(o, "delta")
			switch str(d, "type") {
			case "text_delta":
				a.Text += str(d, "text")
			case "thinking_delta":
				a.Reasoning += str(d, "thinking")
			case "signature_delta":
				a.Signatures += str(d, "signature")
			case "input_json_delta":
				input.WriteString(str(d, "partial_json"))
			}
		case "content_block_stop":
			if kind != "tool_use" {
				break
			}
			// The SDKs parse the joined fragments; with none, the input
			// is the start's.
			raw := input.String()
			if raw == "" {
				raw = string(start)
			}
			v, err := args(raw)
			if err != nil {
				return a, fmt.Errorf("tool_use %s: %v", name, err)
			}
			a.Calls = append(a.Calls, Call{Name: name, Args: v})
		case "message_delta":
			a.Stop = str(sub(o, "delta"), "stop_reason")
			anthropicUsage(use, sub(o, "usage"))
		case "error":
			a.Error = str(sub(o, "error"), "type")
		}
	}
	return a, nil
}

func anthropicBody(o obj) (Answer, error) {
	var a Answer
	content, _ := o["content"].([]any)
	for _, c := range content {
		b, _ := c.(obj)
		switch str(b, "type") {
		case "text":
			a.Text += str(b, "text")
		case "thinking":
			a.Reasoning += str(b, "thinking")
			a.Signatures += str(b, "signature")
		case "tool_use":
			raw, _ := json.Marshal(b["input"])
			v, err := args(string(raw))
			if err != nil {
				return a, err
			}
			a.Calls = append(a.Calls, Call{Name: str(b, "name"), Args: v})
		}
	}
	a.Stop = str(o, "stop_reason")
	use := map[string]int{}
	anthropicUsage(use, sub(o, "usage"))
	a.anthropicUsage(use)
	return a, nil
}

func chatUsage(a *Answer, u obj) {
	a.Input, a.Output = count(u, "prompt_tokens"), count(u, "completion_tokens")
}

// chatCall is a Chat tool call's name and arguments: a function's
// arguments parsed, a custom tool's input as a JSON string.
func chatCall(typ, name, raw string) (Call, error) {
	if typ == "custom" {
		return Call{Name: name, Args: quoted(raw)}, nil
	}
	v, err := args(raw)
	if err != nil {
		return Call{}, fmt.Errorf("call %s: %v", name, err)
	}
	return Call{Name: name, Args: v}, nil
}

func chatStream(evs []sse.Event) (Answer, error) {
	var a Answer
	type call struct {
		typ, name string
		args      strings.Builder
	}
	var calls []*call
	for _, ev := range evs {
		if string(ev.Data) == "[DONE]" {
			break
		}
		var o obj
		if err := json.Unmarshal(ev.Data, &o); err != nil {
			return a, err
		}
		if e := sub(o, "error"); e != nil {
			a.Error = str(e, "message")
			break
		}
		if u := sub(o, "usage"); u != nil {
			chatUsage(&a, u)
		}
		choices, _ := o["choices"].([]any)
		if len(choices) == 0 {
			continue
		}
		c, _ := choices[0].(obj)
		d := sub(c, "delta")
		a.Text += str(d, "content")
		a.Reasoning += str(d, "reasoning_content")
		tcs, _ := d["tool_calls"].([]any)
		for _, tc := range tcs {
			t, _ := tc.(obj)
			n, _ := num(t, "index")
			for n >= len(calls) {
				calls = append(calls, &call{})
			}
			cl := calls[n]
			if typ := str(t, "type"); typ != "" {
				cl.typ = typ
			}
			if f := sub(t, "function"); f != nil {
				cl.name += str(f, "name")
				cl.args.WriteString(str(f, "arguments"))
			}
			if f := sub(t, "custom"); f != nil {
				cl.name += str(f, "name")
				cl.args.WriteString(str(f, "input"))
			}
		}
		if f := str(c, "finish_reason"); f != "" {
			a.Stop = f
		}
	}
	if a.Error != "" {
		return a, nil // its calls may be cut short; the error is the answer
	}
	for _, cl := range calls {
		c, err := chatCall(cl.typ, cl.name, cl.args.String())
		if err != nil {
			return a, err
		}
		a.Calls = append(a.Calls, c)
	}
	return a, nil
}

func chatBody(o obj) (Answer, error) {
	var a Answer
	choices, _ := o["choices"].([]any)
	if len(choices) > 0 {
		c, _ := choices[0].(obj)
		m := sub(c, "message")
		a.Text, a.Reasoning = str(m, "content"), str(m, "reasoning_content")
		tcs, _ := m["tool_calls"].([]any)
		for _, tc := range tcs {
			t, _ := tc.(obj)
			typ := str(t, "type")
			f := sub(t, "function")
			raw := str(f, "arguments")
			if typ == "custom" {
				f = sub(t, "custom")
				raw = str(f, "input")
			}
			cl, err := chatCall(typ, str(f, "name"), raw)
			if err != nil {
				return a, err
			}
			a.Calls = append(a.Calls, cl)
		}
		a.Stop = str(c, "finish_reason")
	}
	chatUsage(&a, sub(o, "usage"))
	return a, nil
}

// responsesStop is a response's status, and its incomplete reason.
func responsesStop(r obj) string {
	if why := str(sub(r, "incomplete_details"), "reason"); why != "" {
		return str(r, "status") + ":" + why
	}
	return str(r, "status")
}

func responsesUsage(a *Answer, u obj) {
	a.Input, a.Output = count(u, "input_tokens"), count(u, "output_tokens")
}

// responsesCall reads a function_call or custom_tool_call item's call.
func responsesCall(it obj) (Call, error) {
	if str(it, "type") == "custom_tool_call" {
		return Call{Name: str(it, "name"), Args: quoted(str(it, "input"))}, nil
	}
	v, err := args(str(it, "arguments"))
	if err != nil {
		return Call{}, fmt.Errorf("call %s: %v", str(it, "name"), err)
	}
	return Call{Name: str(it, "name"), Args: v}, nil
}

// responsesStream reads the answer from the stream's events, not from
// the terminal's copy of the output (a failed response repeats none):
// text and reasoning from their deltas, each call from its item's done
// event, as Codex does.
func responsesStream(evs []sse.Event) (Answer, error) {
	var a Answer
	for _, ev := range evs {
		var o obj
		if err := json.Unmarshal(ev.Data, &o); err != nil {
			return a, err
		}
		switch ev.Type {
		case "response.output_text.delta":
			a.Text += str(o, "delta")
		case "response.reasoning_summary_text.delta", "response.reasoning_text.delta":
			a.Reasoning += str(o, "delta")
		case "response.output_item.done":
			it := sub(o, "item")
			if str(it, "type") == "reasoning" {
				a.Signatures += str(it, "encrypted_content")
			}
			if t := str(it, "type"); t != "function_call" && t != "custom_tool_call" {
				break
			}
			c, err := responsesCall(it)
			if err != nil {
				return a, err
			}
			a.Calls = append(a.Calls, c)
		case "response.completed", "response.incomplete":
			r := sub(o, "response")
			a.Stop = responsesStop(r)
			responsesUsage(&a, sub(r, "usage"))
		case "response.failed":
			a.Error = str(sub(sub(o, "response"), "error"), "message")
		case "error":
			a.Error = str(o, "message")
		}
	}
	return a, nil
}

func responsesBody(o obj) (Answer, error) {
	var a Answer
	out, _ := o["output"].([]any)
	for _, x := range out {
		it, _ := x.(obj)
		switch str(it, "type") {
		case "message":
			parts, _ := it["content"].([]any)
			for _, p := range parts {
				if po, _ := p.(obj); str(po, "type") == "output_text" {
					a.Text += str(po, "text")
				}
			}
		case "reasoning":
			parts, _ := it["summary"].([]any)
			for _, p := range parts {
				po, _ := p.(obj)
				a.Reasoning += str(po, "text")
			}
			a.Signatures += str(it, "encrypted_content")
		case "function_call", "custom_tool_call":
			c, err := responsesCall(it)
			if err != nil {
				return a, err
			}
			a.Calls = append(a.Calls, c)
		}
	}
	a.Stop = responsesStop(o)
	responsesUsage(&a, sub(o, "usage"))
	return a, nil
}
