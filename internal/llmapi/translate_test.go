package llmapi_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
)

func TestOneMessageStart(t *testing.T) {
	r := &llmapi.AnthropicRenderer{ID: "m", Model: "pub"}
	var out []byte
	for _, e := range []llmapi.Event{{Kind: llmapi.EvStart}, {Kind: llmapi.EvStart}, {Kind: llmapi.EvStop, Reason: llmapi.StopEnd}} {
		out = append(out, r.Event(e)...)
	}
	if n := strings.Count(string(out), "event: message_start"); n != 1 {
		t.Fatalf("%d message_start events", n)
	}
	// A provider stream that starts twice is malformed: it ends in an error
	// event of the client's format.
	dup := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"a\",\"model\":\"m\",\"usage\":{}}}\n\n" +
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"b\",\"model\":\"m\",\"usage\":{}}}\n\n"
	stream, status, _ := llmapitest.Render(t, llmapi.DecodeAnthropicStream(strings.NewReader(dup)), &llmapi.AnthropicRenderer{ID: "m", Model: "pub"})
	if !strings.Contains(string(stream), "event: error") || strings.Count(string(stream), "event: message_start") != 1 || status < 500 {
		t.Fatalf("stream:\n%s", stream)
	}
}

func TestErrorMidStreamInClientFormat(t *testing.T) {
	in := `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"par"}}]}` + "\n\n" +
		`data: {"error":{"message":"boom","type":"server_error"}}` + "\n\n"
	for name, r := range map[string]llmapi.Renderer{
		"anthropic": &llmapi.AnthropicRenderer{ID: "m"},
		"chat":      &llmapi.ChatRenderer{ID: "c"},
		"responses": &llmapi.ResponsesRenderer{ID: "r"},
	} {
		stream, _, _ := llmapitest.Render(t, llmapi.DecodeChatStream(strings.NewReader(in)), r)
		evs := llmapitest.Events(t, stream)
		last := evs[len(evs)-1]
		switch name {
		case "anthropic":
			if last.Type != "error" {
				t.Errorf("%s: last event %q", name, last.Type)
			}
		case "responses":
			// The response was created: it fails, with its error.
			if last.Type != "response.failed" || !strings.Contains(string(last.Data), `"error":{"code":"server_error","message":"the provider failed mid-stream"}`) {
				t.Errorf("%s: last event %q %s", name, last.Type, last.Data)
			}
		case "chat":
			if !strings.Contains(string(last.Data), `"error"`) || strings.Contains(string(stream), "[DONE]") {
				t.Errorf("chat: last %s", last.Data)
			}
		}
		if strings.Contains(string(stream), "boom") {
			t.Errorf("%s: the upstream's error text leaked", name)
		}
	}
}

func TestRequestTranslation(t *testing.T) {
	chat := `{"model":"pub","stream":true,"parallel_tool_calls":false,"messages":[
		{"role":"system","content":"Be terse."},
		{"role":"user","content":[{"type":"text","text":"Weather?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"w","arguments":"{\"c\":\"Paris\"}"}},{"id":"call_2","type":"function","function":{"name":"w","arguments":"{\"c\":\"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"},
		{"role":"tool","tool_call_id":"call_2","content":"rain"}],
		"tools":[{"type":"function","function":{"name":"w","description":"weather","parameters":{"type":"object","properties":{"c":{"type":"string"}}}}}],
		"tool_choice":"required","max_tokens":50}`
	ir, err := llmapi.DecodeChatRequest([]byte(chat))
	if err != nil {
		t.Fatal(err)
	}
	b, err := llmapi.EncodeAnthropic(ir, "claude-up")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(b, &got)
	want := map[string]any{
		"model": "claude-up", "system": "Be terse.", "stream": true, "max_tokens": float64(50),
		"tool_choice": map[string]any{"type": "any", "disable_parallel_tool_use": true},
		"tools":       []any{map[string]any{"name": "w", "description": "weather", "input_schema": map[string]any{"type": "object", "properties": map[string]any{"c": map[string]any{"type": "string"}}}}},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "text", "text": "Weather?"},
				map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
			}},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "tool_use", "id": "call_1", "name": "w", "input": map[string]any{"c": "Paris"}},
				map[string]any{"type": "tool_use", "id": "call_2", "name": "w", "input": map[string]any{"c": "Rome"}},
			}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "call_1", "content": []any{map[string]any{"type": "text", "text": "sunny"}}},
				map[string]any{"type": "tool_result", "tool_use_id": "call_2", "content": []any{map[string]any{"type": "text", "text": "rain"}}},
			}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("chat -> anthropic (-want +got):\n%s", d)
	}

	// Anthropic -> Chat: thinking in the history is never forwarded to an
	// upstream that has no place for it; the budget becomes an effort.
	msgs := `{"model":"pub","max_tokens":100,"thinking":{"type":"enabled","budget_tokens":5000},"system":[{"type":"text","text":"S"}],"messages":[
		{"role":"user","content":"q"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"secret plan","signature":"sig"},{"type":"text","text":"a"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"x":1}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42","is_error":true}]}]}`
	ir, err = llmapi.DecodeAnthropicRequest([]byte(msgs))
	if err != nil {
		t.Fatal(err)
	}
	b, err = llmapi.EncodeChat(ir, "gpt-up")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "secret plan") || strings.Contains(string(b), "sig") || strings.Contains(string(b), "thinking") {
		t.Fatalf("thinking forwarded to a Chat Completions upstream: %s", b)
	}
	got = nil
	json.Unmarshal(b, &got)
	if got["reasoning_effort"] != "medium" || got["messages"].([]any)[0].(map[string]any)["content"] != "S" {
		t.Fatalf("chat request %s", b)
	}
	tool := got["messages"].([]any)[3].(map[string]any)
	if tool["role"] != "tool" || tool["tool_call_id"] != "toolu_1" || tool["content"] != "Error: 42" {
		t.Fatalf("tool result %v", tool)
	}
	// Unsigned thinking (from a Chat upstream's reasoning) is dropped on the
	// way to Anthropic, which rejects it.
	ir.Messages[1].Parts[0].Signature = ""
	b, _ = llmapi.EncodeAnthropic(ir, "claude-up")
	if strings.Contains(string(b), "secret plan") {
		t.Fatalf("unsigned thinking sent to Anthropic: %s", b)
	}

	// previous_response_id cannot be translated.
	if _, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":"x","previous_response_id":"resp_1"}`)); err == nil {
		t.Fatal("previous_response_id translated")
	}
	// A Responses conversation with function calls.
	ir, err = llmapi.DecodeResponsesRequest([]byte(`{"model":"m","instructions":"I","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"}],"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = llmapi.EncodeAnthropic(ir, "c")
	if !strings.Contains(string(b), `"tool_use_id":"c1"`) || !strings.Contains(string(b), `"system":"I"`) {
		t.Fatalf("responses -> anthropic %s", b)
	}
}

// A model can emit tool arguments that are not JSON. Anthropic clients
// need an object, so the answer ends with an error in the client's format
// rather than a tool_use the client cannot parse (or a panic).
func TestMalformedToolArguments(t *testing.T) {
	stream := `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"a\":"}}]}}]}` + "\n\n" +
		`data: {"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" + "data: [DONE]\n\n"
	buffered := `{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get","arguments":"[1,2]"}}]},"finish_reason":"tool_calls"}]}`
	for name, dec := range map[string]llmapi.Decoder{
		"stream":   llmapi.DecodeChatStream(strings.NewReader(stream)),
		"buffered": llmapi.DecodeChat([]byte(buffered)),
	} {
		out, status, body := llmapitest.Render(t, dec, &llmapi.AnthropicRenderer{ID: "msg_1"})
		evs := llmapitest.Events(t, out)
		if last := evs[len(evs)-1]; last.Type != "error" {
			t.Errorf("%s: last event %q, want error", name, last.Type)
		}
		if status != 502 || !strings.Contains(string(body), "not a JSON object") {
			t.Errorf("%s: buffered %d %s", name, status, body)
		}
		for _, ev := range evs {
			if ev.Type == "content_block_stop" {
				t.Errorf("%s: the malformed tool block was closed as if valid", name)
			}
		}
	}
}

// TestRequestToResponses covers the Responses encoder: history becomes
// input items in order, tool results function_call_output, thinking is
// dropped and the budget becomes an effort with a summary; translated
// requests are never stored; stop sequences are refused, not dropped.
func TestRequestToResponses(t *testing.T) {
	msgs := `{"model":"pub","max_tokens":100,"stream":true,"thinking":{"type":"enabled","budget_tokens":20000},"system":"S","messages":[
		{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"url","url":"https://x/cat.png"}}]},
		{"role":"assistant","content":[{"type":"thinking","thinking":"secret plan","signature":"sig"},{"type":"text","text":"calling"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"x":1}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42","is_error":true},{"type":"text","text":"and?"}]}],
		"tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"x":{"type":"integer"}}}}],
		"tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true}}`
	ir, err := llmapi.DecodeAnthropicRequest([]byte(msgs))
	if err != nil {
		t.Fatal(err)
	}
	b, err := llmapi.EncodeResponses(ir, "gpt-up")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(b, &got)
	want := map[string]any{
		"model": "gpt-up", "instructions": "S", "stream": true, "store": false, "max_output_tokens": float64(100),
		"reasoning":           map[string]any{"effort": "high", "summary": "auto"},
		"tool_choice":         map[string]any{"type": "function", "name": "f"},
		"parallel_tool_calls": false,
		"tools": []any{map[string]any{"type": "function", "name": "f", "description": "d", "strict": false,
			"parameters": map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "integer"}}}}},
		"input": []any{
			map[string]any{"type": "message", "role": "user", "content": []any{
				map[string]any{"type": "input_text", "text": "look"},
				map[string]any{"type": "input_image", "image_url": "https://x/cat.png", "detail": "auto"},
			}},
			map[string]any{"type": "message", "role": "assistant", "content": []any{
				map[string]any{"type": "output_text", "text": "calling", "annotations": []any{}},
			}},
			map[string]any{"type": "function_call", "call_id": "toolu_1", "name": "f", "arguments": `{"x":1}`},
			map[string]any{"type": "function_call_output", "call_id": "toolu_1", "output": "Error: 42"},
			map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": "and?"}}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("anthropic -> responses (-want +got):\n%s", d)
	}
	if strings.Contains(string(b), "secret plan") {
		t.Fatalf("thinking forwarded: %s", b)
	}

	// Chat Completions stop sequences have no Responses field.
	ir, err = llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"stop":["END"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := llmapi.EncodeResponses(ir, "m"); err == nil {
		t.Fatal("stop sequences dropped silently")
	}
}

// TestAnthropicSystemMessage: a system message among an Anthropic
// request's messages, as Claude Code (2.1.154 and later) sends its
// environment, joins the system prompt of a translation, after the
// top-level one and in its place among any others; the turns around it
// keep their order. Before, every such request was refused.
func TestAnthropicSystemMessage(t *testing.T) {
	ir, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,
		"system":[{"type":"text","text":"S"}],
		"messages":[
		{"role":"user","content":[{"type":"text","text":"<system-reminder>r</system-reminder>"},{"type":"text","text":"hi"}]},
		{"role":"system","content":[{"type":"text","text":"# Environment","cache_control":{"type":"ephemeral"}}]},
		{"role":"assistant","content":"hello"},
		{"role":"system","content":"later"},
		{"role":"user","content":"bye"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := llmapi.EncodeChat(ir, "m")
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(b, &chat); err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"role": "system", "content": "S\n\n# Environment\n\nlater"},
		{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "<system-reminder>r</system-reminder>"},
			map[string]any{"type": "text", "text": "hi"},
		}},
		{"role": "assistant", "content": "hello"},
		{"role": "user", "content": "bye"},
	}
	if d := cmp.Diff(want, chat.Messages); d != "" {
		t.Errorf("to chat (-want +got):\n%s", d)
	}
	b, err = llmapi.EncodeResponses(ir, "m")
	if err != nil {
		t.Fatal(err)
	}
	var resp struct {
		Instructions string           `json:"instructions"`
		Input        []map[string]any `json:"input"`
	}
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Instructions != "S\n\n# Environment\n\nlater" || len(resp.Input) != 3 {
		t.Errorf("to responses: %s", b)
	}
	for _, it := range resp.Input {
		if it["role"] == "system" || it["role"] == "developer" {
			t.Errorf("to responses: a system item left among the input: %s", b)
		}
	}
}

// TestTranslationLinearInLength: translating a stream costs the same per
// chunk whatever its length, for every renderer. Each renderer keeps the
// answer's text (for its buffered body and for terminal events that
// repeat it), and appending each delta by copying the text so far made a
// long answer quadratic: 36 KB allocated per chunk at 8,000 chunks against
// 3 KB at 200. The full text still reaches the buffered body.
func TestTranslationLinearInLength(t *testing.T) {
	renderers := map[string]func() llmapi.Renderer{
		"anthropic": func() llmapi.Renderer { return &llmapi.AnthropicRenderer{ID: "m", Model: "pub"} },
		"chat":      func() llmapi.Renderer { return &llmapi.ChatRenderer{ID: "c", Model: "pub"} },
		"responses": func() llmapi.Renderer { return &llmapi.ResponsesRenderer{ID: "r", Model: "pub"} },
	}
	perChunk := func(mk func() llmapi.Renderer, n int) float64 {
		in := chatStream(n)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		dec := llmapi.DecodeChatStream(bytes.NewReader(in))
		r := mk()
		for {
			ev, err := dec.Next()
			if err != nil {
				break
			}
			r.Event(ev)
		}
		r.Body()
		dec.Release()
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc-before.TotalAlloc) / float64(n)
	}
	for name, mk := range renderers {
		short, long := perChunk(mk, 1000), perChunk(mk, 8000)
		if long > 1.5*short {
			t.Errorf("%s: %.0f bytes allocated per chunk at 8,000 chunks, %.0f at 1,000", name, long, short)
		}
	}
	// The whole text, in order, in the buffered answer.
	dec := llmapi.DecodeChatStream(bytes.NewReader(chatStream(8000)))
	defer dec.Release()
	_, status, body := llmapitest.Render(t, dec, &llmapi.AnthropicRenderer{ID: "m", Model: "pub"})
	var msg struct {
		Content []struct{ Text string } `json:"content"`
	}
	if err := json.Unmarshal(body, &msg); status != 200 || err != nil || len(msg.Content) != 1 {
		t.Fatalf("status %d, %v, body of %d bytes", status, err, len(body))
	}
	var want strings.Builder
	for i := range 8000 {
		fmt.Fprintf(&want, "tok%d ", i)
	}
	if msg.Content[0].Text != want.String() {
		t.Fatalf("text of %d bytes, want %d", len(msg.Content[0].Text), want.Len())
	}
}

// TestDecoderRelease: after Release (twice is fine), Next returns io.EOF,
// mid-stream too, and never touches the released buffer.
func TestDecoderRelease(t *testing.T) {
	for name, mk := range map[string]func() llmapi.Decoder{
		"chat stream":      func() llmapi.Decoder { return llmapi.DecodeChatStream(bytes.NewReader(chatStream(10))) },
		"anthropic stream": func() llmapi.Decoder { return llmapi.DecodeAnthropicStream(bytes.NewReader(chatStream(10))) },
		"responses stream": func() llmapi.Decoder { return llmapi.DecodeResponsesStream(bytes.NewReader(chatStream(10))) },
		"chat buffered":    func() llmapi.Decoder { return llmapi.DecodeChat(llmapitest.Fixture(t, "chat_buffered_tool.json")) },
	} {
		dec := mk()
		if _, err := dec.Next(); err != nil {
			t.Fatalf("%s: first Next: %v", name, err)
		}
		dec.Release()
		dec.Release()
		if ev, err := dec.Next(); err != io.EOF {
			t.Fatalf("%s: Next after Release = %+v, %v", name, ev, err)
		}
	}
}

// pieceReader serves b a piece at a time, with a timeout between pieces,
// and counts its reads.
type pieceReader struct {
	b     []byte
	size  int
	odd   bool
	reads int
}

type timeoutErr struct{}

func (timeoutErr) Error() string { return "timeout" }
func (timeoutErr) Timeout() bool { return true }

func (p *pieceReader) Read(buf []byte) (int, error) {
	p.reads++
	if p.odd = !p.odd; p.odd && len(p.b) > 0 {
		return 0, timeoutErr{}
	}
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := copy(buf, p.b[:min(p.size, len(p.b))])
	p.b = p.b[n:]
	return n, nil
}

// TestDecoderReady: before every Next of a stream decoder (after events,
// timeouts and steps that yield no event), Ready reports true exactly
// when that Next returns without reading. The Edge holds a translated
// burst's flush on it, so a wrong true would hold an event until the
// provider's next bytes.
func TestDecoderReady(t *testing.T) {
	streams := map[string]func(io.Reader) llmapi.Decoder{
		"chat":      llmapi.DecodeChatStream,
		"anthropic": llmapi.DecodeAnthropicStream,
		"responses": llmapi.DecodeResponsesStream,
	}
	inputs := map[string][]byte{
		"chat":      append(chatStream(5), []byte(": keep-alive\n\n")...),
		"anthropic": llmapitest.Fixture(t, "anthropic_stream_thinking_tools.sse"),
		"responses": llmapitest.Fixture(t, "responses_stream_args_in_done.sse"),
	}
	for name, mk := range streams {
		for _, piece := range []int{1, 7, 64, 1 << 20} {
			src := &pieceReader{b: inputs[name], size: piece}
			dec := mk(src)
			for i := 0; ; i++ {
				if i > 1<<16 {
					t.Fatalf("%s: no end", name)
				}
				ready := dec.Ready()
				before := src.reads
				_, err := dec.Next()
				if got := src.reads == before; got != ready {
					t.Fatalf("%s in pieces of %d, call %d: Ready said %v, but Next read %d times (%v)", name, piece, i, ready, src.reads-before, err)
				}
				if err == io.EOF {
					break
				}
			}
			dec.Release()
		}
	}
}

// TestOutputFormatTranslation: a JSON output format reaches every
// provider format that can carry it, in that format's field (Chat's
// response_format, Responses' text.format, Anthropic's
// output_config.format), and is refused, never dropped, where it cannot:
// JSON mode without a schema to Anthropic, any format to a normalized run.
func TestOutputFormatTranslation(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`
	type encoder struct {
		name   string
		encode func(*llmapi.Request, string) ([]byte, error)
	}
	encoders := []encoder{{"chat", llmapi.EncodeChat}, {"responses", llmapi.EncodeResponses}, {"anthropic", llmapi.EncodeAnthropic}}
	var s any
	json.Unmarshal([]byte(schema), &s)
	withSchema := map[string]any{
		"chat":      map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "thing", "schema": s, "strict": true}}},
		"responses": map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "thing", "schema": s, "strict": true}}},
		"anthropic": map[string]any{"output_config": map[string]any{"format": map[string]any{"type": "json_schema", "schema": s}}},
	}
	unnamed := map[string]any{
		"chat":      map[string]any{"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "output", "schema": s}}},
		"responses": map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_schema", "name": "output", "schema": s}}},
		"anthropic": withSchema["anthropic"],
	}
	jsonMode := map[string]any{
		"chat":      map[string]any{"response_format": map[string]any{"type": "json_object"}},
		"responses": map[string]any{"text": map[string]any{"format": map[string]any{"type": "json_object"}}},
		"anthropic": nil, // refused
	}
	for _, c := range []struct {
		name   string
		decode func([]byte) (*llmapi.Request, error)
		body   string
		want   map[string]any
	}{
		{"chat json_schema", llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"thing","strict":true,"schema":` + schema + `}}}`, withSchema},
		{"responses json_schema", llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"thing","strict":true,"schema":` + schema + `}}}`, withSchema},
		{"anthropic output_config", llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"}],"output_config":{"format":{"type":"json_schema","schema":` + schema + `}}}`, unnamed},
		{"anthropic output_format (beta)", llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"}],"output_format":{"type":"json_schema","schema":` + schema + `}}`, unnamed},
		{"chat json_object", llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}`, jsonMode},
		{"responses json_object", llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","text":{"format":{"type":"json_object"}}}`, jsonMode},
	} {
		ir, err := c.decode([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, e := range encoders {
			b, err := e.encode(ir, "up")
			want := c.want[e.name]
			if want == nil {
				if !errors.Is(err, llmapi.ErrUnsupported) {
					t.Errorf("%s -> %s: %s %v, want ErrUnsupported", c.name, e.name, b, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s -> %s: %v", c.name, e.name, err)
			}
			var got map[string]any
			json.Unmarshal(b, &got)
			for k, v := range want.(map[string]any) {
				if d := cmp.Diff(v, got[k]); d != "" {
					t.Errorf("%s -> %s: %s (-want +got):\n%s", c.name, e.name, k, d)
				}
			}
		}
		if _, _, err := llmapi.ToInput(ir); !errors.Is(err, llmapi.ErrUnsupported) {
			t.Errorf("%s -> normalized run: %v, want ErrUnsupported", c.name, err)
		}
	}
	// The default formats ask for text: nothing is sent.
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"text"},"n":1,"logprobs":false,"modalities":["text"]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":null,"n":1.0,"logprobs":null}`,
	} {
		ir, err := llmapi.DecodeChatRequest([]byte(body))
		if err != nil || ir.Output != nil {
			t.Fatalf("%s: %+v %v", body, ir, err)
		}
	}
}

// TestUntranslatableRefused: a request field whose meaning a translation
// cannot carry is refused with a 400 that names it, never dropped (the
// client would get one choice for n=2, free text for a schema, no
// logprobs), and malformed formats are refused too.
func TestUntranslatableRefused(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, c := range []struct {
		decode func([]byte) (*llmapi.Request, error)
		body   string
		want   string
	}{
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"n":2}`, "n > 1"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":3}`, "logprobs"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"functions":[{"name":"f"}]}`, "functions"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"function_call":"auto"}`, "functions"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"}}`, "audio"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"web_search_options":{}}`, "web_search_options"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"logit_bias":{"50256":-100}}`, "logit_bias"},
		// Tools no provider takes.
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"parameters":{}}}]}`, "tools[0]: a tool needs a name"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,` + msgs + `,"tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}]}`, `tools[1]: a second tool named "f"`},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","tools":[{"type":"function","name":""}]}`, "tools[0]: a tool needs a name"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, `tool_choice names "g", which is not among the tools`},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,` + msgs + `,"tool_choice":{"type":"any"}}`, "tool_choice requires a tool call, and the request has no tools"},
		// A history whose calls and results cannot be paired.
		{llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","content":"r"}]}`, "a tool result in the history names no call"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]}`, `a tool call of "f" in the history has no id`},
		// No turn to answer.
		{llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"developer","content":"x"}]}`, "at least one user or assistant message"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"system":"x","messages":[]}`, "at least one message"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"messages":[{"role":"system","content":"x"}]}`, "at least one message"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"messages":[{"role":"tool","content":"x"}]}`, `messages[0].role "tool" is not user, assistant or system`},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"image","source":{"type":"url","url":"https://x/a.png"}}]}]}`, "messages[1].content: a system message holds only text blocks"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":[{"role":"system","content":"x"}]}`, "at least one user or assistant item"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"response_format":{"type":"grammar"}}`, `response_format.type "grammar"`},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"response_format":{"type":"json_schema"}}`, "json_schema without a schema"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"response_format":"json"}`, "response_format is malformed"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","background":true}`, "background"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","conversation":"conv_1"}`, "conversation"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","prompt":{"id":"pmpt_1"}}`, "prompt"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","top_logprobs":2}`, "logprobs"},
		// OpenAI's hosted tools: web search is left out (TestHostedWebSearchLeftOut) unless forced.
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","tools":[{"type":"image_generation"}]}`, `tool type "image_generation" cannot be translated`},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","tools":[{"type":"web_search_preview"}],"tool_choice":{"type":"web_search_preview"}}`, "tool_choice web_search_preview cannot be translated"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","tools":[{"type":"web_search"}],"tool_choice":"required"}`, "tool_choice requires a tool call, and the request has no tools"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","include":["reasoning.encrypted_content","message.output_text.logprobs"]}`, "logprobs"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"n"}}}`, "json_schema without a schema"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"file_1"}]}]}`, "input[0][0]: an input_image without image_url"},
		{llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":""}}]}]}`, "image_url without url"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,` + msgs + `,"mcp_servers":[{"type":"url","url":"https://x","name":"x"}]}`, "mcp_servers"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,` + msgs + `,"container":"container_1"}`, "container"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,` + msgs + `,"output_config":{"format":{"type":"json_object"}}}`, "output_config.format must be"},
		// Values no API takes.
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"max_tokens":-5}`, "max_tokens must not be negative"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"max_completion_tokens":-1,"max_tokens":10}`, "max_completion_tokens must not be negative"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"temperature":-0.5}`, "temperature must not be negative"},
		{llmapi.DecodeChatRequest, `{"model":"m",` + msgs + `,"top_p":1.5}`, "top_p must be between 0 and 1"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","max_output_tokens":-2}`, "max_output_tokens must not be negative"},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","top_p":-0.1}`, "top_p must be between 0 and 1"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":-9,` + msgs + `}`, "max_tokens must not be negative"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,` + msgs + `,"thinking":{"type":"enabled","budget_tokens":-1}}`, "thinking.budget_tokens must not be negative"},
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,` + msgs + `,"temperature":-1}`, "temperature must not be negative"},
	} {
		_, err := c.decode([]byte(c.body))
		var ae *llmapi.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%s: %v, want a 400 naming %q", c.body, err, c.want)
		}
	}
	// Empty or absent, these ask for nothing and pass.
	if _, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,` + msgs + `,"mcp_servers":[ ],"container":null,"output_config":{"effort":"high"}}`)); err != nil {
		t.Fatalf("empty mcp_servers, null container, output_config without a format: %v", err)
	}
	// The ends of every range pass.
	if _, err := llmapi.DecodeChatRequest([]byte(`{"model":"m",` + msgs + `,"max_tokens":0,"temperature":0,"top_p":1}`)); err != nil {
		t.Fatalf("zero limit and temperature, top_p 1: %v", err)
	}
	if _, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":1,` + msgs + `,"top_p":0,"temperature":1}`)); err != nil {
		t.Fatalf("top_p 0: %v", err)
	}
	// What Codex sends: encrypted reasoning it may not get back.
	if _, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":"x","top_logprobs":0,"include":["reasoning.encrypted_content"]}`)); err != nil {
		t.Fatalf("include without logprobs: %v", err)
	}
}

// TestChatOutputLimitField: a translated output limit reaches OpenAI's
// reasoning models as max_completion_tokens (they refuse max_tokens, and
// Anthropic clients always send a limit) and every other model, an
// OpenAI-compatible server's, as max_tokens.
func TestChatOutputLimitField(t *testing.T) {
	ir, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":300,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]string{
		"o1": "max_completion_tokens", "o3-mini": "max_completion_tokens", "o4-mini-2025-04-16": "max_completion_tokens",
		"gpt-5": "max_completion_tokens", "GPT-5.1": "max_completion_tokens", "gpt-5-mini": "max_completion_tokens",
		"openai/gpt-5": "max_completion_tokens", "gpt-6": "max_completion_tokens",
		"gpt-4o": "max_tokens", "gpt-4.1-mini": "max_tokens", "gpt-35-turbo": "max_tokens", "gpt-oss-20b": "max_tokens",
		"openai/gpt-oss-120b": "max_tokens", "olmo-2": "max_tokens", "Qwen/Qwen2.5-7B-Instruct": "max_tokens", "llama3.1:8b": "max_tokens", "": "max_tokens",
	} {
		b, err := llmapi.EncodeChat(ir, model)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		json.Unmarshal(b, &got)
		other := "max_tokens"
		if want == other {
			other = "max_completion_tokens"
		}
		if got[want] != float64(300) || got[other] != nil {
			t.Errorf("%q: %s, want only %s", model, b, want)
		}
	}
}

// TestNonReasoningModel: a thinking budget or a reasoning effort reaches
// a Chat Completions or Responses provider's model as its effort, except
// OpenAI's models that take none (they refuse the request with one).
func TestNonReasoningModel(t *testing.T) {
	for _, src := range []string{
		`{"model":"m","max_tokens":9000,"thinking":{"type":"enabled","budget_tokens":8000},"messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","reasoning_effort":"medium","messages":[{"role":"user","content":"x"}]}`,
	} {
		decode := llmapi.DecodeAnthropicRequest
		if strings.Contains(src, "reasoning_effort") {
			decode = llmapi.DecodeChatRequest
		}
		ir, err := decode([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		for model, takes := range map[string]bool{
			"gpt-4o": false, "gpt-4o-mini-2024-07-18": false, "GPT-4.1": false, "openai/gpt-4.1-nano": false,
			"gpt-4-turbo": false, "gpt-3.5-turbo": false, "gpt-35-turbo": false, "chatgpt-4o-latest": false,
			"o3": true, "gpt-5-mini": true, "gpt-oss-20b": true, "qwen3:8b": true, "": true,
		} {
			want := "medium"
			if !takes {
				want = ""
			}
			if got := llmapi.NonReasoningModel(model); got == takes {
				t.Errorf("NonReasoningModel(%q) = %v", model, got)
			}
			b, err := llmapi.EncodeChat(ir, model)
			if err != nil {
				t.Fatal(err)
			}
			var chat struct {
				Effort string `json:"reasoning_effort"`
			}
			json.Unmarshal(b, &chat)
			if chat.Effort != want {
				t.Errorf("%q to Chat: %s, want effort %q", model, b, want)
			}
			b, err = llmapi.EncodeResponses(ir, model)
			if err != nil {
				t.Fatal(err)
			}
			var resp struct {
				Reasoning *struct{ Effort string } `json:"reasoning"`
			}
			json.Unmarshal(b, &resp)
			if (resp.Reasoning == nil) != !takes || (takes && resp.Reasoning.Effort != want) {
				t.Errorf("%q to Responses: %s, want effort %q", model, b, want)
			}
		}
	}
}

// TestToolResultImageToChat: a tool result's image (Claude Code reading a
// screenshot) reaches a Chat Completions provider, whose tool messages
// hold text only, in the user message after the turn's tool messages,
// named by its call; the turn's own text follows it.
func TestToolResultImageToChat(t *testing.T) {
	ir, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,"messages":[
		{"role":"user","content":"look"},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{"path":"a.png"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"a.png, 1x1"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},{"type":"text","text":"what is it?"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := llmapi.EncodeChat(ir, "vision")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Messages []any `json:"messages"`
	}
	json.Unmarshal(b, &got)
	want := []any{
		map[string]any{"role": "user", "content": "look"},
		map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": "toolu_1", "type": "function", "function": map[string]any{"name": "Read", "arguments": `{"path":"a.png"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": "toolu_1", "content": "a.png, 1x1"},
		map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "Image from the result of tool call toolu_1:"},
			map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo="}},
			map[string]any{"type": "text", "text": "what is it?"},
		}},
	}
	if d := cmp.Diff(want, got.Messages); d != "" {
		t.Errorf("messages (-want +got):\n%s", d)
	}
}

// TestDocumentTranslation: a PDF given whole reaches each format in that
// format's own part (Anthropic's document block, Chat's file part,
// Responses' input_file), in a user turn and inside a tool result; a
// plain-text document becomes its title and text; what a format cannot
// take (a document by URL to Chat, a file uploaded to OpenAI, citations)
// is refused with a 400 naming it.
func TestDocumentTranslation(t *testing.T) {
	const pdf = "JVBERi0xLjQK"
	anth := `{"model":"m","max_tokens":9,"messages":[
		{"role":"user","content":[{"type":"document","title":"spec.pdf","source":{"type":"base64","media_type":"application/pdf","data":"` + pdf + `"}},{"type":"text","text":"sum up"}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + pdf + `"}}]},
			{"type":"document","title":"notes","context":"from the wiki","source":{"type":"text","media_type":"text/plain","data":"plain notes"}}]}]}`
	ir, err := llmapi.DecodeAnthropicRequest([]byte(anth))
	if err != nil {
		t.Fatal(err)
	}
	file := map[string]any{"file_data": "data:application/pdf;base64," + pdf, "filename": "spec.pdf"}
	unnamed := map[string]any{"file_data": "data:application/pdf;base64," + pdf, "filename": "document"}

	b, err := llmapi.EncodeChat(ir, "m")
	if err != nil {
		t.Fatal(err)
	}
	var chat struct{ Messages []map[string]any }
	json.Unmarshal(b, &chat)
	if d := cmp.Diff([]any{map[string]any{"type": "file", "file": file}, map[string]any{"type": "text", "text": "sum up"}}, chat.Messages[0]["content"]); d != "" {
		t.Errorf("chat user turn (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]any{
		map[string]any{"type": "text", "text": "Document from the result of tool call toolu_1:"},
		map[string]any{"type": "file", "file": unnamed},
		map[string]any{"type": "text", "text": "notes"},
		map[string]any{"type": "text", "text": "from the wiki"},
		map[string]any{"type": "text", "text": "plain notes"},
	}, chat.Messages[3]["content"]); d != "" || chat.Messages[2]["role"] != "tool" {
		t.Errorf("chat tool result (-want +got):\n%s\n%s", d, b)
	}

	b, err = llmapi.EncodeResponses(ir, "m")
	if err != nil {
		t.Fatal(err)
	}
	var resp struct{ Input []map[string]any }
	json.Unmarshal(b, &resp)
	if got := resp.Input[0]["content"].([]any)[0]; !cmp.Equal(got, map[string]any{"type": "input_file", "file_data": file["file_data"], "filename": "spec.pdf"}) {
		t.Errorf("responses user turn: %v", got)
	}
	if got := resp.Input[2]["output"]; !cmp.Equal(got, []any{map[string]any{"type": "input_file", "file_data": file["file_data"], "filename": "document"}}) {
		t.Errorf("responses tool output: %v", got)
	}

	// Chat and Responses clients' files reach Anthropic as documents.
	for _, c := range []struct {
		decode func([]byte) (*llmapi.Request, error)
		body   string
	}{
		{llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"filename":"spec.pdf","file_data":"data:application/pdf;base64,` + pdf + `"}}]}]}`},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","filename":"spec.pdf","file_data":"data:application/pdf;base64,` + pdf + `"}]}]}`},
	} {
		ir, err := c.decode([]byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := llmapi.EncodeAnthropic(ir, "m")
		if err != nil {
			t.Fatal(err)
		}
		var got struct{ Messages []map[string]any }
		json.Unmarshal(b, &got)
		want := []any{map[string]any{"type": "document", "title": "spec.pdf", "source": map[string]any{"type": "base64", "media_type": "application/pdf", "data": pdf}}}
		if d := cmp.Diff(want, got.Messages[0]["content"]); d != "" {
			t.Errorf("%s -> anthropic (-want +got):\n%s", c.body, d)
		}
		if _, _, err := llmapi.ToInput(ir); !errors.Is(err, llmapi.ErrUnsupported) {
			t.Errorf("a document to a normalized run: %v", err)
		}
	}

	// By URL: Anthropic and Responses take it, Chat's file part does not.
	ir, err = llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://example.com/a.pdf"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := llmapi.EncodeResponses(ir, "m"); err != nil || !strings.Contains(string(b), `"file_url":"https://example.com/a.pdf"`) {
		t.Errorf("url document -> responses: %s %v", b, err)
	}
	var ae *llmapi.APIError
	if _, err := llmapi.EncodeChat(ir, "m"); !errors.As(err, &ae) || !strings.Contains(ae.Message, "a document by URL") {
		t.Errorf("url document -> chat: %v", err)
	}
	for body, want := range map[string]string{
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","citations":{"enabled":true},"source":{"type":"text","data":"x"}}]}]}`: "citations",
		`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"file_1"}}]}]}`:                      `document source "file"`,
	} {
		if _, err := llmapi.DecodeAnthropicRequest([]byte(body)); !errors.As(err, &ae) || !strings.Contains(ae.Message, want) {
			t.Errorf("%s: %v, want a 400 naming %s", body, err, want)
		}
	}
	for body, want := range map[string]string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file_1"}}]}]}`:         "a file by file_id",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"JVBERi0="}}]}]}`:     "base64 data URL",
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_data":"data:x/y,abc"}}]}]}`: "base64 data URL",
	} {
		if _, err := llmapi.DecodeChatRequest([]byte(body)); !errors.As(err, &ae) || !strings.Contains(ae.Message, want) {
			t.Errorf("%s: %v, want a 400 naming %s", body, err, want)
		}
	}
}

// TestEffortToAnthropicBudget: each OpenAI reasoning effort reaches
// Anthropic as its thinking budget (xhigh included, none as no thinking),
// and an effort of another name is refused, not run without thinking.
func TestEffortToAnthropicBudget(t *testing.T) {
	for effort, want := range map[string]any{"minimal": 2048.0, "low": 2048.0, "medium": 8192.0, "high": 24576.0, "xhigh": 32768.0, "none": nil} {
		ir, err := llmapi.DecodeChatRequest([]byte(`{"model":"m","reasoning_effort":"` + effort + `","messages":[{"role":"user","content":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, err := llmapi.EncodeAnthropic(ir, "c")
		if err != nil {
			t.Fatalf("%s: %v", effort, err)
		}
		var got struct {
			Thinking map[string]any `json:"thinking"`
		}
		json.Unmarshal(b, &got)
		if budget := got.Thinking["budget_tokens"]; budget != want {
			t.Errorf("%s: budget %v, want %v", effort, budget, want)
		}
	}
	ir, _ := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":"x","reasoning":{"effort":"extreme"}}`))
	if _, err := llmapi.EncodeAnthropic(ir, "c"); !errors.Is(err, llmapi.ErrUnsupported) || !strings.Contains(err.Error(), `"extreme"`) {
		t.Fatalf("an unknown effort to Anthropic: %v", err)
	}
	if b, err := llmapi.EncodeChat(ir, "o3"); err != nil || !strings.Contains(string(b), `"reasoning_effort":"extreme"`) {
		t.Fatalf("an unknown effort to an OpenAI format passes as sent: %s %v", b, err)
	}
}

// TestThinkingInToolLoop: a Chat client's tool loop with a reasoning
// effort reaches Anthropic without thinking on the turns that continue it
// (Anthropic refuses thinking when the final assistant message called
// tools without a signed thinking block first, and Chat has no place for
// one), and so does a request that forces a tool (Anthropic refuses
// thinking beside it); a fresh turn and an auto tool choice keep
// thinking, and so does a loop whose call came with Anthropic's own
// signed thinking.
func TestThinkingInToolLoop(t *testing.T) {
	loop := `{"model":"m","reasoning_effort":"high","messages":[{"role":"user","content":"weather?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"sunny"}],"tools":[{"type":"function","function":{"name":"w","parameters":{"type":"object"}}}]}`
	fresh := `{"model":"m","reasoning_effort":"high","messages":[{"role":"user","content":"weather?"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"c1","content":"sunny"},{"role":"assistant","content":"Sunny."},{"role":"user","content":"thanks; tomorrow?"}]}`
	signed := `{"model":"m","max_tokens":9000,"thinking":{"type":"enabled","budget_tokens":4096},"messages":[{"role":"user","content":"weather?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"check","signature":"sig"},{"type":"tool_use","id":"t1","name":"w","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"sunny"}]}]}`
	for _, c := range []struct {
		name     string
		decode   func([]byte) (*llmapi.Request, error)
		body     string
		thinking bool
	}{
		{"chat tool loop", llmapi.DecodeChatRequest, loop, false},
		{"chat fresh turn", llmapi.DecodeChatRequest, fresh, true},
		{"anthropic signed tool loop", llmapi.DecodeAnthropicRequest, signed, true},
		{"chat forced tool", llmapi.DecodeChatRequest, `{"model":"m","reasoning_effort":"low","tool_choice":"required","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"w"}}]}`, false},
		{"chat named tool", llmapi.DecodeChatRequest, `{"model":"m","reasoning_effort":"low","tool_choice":{"type":"function","function":{"name":"w"}},"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"w"}}]}`, false},
		{"chat auto tool", llmapi.DecodeChatRequest, `{"model":"m","reasoning_effort":"low","tool_choice":"auto","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"w"}}]}`, true},
	} {
		ir, err := c.decode([]byte(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, err := llmapi.EncodeAnthropic(ir, "claude")
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		json.Unmarshal(b, &got)
		if _, on := got["thinking"]; on != c.thinking {
			t.Errorf("%s: thinking %v, want %v: %s", c.name, on, c.thinking, b)
		}
	}
}

// TestResponsesToolOutputParts: a Responses function_call_output given as
// a list of parts (a tool's text and screenshot) reaches other formats as
// a tool result with that text and image, not as the list's JSON in text;
// an output of another shape is refused.
func TestResponsesToolOutputParts(t *testing.T) {
	ir, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":[{"role":"user","content":"look"},
		{"type":"function_call","call_id":"c1","name":"shot","arguments":"{}"},
		{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"the page"},{"type":"input_image","image_url":"data:image/png;base64,iVBORw0KGgo="}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := llmapi.EncodeAnthropic(ir, "c")
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Messages []map[string]any }
	json.Unmarshal(b, &got)
	want := []any{map[string]any{"type": "tool_result", "tool_use_id": "c1", "content": []any{
		map[string]any{"type": "text", "text": "the page"},
		map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
	}}}
	if d := cmp.Diff(want, got.Messages[2]["content"]); d != "" {
		t.Errorf("tool result (-want +got):\n%s", d)
	}
	for _, output := range []string{`{"text":"x"}`, `42`} {
		_, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":` + output + `}]}`))
		var ae *llmapi.APIError
		if !errors.As(err, &ae) || !strings.Contains(ae.Message, "output must be a string or a list of parts") {
			t.Errorf("output %s: %v", output, err)
		}
	}
	if _, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":null}]}`)); err != nil {
		t.Errorf("a null output: %v", err)
	}
	// An earlier answer's refusal, sent back in the history, is its text.
	ir, err = llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":[{"role":"user","content":"x"},{"type":"message","role":"assistant","content":[{"type":"refusal","refusal":"I can't."}]},{"role":"user","content":"why?"}]}`))
	if err != nil || len(ir.Messages) != 3 || ir.Messages[1].Parts[0].Text != "I can't." {
		t.Fatalf("a refusal in the history: %+v %v", ir, err)
	}
	ir, err = llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"refusal":"I can't."},{"role":"user","content":"why?"}]}`))
	if err != nil || len(ir.Messages) != 3 || len(ir.Messages[1].Parts) != 1 || ir.Messages[1].Parts[0].Text != "I can't." {
		t.Fatalf("a refusal in a Chat history: %+v %v", ir, err)
	}
}

// TestFreeformTool: a Responses custom tool (Codex's apply_patch, whose
// input is a patch, not JSON) reaches a provider without custom tools as a
// function with one string parameter, its history as tool calls and
// results, and its calls come back to the client as custom_tool_call items.
func TestFreeformTool(t *testing.T) {
	const grammar = "start: begin_patch hunk+ end_patch"
	ir, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"gpt-5","input":[
		{"role":"user","content":"fix it"},
		{"type":"custom_tool_call","call_id":"call_1","name":"apply_patch","input":"*** Begin Patch\n*** End Patch"},
		{"type":"custom_tool_call_output","call_id":"call_1","output":"Done!"}],
		"tools":[{"type":"custom","name":"apply_patch","description":"Edit files.","format":{"type":"grammar","syntax":"lark","definition":"` + grammar + `"}},
			{"type":"custom","name":"note"},
			{"type":"function","name":"shell","parameters":{"type":"object"}}],
		"tool_choice":{"type":"custom","name":"apply_patch"}}`))
	if err != nil {
		t.Fatal(err)
	}
	anthropicCarriesFreeform(t, ir, grammar)

	for _, tc := range []struct{ body, want string }{
		{`"input":"x","tools":[{"type":"custom","name":"a","format":{"type":"grammar","syntax":"ebnf","definition":"x"}}]`, `tools[0].format: a grammar needs syntax "lark" or "regex"`},
		{`"input":"x","tools":[{"type":"custom","name":"a","format":{"type":"grammar","syntax":"lark"}}]`, `tools[0].format: a grammar needs`},
		{`"input":"x","tools":[{"type":"custom","name":"a","format":{"type":"json"}}]`, `tools[0].format.type "json"`},
		{`"input":"x","tools":[{"type":"custom","name":"a","format":"text"}]`, `tools[0].format must be an object`},
		{`"input":[{"type":"custom_tool_call","call_id":"c","name":"a","input":{"patch":"x"}}]`, `input[0]: input must be a string`},
		{`"input":[{"type":"custom_tool_call","call_id":"c","name":"a"}]`, `input[0]: input must be a string`},
	} {
		_, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m",` + tc.body + `}`))
		var ae *llmapi.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("%s: %v, want a 400 with %q", tc.body, err, tc.want)
		}
	}
}

// anthropicCarriesFreeform checks how ir, decoded from a request with
// the custom tools apply_patch (a lark grammar) and note, the function
// shell, a custom tool_choice of apply_patch, and one turn of an
// apply_patch call (call_1) and its output, reaches an Anthropic
// upstream: each custom tool a function with one string parameter
// (the grammar in its description), the choice by name, the call a
// tool_use whose input holds the tool's input, its output a tool_result.
func anthropicCarriesFreeform(t *testing.T, ir *llmapi.Request, grammar string) {
	t.Helper()
	if got := ir.FreeformTools(); len(got) != 2 || !got["apply_patch"] || !got["note"] {
		t.Fatalf("freeform tools %v", got)
	}
	b, err := llmapi.EncodeAnthropic(ir, "claude-x")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Tools      []map[string]any
		ToolChoice map[string]any `json:"tool_choice"`
		Messages   []struct{ Content []map[string]any }
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	param := func(desc string) map[string]any {
		return map[string]any{"type": "object", "required": []any{"input"}, "additionalProperties": false,
			"properties": map[string]any{"input": map[string]any{"type": "string", "description": desc}}}
	}
	const free = "The tool's whole input, as free-form text."
	wantTools := []map[string]any{
		{"name": "apply_patch", "description": "Edit files.", "input_schema": param(free + " It must match this lark grammar:\n" + grammar)},
		{"name": "note", "input_schema": param(free)},
		{"name": "shell", "input_schema": map[string]any{"type": "object"}},
	}
	if d := cmp.Diff(wantTools, got.Tools); d != "" {
		t.Errorf("tools (-want +got):\n%s", d)
	}
	if got.ToolChoice["type"] != "tool" || got.ToolChoice["name"] != "apply_patch" {
		t.Errorf("tool_choice %v", got.ToolChoice)
	}
	wantHistory := []map[string]any{
		{"type": "tool_use", "id": "call_1", "name": "apply_patch", "input": map[string]any{"input": "*** Begin Patch\n*** End Patch"}},
	}
	if len(got.Messages) != 3 {
		t.Fatalf("%d messages: %s", len(got.Messages), b)
	}
	if d := cmp.Diff(wantHistory, got.Messages[1].Content); d != "" {
		t.Errorf("the call in the history (-want +got):\n%s", d)
	}
	if c := got.Messages[2].Content; len(c) != 1 || c[0]["type"] != "tool_result" || c[0]["tool_use_id"] != "call_1" {
		t.Errorf("the call's output in the history: %v", c)
	}
}

// TestFreeformCallRendered: a call of a freeform tool is a
// custom_tool_call in the stream and the buffered body, its input the
// string the model gave, whole; a call of any other tool is unchanged.
func TestFreeformCallRendered(t *testing.T) {
	const patch = "*** Begin Patch\n*** Update File: hello.go\n@@\n-\tfmt.Println(\"helo\")\n+\tfmt.Println(\"hello é\")\n*** End Patch"
	fx := llmapitest.Fixture(t, "anthropic_stream_apply_patch.sse")
	stream, status, body := llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)),
		&llmapi.ResponsesRenderer{ID: "r1", Model: "pub", Freeform: map[string]bool{"apply_patch": true}})
	var types []string
	var delta, done string
	for _, ev := range llmapitest.Events(t, stream) {
		var e struct {
			Type  string `json:"type"`
			Delta string `json:"delta"`
			Input string `json:"input"`
			Item  struct {
				Type, ID string
			} `json:"item"`
		}
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			t.Fatal(err)
		}
		types = append(types, e.Type)
		switch e.Type {
		case "response.custom_tool_call_input.delta":
			delta += e.Delta
		case "response.custom_tool_call_input.done":
			done = e.Input
		case "response.output_item.added":
			if e.Item.Type == "custom_tool_call" && !strings.HasPrefix(e.Item.ID, "ctc_") {
				t.Errorf("custom_tool_call item id %q", e.Item.ID)
			}
		}
		if strings.HasPrefix(e.Type, "response.function_call") {
			t.Errorf("%s for a freeform tool", e.Type)
		}
	}
	if delta != patch || done != patch {
		t.Errorf("input in the deltas %q and in .done %q, want %q", delta, done, patch)
	}
	tail := types[len(types)-4:]
	if d := cmp.Diff([]string{"response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", "response.output_item.done", "response.completed"}, tail); d != "" {
		t.Errorf("the call's last events (-want +got):\n%s", d)
	}
	var resp struct {
		Output []map[string]any
	}
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil || len(resp.Output) != 2 {
		t.Fatalf("buffered %d %s", status, body)
	}
	want := map[string]any{"type": "custom_tool_call", "id": "ctc_r1_1", "call_id": "toolu_01P", "name": "apply_patch", "input": patch, "status": "completed"}
	if d := cmp.Diff(want, resp.Output[1]); d != "" {
		t.Errorf("buffered call (-want +got):\n%s", d)
	}

	// The model gave no "input" string: the client gets its whole
	// arguments, for the tool to refuse in its own words.
	fx = llmapitest.Fixture(t, "anthropic_stream_thinking_tools.sse")
	_, _, body = llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)),
		&llmapi.ResponsesRenderer{ID: "r2", Model: "pub", Freeform: map[string]bool{"get_weather": true}})
	if !strings.Contains(string(body), `"input":"{\"city\": \"San Francisco\", \"unit\": \"c\"}"`) {
		t.Errorf("arguments without an input string: %s", body)
	}
	// A freeform set that names another tool leaves the call a function.
	_, _, body = llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)),
		&llmapi.ResponsesRenderer{ID: "r3", Model: "pub", Freeform: map[string]bool{"apply_patch": true}})
	if !strings.Contains(string(body), `"type":"function_call"`) || strings.Contains(string(body), "custom_tool_call") {
		t.Errorf("a function call rendered as custom: %s", body)
	}
}

// TestAllowedTools: an allowed_tools choice (the model may call only some
// of the tools) reaches a provider without it as just those tools, with
// auto or required carried as the choice; names outside the tools, other
// tool kinds and other modes are refused.
func TestAllowedTools(t *testing.T) {
	const obj = `{"type":"object"}`
	chatTools := `"tools":[{"type":"function","function":{"name":"a","parameters":` + obj + `}},{"type":"function","function":{"name":"b","parameters":` + obj + `}},{"type":"function","function":{"name":"c","parameters":` + obj + `}}]`
	respTools := `"tools":[{"type":"function","name":"a","parameters":` + obj + `},{"type":"custom","name":"b"},{"type":"function","name":"c","parameters":` + obj + `}]`
	chat := func(choice string) string {
		return `{"model":"m","messages":[{"role":"user","content":"x"}],` + chatTools + `,"tool_choice":` + choice + `}`
	}
	resp := func(choice string) string {
		return `{"model":"m","input":"x",` + respTools + `,"tool_choice":` + choice + `}`
	}
	for _, c := range []struct {
		decode func([]byte) (*llmapi.Request, error)
		body   string
		tools  []string
		choice string
	}{
		{llmapi.DecodeChatRequest, chat(`{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"c"}},{"type":"function","function":{"name":"a"}}]}}`), []string{"a", "c"}, "any"},
		{llmapi.DecodeResponsesRequest, resp(`{"type":"allowed_tools","mode":"auto","tools":[{"type":"custom","name":"b"}]}`), []string{"b"}, "auto"},
	} {
		ir, err := c.decode([]byte(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		b, err := llmapi.EncodeAnthropic(ir, "claude")
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Tools      []struct{ Name string }
			ToolChoice struct{ Type string } `json:"tool_choice"`
		}
		json.Unmarshal(b, &got)
		var names []string
		for _, tl := range got.Tools {
			names = append(names, tl.Name)
		}
		if !slices.Equal(names, c.tools) || got.ToolChoice.Type != c.choice {
			t.Errorf("%s\n-> tools %v, tool_choice %q; want %v, %q", c.body, names, got.ToolChoice.Type, c.tools, c.choice)
		}
	}
	for _, c := range []struct{ body, want string }{
		{chat(`{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"z"}}]}}`), `tool_choice.tools[0] names "z"`},
		{resp(`{"type":"allowed_tools","mode":"auto","tools":[{"type":"mcp","server_label":"s"}]}`), "only function and custom tools"},
		{resp(`{"type":"allowed_tools","mode":"none","tools":[{"type":"function","name":"a"}]}`), `tool_choice.mode "none"`},
		{resp(`{"type":"allowed_tools","mode":"auto","tools":[]}`), "names no tool"},
	} {
		decode := llmapi.DecodeResponsesRequest
		if strings.Contains(c.body, `"messages"`) {
			decode = llmapi.DecodeChatRequest
		}
		_, err := decode([]byte(c.body))
		var ae *llmapi.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, c.want) {
			t.Errorf("%s: %v, want a 400 with %q", c.body, err, c.want)
		}
	}
}

// TestModelClass: a model's class comes from its name unless it is given,
// and decides, for Chat Completions, the output limit's field and, for
// Chat Completions and Responses, whether a reasoning effort is sent.
func TestModelClass(t *testing.T) {
	for _, c := range []struct {
		model string
		given llmapi.ModelClass
		want  llmapi.ModelClass
	}{
		{"o3", llmapi.ClassByName, llmapi.ClassOpenAIReasoning},
		{"openai/gpt-5-mini", llmapi.ClassByName, llmapi.ClassOpenAIReasoning},
		{"gpt-4.1", llmapi.ClassByName, llmapi.ClassOpenAIChat},
		{"qwen3:8b", llmapi.ClassByName, llmapi.ClassOther},
		{"deepseek-reasoner", llmapi.ClassByName, llmapi.ClassReasoningContent},
		{"deepseek-ai/DeepSeek-V3.2", llmapi.ClassByName, llmapi.ClassReasoningContent},
		{"my-deployment", llmapi.ClassOpenAIReasoning, llmapi.ClassOpenAIReasoning},
		{"gpt-4o", llmapi.ClassOther, llmapi.ClassOther},
	} {
		if got := c.given.Of(c.model); got != c.want {
			t.Errorf("%v.Of(%q) = %v, want %v", c.given, c.model, got, c.want)
		}
	}
	r := &llmapi.Request{MaxTokens: 100, ReasoningEffort: "high", Messages: []llmapi.Message{{Role: "user", Parts: []llmapi.Part{{Kind: llmapi.PartText, Text: "x"}}}}}
	for _, c := range []struct {
		class         llmapi.ModelClass
		limit, effort string // the fields sent: Chat's limit, and whether an effort goes
	}{
		{llmapi.ClassOther, "max_tokens", "high"},
		{llmapi.ClassOpenAIReasoning, "max_completion_tokens", "high"},
		{llmapi.ClassOpenAIChat, "max_tokens", ""},
		{llmapi.ClassReasoningContent, "max_tokens", "high"},
	} {
		b, err := llmapi.EncodeChatAs(r, "deployment", c.class)
		if err != nil {
			t.Fatal(err)
		}
		var chat map[string]any
		json.Unmarshal(b, &chat)
		other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[c.limit]
		if chat[c.limit] != 100.0 || chat[other] != nil || (chat["reasoning_effort"] != nil) != (c.effort != "") {
			t.Errorf("chat as %v: %s", c.class, b)
		}
		if b, err = llmapi.EncodeResponsesAs(r, "deployment", c.class); err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Reasoning *struct{ Effort string }
		}
		json.Unmarshal(b, &resp)
		got := ""
		if resp.Reasoning != nil {
			got = resp.Reasoning.Effort
		}
		if got != c.effort {
			t.Errorf("responses as %v: effort %q, want %q: %s", c.class, got, c.effort, b)
		}
	}
}

// TestAnthropicStreamErrorTypes: an error event in an Anthropic stream
// reaches an Anthropic client with its documented type, and a Chat
// Completions client with the nearest type of its own; a type outside
// the documented set is a plain api_error, never echoed.
func TestAnthropicStreamErrorTypes(t *testing.T) {
	for _, tc := range []struct{ in, anthropic, chat string }{
		{"overloaded_error", "overloaded_error", "server_error"},
		{"rate_limit_error", "rate_limit_error", "rate_limit_error"},
		{"invalid_request_error", "invalid_request_error", "invalid_request_error"},
		{"request_too_large", "invalid_request_error", "invalid_request_error"},
		{"authentication_error", "authentication_error", "authentication_error"},
		{"permission_error", "permission_error", "server_error"},
		{"not_found_error", "not_found_error", "invalid_request_error"},
		{"api_error", "api_error", "server_error"},
		{"sk-secret_error", "api_error", "server_error"},
	} {
		in := "event: message_start\n" + `data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":1}}}` + "\n\n" +
			"event: error\n" + `data: {"type":"error","error":{"type":"` + tc.in + `","message":"boom"}}` + "\n\n"
		for name, want := range map[string]string{"anthropic": tc.anthropic, "chat": tc.chat} {
			var r llmapi.Renderer = &llmapi.ChatRenderer{ID: "c"}
			if name == "anthropic" {
				r = &llmapi.AnthropicRenderer{ID: "m"}
			}
			stream, _, _ := llmapitest.Render(t, llmapi.DecodeAnthropicStream(strings.NewReader(in)), r)
			evs := llmapitest.Events(t, stream)
			last := string(evs[len(evs)-1].Data)
			if !strings.Contains(last, `"type":"`+want+`"`) || strings.Contains(string(stream), "sk-secret") || strings.Contains(string(stream), "boom") {
				t.Errorf("%s to %s: last event %s", tc.in, name, last)
			}
		}
	}
}

// TestChatCustomTool: a Chat Completions custom tool is carried as a
// function with one string parameter (its grammar, in Chat's nested
// shape, in that parameter's description), its calls in the history as
// calls of that function, a custom tool_choice by name; a call of it
// comes back to the Chat client as a custom tool call, streamed and
// buffered, its input whole.
func TestChatCustomTool(t *testing.T) {
	const grammar = "start: begin_patch hunk+ end_patch"
	ir, err := llmapi.DecodeChatRequest([]byte(`{"model":"gpt-5","messages":[
		{"role":"user","content":"fix it"},
		{"role":"assistant","tool_calls":[{"id":"call_1","type":"custom","custom":{"name":"apply_patch","input":"*** Begin Patch\n*** End Patch"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"Done!"}],
		"tools":[{"type":"custom","custom":{"name":"apply_patch","description":"Edit files.","format":{"type":"grammar","grammar":{"syntax":"lark","definition":"` + grammar + `"}}}},
			{"type":"custom","custom":{"name":"note","format":{"type":"text"}}},
			{"type":"function","function":{"name":"shell","parameters":{"type":"object"}}}],
		"tool_choice":{"type":"custom","custom":{"name":"apply_patch"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	anthropicCarriesFreeform(t, ir, grammar)

	// Chat's allowed_tools names a custom tool in its own shape.
	ir, err = llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],
		"tools":[{"type":"custom","custom":{"name":"apply_patch"}},{"type":"function","function":{"name":"shell"}}],
		"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"custom","custom":{"name":"apply_patch"}}]}}}`))
	if err != nil || len(ir.Tools) != 1 || ir.Tools[0].Name != "apply_patch" || !ir.Tools[0].Freeform || ir.ToolChoice == nil || ir.ToolChoice.Mode != "any" {
		t.Fatalf("allowed custom tool: %v, %+v", err, ir)
	}

	for _, tc := range []struct{ body, want string }{
		{`"tools":[{"type":"custom"}]`, `tools[0]: a custom tool needs custom.name`},
		{`"tools":[{"type":"custom","custom":{"name":"a","format":{"type":"grammar","grammar":{"syntax":"ebnf","definition":"x"}}}}]`, `tools[0].custom.format: a grammar needs syntax "lark" or "regex"`},
		{`"tools":[{"type":"custom","custom":{"name":"a","format":"text"}}]`, `tools[0].custom.format must be an object`},
		{`"tools":[{"type":"web_search"}]`, `tool type "web_search" cannot be translated`},
		{`"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"a"}}]}]`, `messages[0].tool_calls[0]: a custom call needs custom.input`},
		{`"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"a","input":{"x":1}}}]}]`, `invalid request body`},
		{`"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"mcp"}]}]`, `messages[0].tool_calls[0].type "mcp"`},
	} {
		body := `{"model":"m",` + tc.body + `}`
		if !strings.Contains(tc.body, `"messages"`) {
			body = `{"model":"m","messages":[{"role":"user","content":"x"}],` + tc.body + `}`
		}
		_, err := llmapi.DecodeChatRequest([]byte(body))
		var ae *llmapi.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, tc.want) {
			t.Errorf("%s: %v, want a 400 with %q", tc.body, err, tc.want)
		}
	}

	// Rendered back: the call is a custom call, its input whole.
	const patch = "*** Begin Patch\n*** Update File: hello.go\n@@\n-\tfmt.Println(\"helo\")\n+\tfmt.Println(\"hello é\")\n*** End Patch"
	fx := llmapitest.Fixture(t, "anthropic_stream_apply_patch.sse")
	stream, status, whole := llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)),
		&llmapi.ChatRenderer{ID: "c1", Model: "pub", Freeform: map[string]bool{"apply_patch": true}})
	var input string
	var started bool
	for _, ev := range llmapitest.Events(t, stream) {
		if string(ev.Data) == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						ID, Type string
						Function *struct{ Arguments string }
						Custom   *struct{ Name, Input string }
					} `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal(ev.Data, &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Function != nil {
					t.Errorf("a function delta for a custom tool: %s", ev.Data)
				}
				if tc.Type == "custom" && tc.Custom != nil && tc.Custom.Name == "apply_patch" && tc.ID != "" {
					started = true
				}
				if tc.Custom != nil {
					input += tc.Custom.Input
				}
			}
		}
	}
	if !started || input != patch {
		t.Errorf("stream: started %v, input %q, want %q", started, input, patch)
	}
	var resp struct {
		Choices []struct {
			Message struct {
				ToolCalls []map[string]any `json:"tool_calls"`
			}
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal(whole, &resp); status != 200 || err != nil || len(resp.Choices) != 1 {
		t.Fatalf("buffered %d %s", status, whole)
	}
	want := []map[string]any{{"id": "toolu_01P", "type": "custom", "custom": map[string]any{"name": "apply_patch", "input": patch}}}
	if d := cmp.Diff(want, resp.Choices[0].Message.ToolCalls); d != "" || resp.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("buffered call (-want +got):\n%s finish %q", d, resp.Choices[0].FinishReason)
	}
}

// TestBufferedAnswerNotAnObject: a whole answer that is not a JSON object
// (null, which json.Unmarshal takes as a no-op, an array, a string) is a
// malformed answer, never an empty success.
func TestBufferedAnswerNotAnObject(t *testing.T) {
	for _, body := range []string{"null", " null\n", "[]", `"x"`, "", "{"} {
		for name, dec := range map[string]llmapi.Decoder{
			"chat": llmapi.DecodeChat([]byte(body)), "anthropic": llmapi.DecodeAnthropic([]byte(body)), "responses": llmapi.DecodeResponses([]byte(body)),
		} {
			_, status, out := llmapitest.Render(t, dec, &llmapi.ChatRenderer{ID: "c"})
			if status != 502 || !strings.Contains(string(out), "malformed answer") {
				t.Errorf("%s answer %q: %d %s", name, body, status, out)
			}
		}
	}
}

// TestChatStreamErrorCodes: an error in a Chat Completions stream whose
// code is the HTTP status it stands for (vLLM's) reaches an Anthropic
// client as that status's type; an error without one (OpenAI's own
// codes are strings) is an api_error.
func TestChatStreamErrorCodes(t *testing.T) {
	for _, tc := range []struct{ code, want string }{
		{"429", "rate_limit_error"},
		{"503", "overloaded_error"},
		{"400", "invalid_request_error"},
		{"500", "api_error"},
		{`"server_error"`, "api_error"},
		{"null", "api_error"},
	} {
		in := `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n" +
			`data: {"error":{"message":"boom","type":"BadRequestError","code":` + tc.code + `}}` + "\n\n"
		stream, _, _ := llmapitest.Render(t, llmapi.DecodeChatStream(strings.NewReader(in)), &llmapi.AnthropicRenderer{ID: "m"})
		evs := llmapitest.Events(t, stream)
		if last := string(evs[len(evs)-1].Data); !strings.Contains(last, `"type":"`+tc.want+`"`) || strings.Contains(last, "boom") {
			t.Errorf("code %s: last event %s, want type %s", tc.code, last, tc.want)
		}
	}
}

// TestAnthropicStreamUsageTotals: a message_delta that totals the input
// (newer API versions) replaces message_start's input, its cache reads
// with it.
func TestAnthropicStreamUsageTotals(t *testing.T) {
	in := "event: message_start\n" + `data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":5,"cache_read_input_tokens":2,"cache_creation_input_tokens":1,"output_tokens":9}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	got := lastUsage(llmapi.DecodeAnthropicStream(strings.NewReader(in)))
	if want := (llmapi.Usage{Input: 8, Output: 9, Cached: 2}); got == nil || *got != want {
		t.Fatalf("usage %+v, want %+v", got, want)
	}
}

// lastUsage reads dec to its end and returns the last usage it decoded,
// nil for none.
func lastUsage(dec llmapi.Decoder) *llmapi.Usage {
	var got *llmapi.Usage
	for {
		ev, err := dec.Next()
		if err != nil {
			return got
		}
		if ev.Kind == llmapi.EvUsage {
			got = &ev.Usage
		}
	}
}

// TestSumTokens: a total of a provider's counts is -1, which no one books,
// when any part is out of range: a negative part hidden by larger ones,
// a part above MaxTokens, or parts that would wrap around int64 to a
// believable total.
func TestSumTokens(t *testing.T) {
	const huge = math.MaxInt64
	for _, tc := range []struct {
		parts []int64
		want  int64
	}{
		{nil, 0},
		{[]int64{10, 200, 3000}, 3210},
		{[]int64{llmapi.MaxTokens, 0}, llmapi.MaxTokens},
		{[]int64{-1000, 1500}, -1},
		{[]int64{1500, 0, -1}, -1},
		{[]int64{llmapi.MaxTokens + 1}, -1},
		{[]int64{huge, huge, 2}, -1}, // wraps to exactly 0
	} {
		if got := llmapi.SumTokens(tc.parts...); got != tc.want {
			t.Errorf("SumTokens(%v) = %d, want %d", tc.parts, got, tc.want)
		}
	}
}

// TestAnthropicUsageOutOfRange: an Anthropic answer whose input parts are
// out of range, whole or streamed, decodes to an input of -1 (so that
// the Edge drops the usage as impossible), never to the sum's wrapped or
// offset value.
func TestAnthropicUsageOutOfRange(t *testing.T) {
	for _, usage := range []string{
		`"input_tokens":-1000,"cache_read_input_tokens":0,"cache_creation_input_tokens":1500,"output_tokens":3`,
		`"input_tokens":9223372036854775807,"cache_read_input_tokens":2,"cache_creation_input_tokens":9223372036854775807,"output_tokens":3`,
	} {
		whole := `{"id":"m","type":"message","role":"assistant","model":"x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{` + usage + `}}`
		stream := "event: message_start\n" + `data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":3,"output_tokens":1}}}` + "\n\n" +
			"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{` + usage + `}}` + "\n\n" +
			"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
		for name, dec := range map[string]llmapi.Decoder{
			"whole":  llmapi.DecodeAnthropic([]byte(whole)),
			"stream": llmapi.DecodeAnthropicStream(strings.NewReader(stream)),
		} {
			if got := lastUsage(dec); got == nil || got.Input != -1 || got.Output != 3 {
				t.Errorf("%s, usage {%s}: decoded %+v, want input -1, output 3", name, usage, got)
			}
		}
	}
}

// TestAnthropicStreamOpenBlocks: a stream that opens blocks without
// closing them is refused past 1024 open at once, not remembered without
// end.
func TestAnthropicStreamOpenBlocks(t *testing.T) {
	var b strings.Builder
	b.WriteString("event: message_start\n" + `data: {"type":"message_start","message":{"id":"m","usage":{"input_tokens":3}}}` + "\n\n")
	for i := range 1025 {
		fmt.Fprintf(&b, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n", i*7)
	}
	_, status, body := llmapitest.Render(t, llmapi.DecodeAnthropicStream(strings.NewReader(b.String())), &llmapi.ChatRenderer{ID: "c"})
	if status != 502 || !strings.Contains(string(body), "too many content blocks open at once") {
		t.Fatalf("%d %s", status, body)
	}
}

// TestResponsesErrorCodes: a Responses error (an error event, a
// response.failed, a whole answer whose status is failed) reaches an
// Anthropic client as the type its code stands for; a whole failed answer
// is an error, never an empty success.
func TestResponsesErrorCodes(t *testing.T) {
	created := `data: {"type":"response.created","response":{"id":"r","status":"in_progress"}}` + "\n\n"
	for _, tc := range []struct{ code, want string }{
		{`"rate_limit_exceeded"`, "rate_limit_error"},
		{`"invalid_prompt"`, "invalid_request_error"},
		{`"context_length_exceeded"`, "invalid_request_error"},
		{`"image_too_large"`, "invalid_request_error"},
		{`"server_error"`, "api_error"},
		{"503", "overloaded_error"},
		{"null", "api_error"},
	} {
		for name, in := range map[string]string{
			"error event":     created + `data: {"type":"error","code":` + tc.code + `,"message":"boom"}` + "\n\n",
			"response.failed": created + `data: {"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":` + tc.code + `,"message":"boom"}}}` + "\n\n",
		} {
			stream, _, _ := llmapitest.Render(t, llmapi.DecodeResponsesStream(strings.NewReader(in)), &llmapi.AnthropicRenderer{ID: "m"})
			evs := llmapitest.Events(t, stream)
			if last := string(evs[len(evs)-1].Data); !strings.Contains(last, `"type":"`+tc.want+`"`) || strings.Contains(last, "boom") {
				t.Errorf("%s with code %s: last event %s, want type %s", name, tc.code, last, tc.want)
			}
		}
		whole := `{"id":"r","status":"failed","error":{"code":` + tc.code + `,"message":"boom"},"output":[]}`
		_, status, body := llmapitest.Render(t, llmapi.DecodeResponses([]byte(whole)), &llmapi.AnthropicRenderer{ID: "m"})
		if status < 400 || !strings.Contains(string(body), `"type":"`+tc.want+`"`) || strings.Contains(string(body), "boom") {
			t.Errorf("whole failed answer with code %s: %d %s, want type %s", tc.code, status, body, tc.want)
		}
	}
}

// TestWholeErrorBodyWithSuccess: an error body a provider sends with a
// success status is the error its type or code stands for, never an empty
// answer.
func TestWholeErrorBodyWithSuccess(t *testing.T) {
	for name, tc := range map[string]struct {
		dec  llmapi.Decoder
		want string
	}{
		"anthropic": {llmapi.DecodeAnthropic([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"boom"}}`)), "overloaded_error"},
		"chat":      {llmapi.DecodeChat([]byte(`{"error":{"message":"boom","code":429}}`)), "rate_limit_error"},
	} {
		_, status, body := llmapitest.Render(t, tc.dec, &llmapi.AnthropicRenderer{ID: "m"})
		if status < 400 || !strings.Contains(string(body), `"type":"`+tc.want+`"`) || strings.Contains(string(body), "boom") {
			t.Errorf("%s: %d %s, want type %s", name, status, body, tc.want)
		}
	}
}

// TestToolCallIdentity: a provider's call without an id gets one, unique
// to the call (clients answer calls by id, and Anthropic refuses a history
// with two calls of one id); a call without a tool's name ends the answer
// with an error, streamed or whole, since no client can run it.
func TestToolCallIdentity(t *testing.T) {
	stream := func(call string) string {
		return `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[` + call + `]}}]}` + "\n\n" +
			`data: {"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
	}
	whole := func(call string) string {
		return `{"id":"c","model":"m","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[` + call + `]},"finish_reason":"tool_calls"}]}`
	}
	noID := `{"index":0,"type":"function","function":{"name":"get","arguments":"{}"}}`
	ids := map[string]bool{}
	for range 2 {
		for name, dec := range map[string]llmapi.Decoder{
			"stream": llmapi.DecodeChatStream(strings.NewReader(stream(noID))),
			"whole":  llmapi.DecodeChat([]byte(whole(noID))),
		} {
			_, status, body := llmapitest.Render(t, dec, &llmapi.AnthropicRenderer{ID: "msg_1"})
			var msg struct {
				Content []struct{ Type, ID, Name string }
			}
			if err := json.Unmarshal(body, &msg); err != nil || status != 200 || len(msg.Content) != 1 {
				t.Fatalf("%s: %d %s", name, status, body)
			}
			id := msg.Content[0].ID
			if !strings.HasPrefix(id, "call_") || ids[id] {
				t.Errorf("%s: made-up id %q (ids so far %v)", name, id, ids)
			}
			ids[id] = true
		}
	}

	noName := `{"index":0,"id":"call_1","type":"function","function":{"arguments":"{}"}}`
	for name, dec := range map[string]llmapi.Decoder{
		"stream": llmapi.DecodeChatStream(strings.NewReader(stream(noName))),
		"whole":  llmapi.DecodeChat([]byte(whole(noName))),
	} {
		out, status, body := llmapitest.Render(t, dec, &llmapi.AnthropicRenderer{ID: "msg_1"})
		if strings.Contains(string(out), "tool_use") || status != 502 || !strings.Contains(string(body), "without a tool name") {
			t.Errorf("%s: %d %s, stream\n%s", name, status, body, out)
		}
	}
}

// TestToolUseStopNeedsCall: a provider that says it stopped for a tool
// call, and called none, ended its turn; clients told tool_use (or
// tool_calls) look for calls to run.
func TestToolUseStopNeedsCall(t *testing.T) {
	in := `{"id":"m","type":"message","role":"assistant","content":[{"type":"text","text":"done"}],"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":1}}`
	for _, tc := range []struct {
		r    llmapi.Renderer
		want string
	}{
		{&llmapi.AnthropicRenderer{ID: "m"}, `"stop_reason":"end_turn"`},
		{&llmapi.ChatRenderer{ID: "c"}, `"finish_reason":"stop"`},
		{&llmapi.ResponsesRenderer{ID: "r"}, `"status":"completed"`},
	} {
		stream, _, body := llmapitest.Render(t, llmapi.DecodeAnthropic([]byte(in)), tc.r)
		if !strings.Contains(string(body), tc.want) || !strings.Contains(string(stream), tc.want) {
			t.Errorf("%T: want %s in\n%s\n%s", tc.r, tc.want, body, stream)
		}
	}
}

// TestChatUsageNullOnEveryChunk: with usage asked for, every chunk but the
// last carries "usage": null, as OpenAI's do (clients that read usage off
// each chunk find it there); without, no chunk has the key.
func TestChatUsageNullOnEveryChunk(t *testing.T) {
	in := llmapitest.Fixture(t, "chat_stream_parallel_tools.sse")
	for _, include := range []bool{true, false} {
		stream, _, _ := llmapitest.Render(t, llmapi.DecodeChatStream(bytes.NewReader(in)), &llmapi.ChatRenderer{ID: "c", IncludeUsage: include})
		evs := llmapitest.Events(t, stream)
		for i, ev := range evs[:len(evs)-1] { // [DONE] last
			var c map[string]json.RawMessage
			if err := json.Unmarshal(ev.Data, &c); err != nil {
				t.Fatal(err)
			}
			u, has := c["usage"]
			last := i == len(evs)-2
			switch {
			case !include && has:
				t.Errorf("usage not asked for, chunk %d has it: %s", i, ev.Data)
			case include && last && (string(u) == "null" || !has):
				t.Errorf("the last chunk has no usage: %s", ev.Data)
			case include && !last && string(u) != "null":
				t.Errorf("chunk %d's usage is not null: %s", i, ev.Data)
			}
		}
	}
}

// TestResponsesStreamWithoutCreated: a provider's Responses stream whose
// first event is an output item (no response.created) still renders an
// answer that starts before its content: one message_start first.
func TestResponsesStreamWithoutCreated(t *testing.T) {
	in := `data: {"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"m1"}}` + "\n\n" +
		`data: {"type":"response.output_text.delta","item_id":"m1","output_index":0,"delta":"hi"}` + "\n\n" +
		`data: {"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"m1"}}` + "\n\n" +
		`data: {"type":"response.created","response":{"id":"late","status":"in_progress"}}` + "\n\n" +
		`data: {"type":"response.completed","response":{"id":"late","status":"completed"}}` + "\n\n"
	stream, _, _ := llmapitest.Render(t, llmapi.DecodeResponsesStream(strings.NewReader(in)), &llmapi.AnthropicRenderer{ID: "msg_1"})
	evs := llmapitest.Events(t, stream)
	if len(evs) == 0 || evs[0].Type != "message_start" || strings.Count(string(stream), "event: message_start") != 1 {
		t.Fatalf("stream:\n%s", stream)
	}
	if err := llmapitest.CheckAnthropic(evs); err != nil {
		t.Fatal(err)
	}
}

// TestToolWithoutSchemaOrDescription: a tool given no description is sent
// without one, and one whose schema is missing or null is sent taking an
// object (every format's function does), to every upstream format.
func TestToolWithoutSchemaOrDescription(t *testing.T) {
	req, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":"x","tools":[` +
		`{"type":"function","name":"a","parameters":null},{"type":"function","name":"b"},` +
		`{"type":"function","name":"c","description":"Cee.","parameters":{"type":"object","properties":{"n":{"type":"number"}}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	empty := map[string]any{"type": "object", "properties": map[string]any{}}
	cSchema := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "number"}}}
	for _, c := range []struct {
		name string
		enc  func(*llmapi.Request, string) ([]byte, error)
		// tool unwraps one encoded tool into its name, description and schema fields.
		tool func(map[string]any) map[string]any
		key  string
	}{
		{"chat", llmapi.EncodeChat, func(m map[string]any) map[string]any { f, _ := m["function"].(map[string]any); return f }, "parameters"},
		{"anthropic", llmapi.EncodeAnthropic, func(m map[string]any) map[string]any { return m }, "input_schema"},
		{"responses", llmapi.EncodeResponses, func(m map[string]any) map[string]any { return m }, "parameters"},
	} {
		out, err := c.enc(req, "target")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var body struct{ Tools []map[string]any }
		if err := json.Unmarshal(out, &body); err != nil || len(body.Tools) != 3 {
			t.Fatalf("%s: %v %s", c.name, err, out)
		}
		for i, want := range []struct {
			desc   any
			schema map[string]any
		}{{nil, empty}, {nil, empty}, {"Cee.", cSchema}} {
			f := c.tool(body.Tools[i])
			if d := cmp.Diff(want.schema, f[c.key]); f["description"] != want.desc || d != "" {
				t.Errorf("%s: tool %d is %v (schema -want +got:\n%s)", c.name, i, body.Tools[i], d)
			}
		}
	}
}

// TestAnthropicToolIDs: a conversation another provider began may hold
// tool call ids Anthropic refuses (Kimi's "functions.bash:0"); sent to
// Anthropic, each such id is rewritten to its pattern, the call's and its
// result's alike, and ids that differ only in refused bytes stay apart.
// An id Anthropic takes is sent as it is.
func TestAnthropicToolIDs(t *testing.T) {
	ids := []string{"functions.bash:0", "functions.bash;0", "call_1-x", "调用"}
	var calls, results []string
	for _, id := range ids {
		calls = append(calls, `{"id":`+strconv.Quote(id)+`,"type":"function","function":{"name":"bash","arguments":"{}"}}`)
		results = append(results, `{"role":"tool","tool_call_id":`+strconv.Quote(id)+`,"content":"ok"}`)
	}
	_, out := translated(t, llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"user","content":"go"},`+
		`{"role":"assistant","tool_calls":[`+strings.Join(calls, ",")+`]},`+strings.Join(results, ",")+`]}`, toAnthropic)
	var body struct {
		Messages []struct {
			Content []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(out, &body); err != nil || len(body.Messages) != 3 {
		t.Fatalf("%v %s", err, out)
	}
	pattern := regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	var used, answered []string
	for _, b := range body.Messages[1].Content {
		used = append(used, b.ID)
	}
	for _, b := range body.Messages[2].Content {
		answered = append(answered, b.ToolUseID)
	}
	if !slices.Equal(used, answered) || len(used) != len(ids) || used[2] != "call_1-x" {
		t.Fatalf("calls %q, results %q", used, answered)
	}
	seen := map[string]bool{}
	for _, id := range used {
		if !pattern.MatchString(id) || seen[id] {
			t.Errorf("id %q: not Anthropic's pattern, or not unique, in %q", id, used)
		}
		seen[id] = true
	}
}

// TestAnthropicSamplingOneOf: Anthropic's newer models refuse temperature
// and top_p together, so a translated request given both sends one: the
// temperature, unless it is the default (1) and top_p is not.
func TestAnthropicSamplingOneOf(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		temp, topP *float64
		want       string // the sampling fields sent
	}{
		{f(0.5), f(0.9), `{"temperature":0.5}`},
		{f(1), f(0.9), `{"top_p":0.9}`},
		{f(1), f(1), `{"temperature":1}`},
		{f(1.5), nil, `{"temperature":1}`},
		{nil, f(0.3), `{"top_p":0.3}`},
		{nil, nil, `{}`},
	} {
		r := &llmapi.Request{Temperature: c.temp, TopP: c.topP, Messages: []llmapi.Message{{Role: llmapi.RoleUser, Parts: []llmapi.Part{{Kind: llmapi.PartText, Text: "x"}}}}}
		out, err := llmapi.EncodeAnthropic(r, "claude")
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.Unmarshal(out, &body)
		sent := map[string]any{}
		for _, k := range []string{"temperature", "top_p"} {
			if v, ok := body[k]; ok {
				sent[k] = v
			}
		}
		if got, _ := json.Marshal(sent); string(got) != c.want {
			in, _ := json.Marshal(map[string]*float64{"temperature": c.temp, "top_p": c.topP})
			t.Errorf("given %s: sent %s, want %s", in, got, c.want)
		}
	}
}

// TestReasoningModelSampling: OpenAI's reasoning models refuse a
// temperature or top_p but at their default, so neither is sent to one;
// other models are sent both.
func TestReasoningModelSampling(t *testing.T) {
	temp, topP := 0.2, 0.5
	r := &llmapi.Request{Temperature: &temp, TopP: &topP, Messages: []llmapi.Message{{Role: llmapi.RoleUser, Parts: []llmapi.Part{{Kind: llmapi.PartText, Text: "x"}}}}}
	for _, model := range []string{"o3", "gpt-5-mini", "gpt-4.1", "qwen3:8b"} {
		reasoning := llmapi.ClassByName.Of(model) == llmapi.ClassOpenAIReasoning
		for name, enc := range map[string]func(*llmapi.Request, string) ([]byte, error){"chat": llmapi.EncodeChat, "responses": llmapi.EncodeResponses} {
			out, err := enc(r, model)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			json.Unmarshal(out, &body)
			_, hasT := body["temperature"]
			_, hasP := body["top_p"]
			if hasT == reasoning || hasP == reasoning {
				t.Errorf("%s to %s: temperature sent %v, top_p sent %v", name, model, hasT, hasP)
			}
		}
	}
}

// TestAnthropicEmptyContent: Anthropic refuses an empty text block, which
// OpenAI's formats take. A tool's empty result goes without content; a
// conversation whose every message is empty is refused with 400 before
// it is sent.
func TestAnthropicEmptyContent(t *testing.T) {
	req, err := llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":""}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := llmapi.EncodeAnthropic(req, "claude")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(`"text":""`)) || !bytes.Contains(out, []byte(`{"tool_use_id":"c","type":"tool_result"}`)) {
		t.Errorf("an empty tool result: %s", out)
	}
	req, err = llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":""}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var ae *llmapi.APIError
	if out, err := llmapi.EncodeAnthropic(req, "claude"); !errors.As(err, &ae) || ae.Status != 400 {
		t.Errorf("only an empty message: %s, %v", out, err)
	}
}

// TestAnthropicInputSchema: Anthropic takes a tool's input schema only as
// an object schema with its type said, where OpenAI's formats take one
// without a type ({} for a tool without parameters). Such a schema goes
// to Anthropic with "type": "object"; one of another type, or not an
// object, is refused with 400 naming the tool.
func TestAnthropicInputSchema(t *testing.T) {
	for _, c := range []struct {
		params, want string // want: the input_schema sent, or the error's text
	}{
		{`{}`, `{"type":"object"}`},
		{`{"properties":{"n":{"type":"number"}}}`, `{"properties":{"n":{"type":"number"}},"type":"object"}`},
		{`{"type":"object","properties":{}}`, `{"type":"object","properties":{}}`},
		{`{"type":"array"}`, `tools[0] (f): the input schema's type is "array"`},
		{`[1]`, `tools[0] (f): the input schema is not a JSON object`},
	} {
		req, err := llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + c.params + `}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		out, err := llmapi.EncodeAnthropic(req, "claude")
		var body struct {
			Tools []struct {
				InputSchema json.RawMessage `json:"input_schema"`
			} `json:"tools"`
		}
		var ae *llmapi.APIError
		switch {
		case err != nil && (!errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, c.want)):
			t.Errorf("parameters %s: %v", c.params, err)
		case err == nil && (json.Unmarshal(out, &body) != nil || len(body.Tools) != 1 || string(body.Tools[0].InputSchema) != c.want):
			t.Errorf("parameters %s: sent %s, want %s", c.params, out, c.want)
		}
	}
}

// TestAnthropicToolInput: an earlier call's arguments go to Anthropic as
// the JSON object it takes ({} for none or null); a call whose arguments
// are not an object cannot go and is refused with 400 before it is sent,
// as is, in any format, a call without a name or an id, or a result that
// names no call.
func TestAnthropicToolInput(t *testing.T) {
	for _, c := range []struct {
		call, want string // want: the input sent, or the error's text
	}{
		{`{"type":"function_call","call_id":"c","name":"f","arguments":"null"}`, `{}`},
		{`{"type":"function_call","call_id":"c","name":"f","arguments":" {\"a\":1} "}`, `{"a":1}`},
		{`{"type":"function_call","call_id":"c","name":"f","arguments":"[1]"}`, "the call of f has arguments that are not a JSON object"},
		{`{"type":"function_call","call_id":"c","arguments":"{}"}`, `tool call "c" in the history has no name`},
		{`{"type":"function_call","name":"f","arguments":"{}"}`, `a tool call of "f" in the history has no id`},
	} {
		req, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":[{"role":"user","content":"x"},` + c.call +
			`,{"type":"function_call_output","call_id":"c","output":"ok"}]}`))
		var out []byte
		if err == nil {
			out, err = llmapi.EncodeAnthropic(req, "claude")
		}
		var ae *llmapi.APIError
		switch {
		case err != nil && (!errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, c.want)):
			t.Errorf("%s: %v", c.call, err)
		case err == nil && !bytes.Contains(out, []byte(`"input":`+c.want)):
			t.Errorf("%s: sent %s, want input %s", c.call, out, c.want)
		}
	}
}

// TestToolChoiceWithoutTools: a tool choice that leaves the model free
// (auto, none) with no tools is not sent on, as OpenAI refuses one.
func TestToolChoiceWithoutTools(t *testing.T) {
	req, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"auto"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, enc := range map[string]func(*llmapi.Request, string) ([]byte, error){"chat": llmapi.EncodeChat, "responses": llmapi.EncodeResponses, "anthropic": llmapi.EncodeAnthropic} {
		out, err := enc(req, "target")
		if err != nil || bytes.Contains(out, []byte("tool_choice")) || bytes.Contains(out, []byte("parallel_tool_calls")) {
			t.Errorf("%s: %s %v", name, out, err)
		}
	}
}

// TestEveryMessageEmpty: a conversation whose messages hold nothing (a
// user message without content) is refused with 400 by every encoder,
// not sent as no messages at all.
func TestEveryMessageEmpty(t *testing.T) {
	req, err := llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, enc := range map[string]func(*llmapi.Request, string) ([]byte, error){"chat": llmapi.EncodeChat, "responses": llmapi.EncodeResponses, "anthropic": llmapi.EncodeAnthropic} {
		var ae *llmapi.APIError
		if out, err := enc(req, "target"); !errors.As(err, &ae) || ae.Status != 400 {
			t.Errorf("%s: %s, %v", name, out, err)
		}
	}
}

// TestAnthropicMaxTokens: a request translated for Anthropic whose client
// set no output limit is sent the most its model writes, read from the
// model's name however the provider spells it, and 4096 for a model the
// name does not tell; a client's own limit goes as it is.
func TestAnthropicMaxTokens(t *testing.T) {
	for model, want := range map[string]int{
		"claude-opus-4-20250514":                       32000,
		"claude-opus-4-0":                              32000,
		"claude-opus-4-1":                              32000,
		"anthropic.claude-opus-4-1-20250805-v1:0":      32000,
		"claude-opus-4@20250514":                       32000,
		"claude-opus-4-5":                              64000,
		"claude-opus-4-5-20251101":                     64000,
		"claude-sonnet-4-20250514":                     64000,
		"claude-sonnet-4-5@20250929":                   64000,
		"us.anthropic.claude-sonnet-4-5-20250929-v1:0": 64000,
		"claude-haiku-4-5":                             64000,
		"Claude-Sonnet-4-6":                            64000,
		"claude-3-7-sonnet-latest":                     64000,
		"claude-3-5-haiku-20241022":                    8192,
		"claude-3-5-sonnet-latest":                     8192,
		"claude-3-haiku-20240307":                      4096,
		"claude-2.1":                                   4096,
		"kimi-k2":                                      4096,
		"claude-opus-4-10":                             64000,
	} {
		if got := llmapi.AnthropicMaxTokens(model); got != want {
			t.Errorf("AnthropicMaxTokens(%q) = %d, want %d", model, got, want)
		}
	}
	sent := func(body string, maxTokens int) float64 {
		t.Helper()
		req, err := llmapi.DecodeChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		out, err := llmapi.EncodeAnthropicWith(req, "claude-sonnet-4-5", llmapi.AnthropicModel{MaxTokens: maxTokens})
		if err != nil {
			t.Fatal(err)
		}
		var b map[string]any
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatal(err)
		}
		return b["max_tokens"].(float64)
	}
	const turn = `"messages":[{"role":"user","content":"x"}]`
	if got := sent(`{"model":"m",`+turn+`}`, 64000); got != 64000 {
		t.Errorf("no client limit: max_tokens %v, want 64000", got)
	}
	if got := sent(`{"model":"m",`+turn+`,"max_tokens":300}`, 64000); got != 300 {
		t.Errorf("a client limit of 300: max_tokens %v", got)
	}
	if got := sent(`{"model":"m",`+turn+`}`, 0); got != llmapi.DefaultAnthropicMaxTokens {
		t.Errorf("no limit given the encoder: max_tokens %v", got)
	}
	if got := sent(`{"model":"m",`+turn+`,"reasoning_effort":"high"}`, 64000); got != 64000 {
		t.Errorf("a thinking budget within the model's limit: max_tokens %v, want 64000", got)
	}
}

// TestAnthropicWhitespaceText: OpenAI's formats take text that is all
// whitespace (a model's "\n\n" before its tool call, a tool's blank
// output), and a conversation that ends in the assistant's text with a
// trailing space (a prefill); Anthropic refuses each with 400 ("text
// content blocks must contain non-whitespace text", "final assistant
// content cannot end with trailing whitespace"). Translated, the blank
// text is left out and the prefill's trailing whitespace trimmed.
func TestAnthropicWhitespaceText(t *testing.T) {
	req, err := llmapi.DecodeChatRequest([]byte(`{"model":"m","messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":"\n\n","tool_calls":[{"id":"c1","type":"function","function":{"name":"weather","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":" \n"},{"role":"user","content":[{"type":"text","text":"  "},{"type":"text","text":"thanks"}]},` +
		`{"role":"assistant","content":"Sure, \n"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := llmapi.EncodeAnthropic(req, "claude")
	if err != nil {
		t.Fatal(err)
	}
	if err := llmapitest.CheckAnthropicRequest(out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var b struct {
		Messages []struct {
			Role    string
			Content []map[string]any
		}
	}
	json.Unmarshal(out, &b)
	want := []string{`user:[text weather?]`, `assistant:[tool_use]`, `user:[tool_result text thanks]`, `assistant:[text Sure,]`}
	var got []string
	for _, m := range b.Messages {
		var blocks []string
		for _, c := range m.Content {
			s := c["type"].(string)
			if txt, ok := c["text"].(string); ok {
				s += " " + txt
			}
			if _, ok := c["content"]; ok {
				s += " with content"
			}
			blocks = append(blocks, s)
		}
		got = append(got, m.Role+":["+strings.Join(blocks, " ")+"]")
	}
	if !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q\n%s", got, want, out)
	}
}

// TestReasoningContentGivenBack: DeepSeek's thinking mode refuses a tool
// loop whose assistant messages do not give its reasoning back
// ("Missing reasoning_content field in the assistant message"), and
// Groq and Cerebras refuse the field. A request translated for Chat
// Completions gives each assistant message its thinking as
// reasoning_content (empty where the client kept none) to a model of
// ClassReasoningContent (a DeepSeek model by name), and to no other.
func TestReasoningContentGivenBack(t *testing.T) {
	req, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":99,"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"Paris first.","signature":""},{"type":"tool_use","id":"c1","name":"weather","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"18C"}]},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"c2","name":"weather","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c2","content":"20C"}]}],` +
		`"tools":[{"name":"weather","input_schema":{"type":"object"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	reasoning := func(body []byte) []any {
		t.Helper()
		var b struct{ Messages []map[string]any }
		json.Unmarshal(body, &b)
		var out []any
		for _, m := range b.Messages {
			if m["role"] == "assistant" {
				out = append(out, m["reasoning_content"])
			}
		}
		return out
	}
	for _, c := range []struct {
		model string
		class llmapi.ModelClass
		want  []any
	}{
		{"deepseek-reasoner", llmapi.ClassByName, []any{"Paris first.", ""}},
		{"deployment", llmapi.ClassReasoningContent, []any{"Paris first.", ""}},
		{"qwen3:8b", llmapi.ClassByName, []any{nil, nil}},
		{"gpt-5", llmapi.ClassByName, []any{nil, nil}},
		{"deepseek-r1-distill-llama-70b", llmapi.ClassOther, []any{nil, nil}}, // on Groq
	} {
		out, err := llmapi.EncodeChatAs(req, c.model, c.class)
		if err != nil {
			t.Fatal(err)
		}
		if got := reasoning(out); !slices.Equal(got, c.want) {
			t.Errorf("%s as %v: reasoning_content %q, want %q", c.model, c.class, got, c.want)
		}
	}
}

// TestAdaptiveThinking: Claude Opus and Sonnet 4.6 and later think
// adaptively; the newest refuse a thinking budget with 400. A request
// translated for one asks with thinking {"type": "adaptive"} and
// output_config.effort (the thinking shown summarized), an older Claude
// with a budget as before. An adaptive Claude client's effort reaches an
// OpenAI model as its reasoning effort; an effort Anthropic does not name
// is refused.
func TestAdaptiveThinking(t *testing.T) {
	for model, want := range map[string]bool{
		"claude-opus-4-6": true, "claude-sonnet-4-6": true, "claude-opus-4-7": true, "claude-opus-4-8": true,
		"claude-sonnet-5": true, "claude-sonnet-5@20260901": true, "anthropic.claude-opus-4-8-v1:0": true, "Claude-Opus-4-10": true,
		"claude-opus-4-5": false, "claude-sonnet-4-5-20250929": false, "claude-haiku-4-5": false, "claude-opus-4-20250514": false,
		"claude-opus-4-1": false, "claude-3-7-sonnet-latest": false, "kimi-k2": false, "claude-sonnet": false,
	} {
		if got := llmapi.AdaptiveThinkingModel(model); got != want {
			t.Errorf("AdaptiveThinkingModel(%q) = %v", model, got)
		}
	}
	encode := func(body, model string) map[string]any {
		t.Helper()
		req, err := llmapi.DecodeChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		out, err := llmapi.EncodeAnthropic(req, model)
		if err != nil {
			t.Fatal(err)
		}
		if err := llmapitest.CheckAnthropicRequest(out); err != nil {
			t.Fatalf("%s: %v\n%s", model, err, out)
		}
		var b map[string]any
		json.Unmarshal(out, &b)
		return b
	}
	const turn = `"messages":[{"role":"user","content":"x"}]`
	for _, c := range []struct {
		body, model      string
		thinking, config string // the fields sent, as JSON
	}{
		{`{"model":"m",` + turn + `,"reasoning_effort":"medium"}`, "claude-opus-4-8",
			`{"display":"summarized","type":"adaptive"}`, `{"effort":"medium"}`},
		{`{"model":"m",` + turn + `,"reasoning_effort":"xhigh"}`, "claude-sonnet-5", `{"display":"summarized","type":"adaptive"}`, `{"effort":"high"}`},
		{`{"model":"m",` + turn + `,"reasoning_effort":"minimal","response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"}}}}`, "claude-opus-4-6",
			`{"display":"summarized","type":"adaptive"}`, `{"effort":"low","format":{"schema":{"type":"object"},"type":"json_schema"}}`},
		{`{"model":"m",` + turn + `,"reasoning_effort":"medium"}`, "claude-sonnet-4-5", `{"budget_tokens":8192,"type":"enabled"}`, "null"},
		{`{"model":"m",` + turn + `}`, "claude-opus-4-8", "null", "null"},
	} {
		b := encode(c.body, c.model)
		if got := mustMarshal(t, b["thinking"]); got != c.thinking {
			t.Errorf("%s to %s: thinking %s, want %s", c.body, c.model, got, c.thinking)
		}
		if got := mustMarshal(t, b["output_config"]); got != c.config {
			t.Errorf("%s to %s: output_config %s, want %s", c.body, c.model, got, c.config)
		}
	}

	// From an adaptive Claude client to an OpenAI model.
	for effort, want := range map[string]any{`"low"`: "low", `"max"`: "high", `"xhigh"`: "high", "": nil} {
		config := ""
		if effort != "" {
			config = `,"output_config":{"effort":` + effort + `}`
		}
		req, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":999,"thinking":{"type":"adaptive"}` + config + `,` + turn + `}`))
		if err != nil {
			t.Fatal(err)
		}
		out, _ := llmapi.EncodeChat(req, "gpt-5")
		var b map[string]any
		json.Unmarshal(out, &b)
		if b["reasoning_effort"] != want {
			t.Errorf("adaptive effort %s: reasoning_effort %v, want %v", effort, b["reasoning_effort"], want)
		}
	}
	_, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,"thinking":{"type":"adaptive"},"output_config":{"effort":"ultra"},` + turn + `}`))
	var ae *llmapi.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "output_config.effort") {
		t.Errorf("an unknown effort: %v", err)
	}
}

// TestHostedWebSearchLeftOut: Codex offers OpenAI's hosted web search in
// every request unless told not to. Translated for a provider that does
// not run it, the request goes without the tool (and without an earlier
// turn's search call, whose findings are in the text after it), so the
// model works without searching; before, every such request was refused.
func TestHostedWebSearchLeftOut(t *testing.T) {
	for _, search := range []string{`{"type":"web_search","external_web_access":false}`, `{"type":"web_search_preview","search_context_size":"low"}`} {
		body := `{"model":"m","store":false,"stream":true,"instructions":"be brief","input":[` +
			`{"role":"user","content":[{"type":"input_text","text":"what changed in go 1.26?"}]},` +
			`{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"go 1.26 release notes"}},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Go 1.26 adds new(expr)."}]},` +
			`{"role":"user","content":[{"type":"input_text","text":"try it"}]}],` +
			`"tools":[{"type":"function","name":"shell","parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}}}},` +
			search + `,{"type":"custom","name":"apply_patch","format":{"type":"text"}}],"tool_choice":"auto","parallel_tool_calls":false}`
		req, err := llmapi.DecodeResponsesRequest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", search, err)
		}
		if len(req.Tools) != 2 || req.Tools[0].Name != "shell" || req.Tools[1].Name != "apply_patch" {
			t.Fatalf("%s: tools %+v", search, req.Tools)
		}
		if len(req.Messages) != 3 || req.Messages[1].Parts[0].Text != "Go 1.26 adds new(expr)." {
			t.Fatalf("%s: messages %+v", search, req.Messages)
		}
		for name, enc := range map[string]func() ([]byte, error){
			"anthropic": func() ([]byte, error) { return llmapi.EncodeAnthropic(req, "claude-sonnet-4-5") },
			"chat":      func() ([]byte, error) { return llmapi.EncodeChat(req, "qwen3") },
		} {
			out, err := enc()
			if err != nil {
				t.Fatalf("%s to %s: %v", search, name, err)
			}
			check := llmapitest.CheckAnthropicRequest
			if name == "chat" {
				check = llmapitest.CheckChatRequest
			}
			if err := check(out); err != nil {
				t.Fatalf("%s to %s: %v\n%s", search, name, err, out)
			}
			if strings.Contains(string(out), "web_search") || strings.Count(string(out), `"name":"shell"`) != 1 {
				t.Errorf("%s to %s: %s", search, name, out)
			}
		}
	}
}

// TestPromptCacheMarks: a request translated for Anthropic with its
// prompt cache (AnthropicModel.PromptCache) marks the last tool, the
// system prompt, the last message and the user message before it, the
// last block of each that may carry a mark (not a thinking block): four
// marks, Anthropic's most, and what Anthropic takes. Without, none.
func TestPromptCacheMarks(t *testing.T) {
	body := `{"model":"m","instructions":"You are Codex.","input":[` +
		`{"role":"user","content":[{"type":"input_text","text":"fix it"},{"type":"input_text","text":"<env/>"}]},` +
		`{"type":"reasoning","id":"rs","summary":[],"encrypted_content":"` + sealedFor(t, "Look.", "sig1") + `"},` +
		`{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"a.go"},` +
		`{"type":"reasoning","id":"rs2","summary":[],"encrypted_content":"` + sealedFor(t, "Now patch.", "sig2") + `"},` +
		`{"type":"function_call","call_id":"c2","name":"shell","arguments":"{\"cmd\":\"cat a.go\"}"},` +
		`{"type":"function_call","call_id":"c3","name":"shell","arguments":"{\"cmd\":\"ls\"}"},` +
		`{"type":"function_call_output","call_id":"c2","output":"package a"},{"type":"function_call_output","call_id":"c3","output":"a.go"}],` +
		`"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},{"type":"function","name":"plan","parameters":{"type":"object"}}],"reasoning":{"effort":"low"}}`
	cached := target{func(r *llmapi.Request) ([]byte, error) {
		return llmapi.EncodeAnthropicWith(r, "claude-sonnet-4-5", llmapi.AnthropicModel{PromptCache: true})
	}, llmapitest.CheckAnthropicRequest}
	_, out := translated(t, llmapi.DecodeResponsesRequest, body, cached)
	type block struct {
		Type         string
		Text         string
		ToolUseID    string                 `json:"tool_use_id"`
		CacheControl *struct{ Type string } `json:"cache_control"`
	}
	var got struct {
		System []block
		Tools  []struct {
			Name         string
			CacheControl *struct{ Type string } `json:"cache_control"`
		}
		Messages []struct {
			Role    string
			Content []block
		}
		Thinking any
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	var marks []string
	for _, tl := range got.Tools {
		if tl.CacheControl != nil {
			marks = append(marks, "tool "+tl.Name)
		}
	}
	for _, b := range got.System {
		if b.CacheControl != nil {
			marks = append(marks, "system "+b.Text)
		}
	}
	for i, m := range got.Messages {
		for _, b := range m.Content {
			if b.CacheControl != nil {
				marks = append(marks, fmt.Sprintf("messages[%d] %s %s%s", i, b.Type, b.Text, b.ToolUseID))
			}
		}
	}
	want := []string{"tool plan", "system You are Codex.", "messages[2] tool_result c1", "messages[4] tool_result c3"}
	if d := cmp.Diff(want, marks); d != "" || got.Thinking == nil {
		t.Fatalf("marks (-want +got):\n%s\n%s", d, out)
	}

	// A conversation of one message, no tools, a blank system: one mark.
	req, out := translated(t, llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"system","content":" "},{"role":"user","content":"hi"}]}`, cached)
	if strings.Count(string(out), "cache_control") != 1 {
		t.Fatalf("%s", out)
	}
	if out, _ := llmapi.EncodeAnthropic(req, "claude"); strings.Contains(string(out), "cache_control") {
		t.Fatalf("marked without the prompt cache: %s", out)
	}
}

// sealedFor is the encrypted_content the gateway gives a Responses
// client for a thinking block of text and signature.
func sealedFor(t *testing.T, text, signature string) string {
	t.Helper()
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"" + text + "\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"" + signature + "\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	_, _, body := llmapitest.Render(t, llmapi.DecodeAnthropicStream(strings.NewReader(stream)), &llmapi.ResponsesRenderer{ID: "r", Model: "m", Seal: true})
	var o struct {
		Output []struct {
			EncryptedContent string `json:"encrypted_content"`
		}
	}
	if err := json.Unmarshal(body, &o); err != nil || len(o.Output) != 1 || o.Output[0].EncryptedContent == "" {
		t.Fatalf("sealing: %v %s", err, body)
	}
	return o.Output[0].EncryptedContent
}

// TestContextOverflow: the refusals model servers give a prompt past the
// context window are told apart from their other refusals, by message,
// type or code.
func TestContextOverflow(t *testing.T) {
	for _, c := range []struct {
		msg, typ, code string
		want           bool
	}{
		{"This model's maximum context length is 32768 tokens. However, you requested 40000 tokens.", "BadRequestError", "", true},
		{"the request exceeds the available context size, try increasing it", "exceed_context_size_error", "", true},
		{"prompt is too long: 215692 tokens > 200000 maximum", "invalid_request_error", "", true},
		{"Your input exceeds the context window of this model.", "invalid_request_error", "context_length_exceeded", true},
		{"Prompt too long: 32799 tokens exceeds max context window of 32768 tokens", "", "", true},
		{"Input is too long for requested model.", "ValidationException", "", true},
		{"max_tokens must be at least 1, got 0.", "BadRequestError", "", false},
		{"max_tokens: 64000 > 32000, which is the maximum allowed number of output tokens for this model", "invalid_request_error", "", false},
		{"tools.0.custom.input_schema: JSON schema is invalid", "invalid_request_error", "", false},
	} {
		if got := llmapi.ContextOverflow(c.msg, c.typ, c.code); got != c.want {
			t.Errorf("%q (%s, %s): %v, want %v", c.msg, c.typ, c.code, got, c.want)
		}
	}
}

// TestContextLengthRendered: a failure of type context_length is each
// format's invalid request, with OpenAI's code context_length_exceeded in
// the OpenAI formats' error bodies, a Chat stream's error chunk and a
// Responses stream's response.failed.
func TestContextLengthRendered(t *testing.T) {
	e := &llmapi.APIError{Status: 400, Type: "context_length", Message: "The prompt is too long for the model's context window."}
	if status, body := llmapi.OpenAIErrorFrom(e); status != 400 || !strings.Contains(string(body), `"code":"context_length_exceeded"`) || !strings.Contains(string(body), `"type":"invalid_request_error"`) {
		t.Errorf("OpenAI body: %d %s", status, body)
	}
	start := llmapi.Event{Kind: llmapi.EvStart}
	fail := llmapi.Event{Kind: llmapi.EvError, Err: e}
	for name, c := range map[string]struct {
		r    llmapi.Renderer
		want string
	}{
		"anthropic": {&llmapi.AnthropicRenderer{ID: "m", Streamed: true}, `"type":"invalid_request_error"`},
		"chat":      {&llmapi.ChatRenderer{ID: "c", Streamed: true}, `"code":"context_length_exceeded"`},
		"responses": {&llmapi.ResponsesRenderer{ID: "r"}, `"error":{"code":"context_length_exceeded"`},
	} {
		out := append(c.r.Event(start), c.r.Event(fail)...)
		if !strings.Contains(string(out), c.want) {
			t.Errorf("%s: %s", name, out)
		}
	}
	// A provider's stream that fails for the context window, with
	// OpenAI's code, fails so for a client of another format.
	created := `data: {"type":"response.created","response":{"id":"r","status":"in_progress"}}` + "\n\n"
	for name, c := range map[string]struct {
		in   string
		dec  func(io.Reader) llmapi.Decoder
		r    llmapi.Renderer
		want string
	}{
		"responses to anthropic": {created + `data: {"type":"response.failed","response":{"id":"r","status":"failed","error":{"code":"context_length_exceeded","message":"boom"}}}` + "\n\n",
			llmapi.DecodeResponsesStream, &llmapi.AnthropicRenderer{ID: "m"}, "prompt is too long"},
		"chat to responses": {`data: {"error":{"message":"boom","type":"invalid_request_error","code":"context_length_exceeded"}}` + "\n\n",
			llmapi.DecodeChatStream, &llmapi.ResponsesRenderer{ID: "r"}, `"code":"context_length_exceeded"`},
	} {
		stream, _, _ := llmapitest.Render(t, c.dec(strings.NewReader(c.in)), c.r)
		if !strings.Contains(string(stream), c.want) || strings.Contains(string(stream), "boom") {
			t.Errorf("%s: %s", name, stream)
		}
	}
}
