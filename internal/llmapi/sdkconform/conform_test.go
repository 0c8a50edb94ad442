package sdkconform_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
	"github.com/iop-dev/iop/internal/sse"
)

// accumulateAnthropic feeds a rendered stream to the Anthropic SDK's own
// accumulator, checking the event grammar on the way: one message_start
// first, blocks started in index order without overlap, message_delta
// then message_stop last.
func accumulateAnthropic(t *testing.T, stream []byte) anthropic.Message {
	t.Helper()
	var msg anthropic.Message
	evs := llmapitest.Events(t, stream)
	open := -1
	next := 0
	for i, ev := range evs {
		var u anthropic.MessageStreamEventUnion
		if err := json.Unmarshal(ev.Data, &u); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if u.Type != ev.Type {
			t.Fatalf("event %d: SSE type %q, JSON type %q", i, ev.Type, u.Type)
		}
		switch u.Type {
		case "message_start":
			if i != 0 {
				t.Fatalf("message_start at position %d", i)
			}
		case "content_block_start":
			if open != -1 || int(u.Index) != next {
				t.Fatalf("block %d started while %d open (next %d)", u.Index, open, next)
			}
			open = int(u.Index)
			next++
		case "content_block_delta":
			if int(u.Index) != open {
				t.Fatalf("delta for block %d while %d open", u.Index, open)
			}
		case "content_block_stop":
			if int(u.Index) != open {
				t.Fatalf("stop for block %d while %d open", u.Index, open)
			}
			open = -1
		case "message_delta":
			if i != len(evs)-2 {
				t.Fatalf("message_delta at %d of %d", i, len(evs))
			}
		case "message_stop":
			if i != len(evs)-1 {
				t.Fatalf("message_stop before the end")
			}
		}
		if err := msg.Accumulate(u); err != nil {
			t.Fatalf("SDK accumulate event %d (%s): %v", i, u.Type, err)
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != "message_stop" {
		t.Fatalf("stream does not end with message_stop")
	}
	return msg
}

// accumulateChat feeds a rendered stream to openai-go's accumulator.
func accumulateChat(t *testing.T, stream []byte) (openai.ChatCompletionAccumulator, *openai.CompletionUsage) {
	t.Helper()
	acc := openai.ChatCompletionAccumulator{}
	evs := llmapitest.Events(t, stream)
	var usage *openai.CompletionUsage
	for i, ev := range evs {
		if string(ev.Data) == "[DONE]" {
			if i != len(evs)-1 {
				t.Fatalf("[DONE] before the end")
			}
			continue
		}
		var c openai.ChatCompletionChunk
		if err := json.Unmarshal(ev.Data, &c); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		if i == 0 && c.Choices[0].Delta.Role != "assistant" {
			t.Fatalf("first delta without the role")
		}
		if len(c.Choices) == 0 {
			u := c.Usage
			usage = &u
		}
		if !acc.AddChunk(c) {
			t.Fatalf("SDK accumulator refused chunk %d: %s", i, ev.Data)
		}
	}
	if len(evs) == 0 || string(evs[len(evs)-1].Data) != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]")
	}
	return acc, usage
}

// checkResponses checks the Responses event grammar and returns the final
// response.
func checkResponses(t *testing.T, stream []byte) responses.Response {
	t.Helper()
	evs := llmapitest.Events(t, stream)
	added := map[string]bool{}
	var final responses.Response
	for i, ev := range evs {
		var u responses.ResponseStreamEventUnion
		if err := json.Unmarshal(ev.Data, &u); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if int(u.SequenceNumber) != i {
			t.Fatalf("event %d has sequence_number %d", i, u.SequenceNumber)
		}
		switch u.Type {
		case "response.output_item.added":
			added[u.Item.ID] = true
		case "response.output_text.delta", "response.function_call_arguments.delta", "response.reasoning_summary_text.delta",
			"response.custom_tool_call_input.delta":
			if !added[u.ItemID] {
				t.Fatalf("%s for item %q before its output_item.added", u.Type, u.ItemID)
			}
		case "response.completed", "response.incomplete":
			if i != len(evs)-1 {
				t.Fatal("terminal event before the end")
			}
			final = u.Response
		}
	}
	if final.ID == "" {
		t.Fatal("no terminal event with the full response")
	}
	return final
}

func TestChatStreamToAnthropic(t *testing.T) {
	// Regressions other gateways shipped: tool arguments lost in a streamed
	// Anthropic answer from an OpenAI-format upstream; end_turn instead of
	// tool_use when a turn has text and a tool call (the upstream even
	// said "stop"); only the first of parallel tool calls translated; zero
	// usage in streams.
	stream, _, _ := llmapitest.Render(t, llmapi.DecodeChatStream(bytes.NewReader(llmapitest.Fixture(t, "chat_stream_parallel_tools.sse"))), &llmapi.AnthropicRenderer{ID: "msg_x", Model: "pub"})
	msg := accumulateAnthropic(t, stream)
	if msg.StopReason != "tool_use" {
		t.Errorf("stop_reason %q, want tool_use", msg.StopReason)
	}
	if len(msg.Content) != 3 || msg.Content[0].Text != "Let me check both cities." {
		t.Fatalf("content %+v", msg.Content)
	}
	for i, want := range []string{`{"city":"Paris"}`, `{"city":"Seoul"}`} {
		b := msg.Content[i+1]
		if b.Type != "tool_use" || b.Name != "get_weather" || string(b.Input) != want {
			t.Errorf("tool call %d: %s %s %s, want %s", i, b.Type, b.Name, b.Input, want)
		}
	}
	if msg.Content[1].ID != "call_paris" || msg.Content[2].ID != "call_seoul" {
		t.Errorf("tool ids %q %q", msg.Content[1].ID, msg.Content[2].ID)
	}
	if msg.Usage.InputTokens != 23 || msg.Usage.CacheReadInputTokens != 8 || msg.Usage.OutputTokens != 40 {
		t.Errorf("usage %+v", msg.Usage)
	}
}

func TestAnthropicStreamToChatAndResponses(t *testing.T) {
	fx := llmapitest.Fixture(t, "anthropic_stream_thinking_tools.sse")
	stream, _, body := llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)), &llmapi.ChatRenderer{ID: "c1", Model: "pub", IncludeUsage: true})
	acc, usage := accumulateChat(t, stream)
	m := acc.Choices[0].Message
	if m.Content != "Checking." || acc.Choices[0].FinishReason != "tool_calls" {
		t.Fatalf("content %q finish %q", m.Content, acc.Choices[0].FinishReason)
	}
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Arguments != `{"city": "San Francisco", "unit": "c"}` || m.ToolCalls[0].ID != "toolu_01A" {
		t.Fatalf("tool calls %+v", m.ToolCalls)
	}
	if usage == nil || usage.PromptTokens != 30 || usage.PromptTokensDetails.CachedTokens != 5 || usage.CompletionTokens != 89 {
		t.Fatalf("usage chunk %+v", usage)
	}
	if !strings.Contains(string(stream), `"reasoning_content":"The user wants "`) {
		t.Error("thinking did not become reasoning_content")
	}
	// The buffered answer says the same.
	var c openai.ChatCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatal(err)
	}
	if c.Choices[0].Message.Content != "Checking." || c.Choices[0].Message.ToolCalls[0].Function.Arguments != m.ToolCalls[0].Function.Arguments || c.Usage.TotalTokens != 119 {
		t.Fatalf("buffered %+v", c)
	}

	stream, _, _ = llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)), &llmapi.ResponsesRenderer{ID: "r1", Model: "pub"})
	final := checkResponses(t, stream)
	if final.OutputText() != "Checking." || len(final.Output) != 3 || final.Output[2].Arguments.OfString != `{"city": "San Francisco", "unit": "c"}` {
		t.Fatalf("final response %+v", final.Output)
	}
	if final.Usage.InputTokens != 30 || final.Usage.OutputTokens != 89 {
		t.Fatalf("usage %+v", final.Usage)
	}
}

func TestResponsesArgumentsOnlyInDone(t *testing.T) {
	fx := llmapitest.Fixture(t, "responses_stream_args_in_done.sse")
	stream, _, _ := llmapitest.Render(t, llmapi.DecodeResponsesStream(bytes.NewReader(fx)), &llmapi.ChatRenderer{ID: "c", Model: "pub"})
	acc, _ := accumulateChat(t, stream)
	if tc := acc.Choices[0].Message.ToolCalls; len(tc) != 1 || tc[0].Function.Arguments != `{"q":"iop","limit":3}` || tc[0].ID != "call_only_done" {
		t.Fatalf("tool calls %+v", tc)
	}
	stream, _, _ = llmapitest.Render(t, llmapi.DecodeResponsesStream(bytes.NewReader(fx)), &llmapi.AnthropicRenderer{ID: "m", Model: "pub"})
	msg := accumulateAnthropic(t, stream)
	if msg.StopReason != "tool_use" || string(msg.Content[0].Input) != `{"q":"iop","limit":3}` {
		t.Fatalf("anthropic %+v", msg)
	}
}

// TestFreeformCall: the openai SDK reads a call of a freeform tool
// (Codex's apply_patch) from a translated stream and buffered body as a
// custom_tool_call with the patch as its input.
func TestFreeformCall(t *testing.T) {
	const patch = "*** Begin Patch\n*** Update File: hello.go\n@@\n-\tfmt.Println(\"helo\")\n+\tfmt.Println(\"hello é\")\n*** End Patch"
	fx := llmapitest.Fixture(t, "anthropic_stream_apply_patch.sse")
	stream, _, body := llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)),
		&llmapi.ResponsesRenderer{ID: "r1", Model: "pub", Freeform: map[string]bool{"apply_patch": true}})
	var buffered responses.Response
	if err := json.Unmarshal(body, &buffered); err != nil {
		t.Fatal(err)
	}
	for name, resp := range map[string]responses.Response{"streamed": checkResponses(t, stream), "buffered": buffered} {
		if len(resp.Output) != 2 || resp.OutputText() != "Fixing the greeting." {
			t.Fatalf("%s: output %+v", name, resp.Output)
		}
		c := resp.Output[1].AsCustomToolCall()
		if c.Type != "custom_tool_call" || c.Name != "apply_patch" || c.CallID != "toolu_01P" || c.Input != patch {
			t.Errorf("%s: call %+v", name, c)
		}
	}
	var input string
	for _, ev := range llmapitest.Events(t, stream) {
		var u responses.ResponseStreamEventUnion
		if err := json.Unmarshal(ev.Data, &u); err != nil {
			t.Fatal(err)
		}
		if u.Type == "response.custom_tool_call_input.done" {
			input = u.AsResponseCustomToolCallInputDone().Input
		}
	}
	if input != patch {
		t.Errorf("custom_tool_call_input.done has %q", input)
	}
}

func TestOverlappingProviderIndices(t *testing.T) {
	stream, _, _ := llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(llmapitest.Fixture(t, "anthropic_stream_bad_indices.sse"))), &llmapi.AnthropicRenderer{ID: "m", Model: "pub"})
	msg := accumulateAnthropic(t, stream) // checks indices 0, 1, non-overlapping
	if len(msg.Content) != 2 || msg.Content[0].Text+msg.Content[1].Text != "first second" {
		t.Fatalf("content %+v", msg.Content)
	}
}

func TestBufferedAnswers(t *testing.T) {
	_, status, body := llmapitest.Render(t, llmapi.DecodeChat(llmapitest.Fixture(t, "chat_buffered_tool.json")), &llmapi.AnthropicRenderer{ID: "m", Model: "pub"})
	var msg anthropic.Message
	if err := json.Unmarshal(body, &msg); err != nil || status != 200 {
		t.Fatal(status, err)
	}
	if msg.StopReason != "tool_use" || msg.Content[0].Text != "Sure." || string(msg.Content[1].Input) != `{"a":1,"b":2}` || msg.Usage.OutputTokens != 7 {
		t.Fatalf("%+v", msg)
	}
	_, _, body = llmapitest.Render(t, llmapi.DecodeAnthropic(llmapitest.Fixture(t, "anthropic_buffered.json")), &llmapi.ChatRenderer{ID: "c", Model: "pub"})
	var c openai.ChatCompletion
	json.Unmarshal(body, &c)
	if c.Choices[0].Message.Content != "Hi there" || c.Choices[0].FinishReason != "tool_calls" || c.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"a":1}` {
		t.Fatalf("%+v", c.Choices[0])
	}
	if !strings.Contains(string(body), `"reasoning_content":"hmm"`) {
		t.Error("thinking lost in the buffered chat answer")
	}
}

// TestCutOffAndWithheldAnswers: an answer cut off (by its limit, or by
// Anthropic's context window) or withheld (Anthropic's refusal, OpenAI's
// content filter) reaches every client format as such, never as a
// finished answer: Chat's finish_reason length or content_filter,
// Responses' incomplete with reason max_output_tokens or content_filter,
// Anthropic's max_tokens or refusal.
func TestCutOffAndWithheldAnswers(t *testing.T) {
	anthropicAnswer := func(stop string) []byte {
		return []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"c","content":[{"type":"text","text":"partial"}],"stop_reason":"` + stop + `","stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}`)
	}
	responsesAnswer := func(reason string) []byte {
		return []byte(`{"id":"resp_1","object":"response","model":"r","status":"incomplete","incomplete_details":{"reason":"` + reason + `"},"output":[{"type":"message","id":"m","role":"assistant","content":[{"type":"output_text","text":"partial"}]}],"usage":{"input_tokens":5,"output_tokens":1}}`)
	}
	for _, c := range []struct {
		name                       string
		dec                        func() llmapi.Decoder
		chat, responses, anthropic string
	}{
		{"anthropic max_tokens", func() llmapi.Decoder { return llmapi.DecodeAnthropic(anthropicAnswer("max_tokens")) }, "length", "max_output_tokens", "max_tokens"},
		{"anthropic context window", func() llmapi.Decoder { return llmapi.DecodeAnthropic(anthropicAnswer("model_context_window_exceeded")) }, "length", "max_output_tokens", "max_tokens"},
		{"anthropic refusal", func() llmapi.Decoder { return llmapi.DecodeAnthropic(anthropicAnswer("refusal")) }, "content_filter", "content_filter", "refusal"},
		{"responses max_output_tokens", func() llmapi.Decoder { return llmapi.DecodeResponses(responsesAnswer("max_output_tokens")) }, "length", "max_output_tokens", "max_tokens"},
		{"responses content_filter", func() llmapi.Decoder { return llmapi.DecodeResponses(responsesAnswer("content_filter")) }, "content_filter", "content_filter", "refusal"},
		{"responses stream content_filter", func() llmapi.Decoder {
			return llmapi.DecodeResponsesStream(strings.NewReader("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"r\",\"status\":\"in_progress\",\"output\":[]}}\n\n" +
				"event: response.incomplete\ndata: {\"type\":\"response.incomplete\",\"response\":" + string(responsesAnswer("content_filter")) + "}\n\n"))
		}, "content_filter", "content_filter", "refusal"},
	} {
		_, _, out := llmapitest.Render(t, c.dec(), &llmapi.ChatRenderer{ID: "c", Model: "pub"})
		var cc openai.ChatCompletion
		if err := json.Unmarshal(out, &cc); err != nil || string(cc.Choices[0].FinishReason) != c.chat {
			t.Errorf("%s -> chat: %s (%v), want finish_reason %s", c.name, out, err, c.chat)
		}
		_, _, out = llmapitest.Render(t, c.dec(), &llmapi.ResponsesRenderer{ID: "r", Model: "pub"})
		var r responses.Response
		if err := json.Unmarshal(out, &r); err != nil || r.Status != "incomplete" || string(r.IncompleteDetails.Reason) != c.responses {
			t.Errorf("%s -> responses: %s (%v), want incomplete for %s", c.name, out, err, c.responses)
		}
		_, _, out = llmapitest.Render(t, c.dec(), &llmapi.AnthropicRenderer{ID: "a", Model: "pub"})
		var m anthropic.Message
		if err := json.Unmarshal(out, &m); err != nil || string(m.StopReason) != c.anthropic {
			t.Errorf("%s -> anthropic: %s (%v), want stop_reason %s", c.name, out, err, c.anthropic)
		}
	}
}

// TestChatRefusalAndReasoning: a Chat Completions answer's refusal (a
// structured-output request the model declined; content is null) reaches
// other formats as its text and a refusal, buffered and streamed, and a
// buffered answer's reasoning under Ollama's and newer vLLM's name
// ("reasoning") is kept as thinking, as reasoning_content is.
func TestChatRefusalAndReasoning(t *testing.T) {
	buffered := []byte(`{"id":"c1","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`)
	stream := []byte("data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null,\"refusal\":null}}]}\n\n" +
		"data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"I can't \"}}]}\n\n" +
		"data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"refusal\":\"help with that.\"}}]}\n\n" +
		"data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	for name, dec := range map[string]func() llmapi.Decoder{
		"buffered": func() llmapi.Decoder { return llmapi.DecodeChat(buffered) },
		"streamed": func() llmapi.Decoder { return llmapi.DecodeChatStream(bytes.NewReader(stream)) },
	} {
		_, _, out := llmapitest.Render(t, dec(), &llmapi.AnthropicRenderer{ID: "a", Model: "pub"})
		var m anthropic.Message
		if err := json.Unmarshal(out, &m); err != nil || m.StopReason != "refusal" || len(m.Content) != 1 || m.Content[0].Text != "I can't help with that." {
			t.Errorf("%s -> anthropic: %s (%v)", name, out, err)
		}
		_, _, out = llmapitest.Render(t, dec(), &llmapi.ResponsesRenderer{ID: "r", Model: "pub"})
		var r responses.Response
		if err := json.Unmarshal(out, &r); err != nil || r.Status != "incomplete" || r.IncompleteDetails.Reason != "content_filter" || r.OutputText() != "I can't help with that." {
			t.Errorf("%s -> responses: %s (%v)", name, out, err)
		}
	}
	_, _, out := llmapitest.Render(t, llmapi.DecodeChat([]byte(`{"id":"c2","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"42","reasoning":"six times seven"},"finish_reason":"stop"}]}`)), &llmapi.AnthropicRenderer{ID: "a", Model: "pub"})
	var m anthropic.Message
	if err := json.Unmarshal(out, &m); err != nil || len(m.Content) != 2 || m.Content[0].Thinking != "six times seven" || m.Content[1].Text != "42" {
		t.Errorf("reasoning -> anthropic thinking: %s (%v)", out, err)
	}
}

// TestResponsesRefusalAndReasoning: a refusal from a Responses provider,
// buffered, streamed in deltas, only in its .done event or only in its
// finished item, reaches the client as the answer's text with the
// client's refusal reason, as a Chat Completions refusal does; it was
// dropped, and the client got an empty answer that ended normally. A
// reasoning item with reasoning_text content and no summary (an
// open-weight model's) becomes thinking.
func TestResponsesRefusalAndReasoning(t *testing.T) {
	const refusal = "I can't help with that."
	ev := func(data string) string {
		var m struct{ Type string }
		json.Unmarshal([]byte(data), &m)
		return "event: " + m.Type + "\ndata: " + data + "\n\n"
	}
	head := ev(`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","model":"m","status":"in_progress","output":[]}}`) +
		ev(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","status":"in_progress","content":[]}}`) +
		ev(`{"type":"response.content_part.added","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"refusal","refusal":""}}`)
	item := `{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"refusal","refusal":"` + refusal + `"}]}`
	tail := ev(`{"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":`+item+`}`) +
		ev(`{"type":"response.completed","sequence_number":8,"response":{"id":"resp_1","object":"response","model":"m","status":"completed","output":[`+item+`],"usage":{"input_tokens":9,"output_tokens":6,"total_tokens":15}}}`)
	done := ev(`{"type":"response.refusal.done","sequence_number":5,"item_id":"msg_1","output_index":0,"content_index":0,"refusal":"` + refusal + `"}`)
	streams := map[string]string{
		"deltas": head + ev(`{"type":"response.refusal.delta","sequence_number":3,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"I can't "}`) +
			ev(`{"type":"response.refusal.delta","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"help with that."}`) + done + tail,
		"done only": head + done + tail,
		"item only": head + tail,
	}
	decoders := map[string]func() llmapi.Decoder{
		"buffered": func() llmapi.Decoder {
			return llmapi.DecodeResponses([]byte(`{"id":"resp_1","object":"response","model":"m","status":"completed","output":[` + item + `]}`))
		},
	}
	for name, s := range streams {
		decoders["streamed, "+name] = func() llmapi.Decoder { return llmapi.DecodeResponsesStream(strings.NewReader(s)) }
	}
	for name, dec := range decoders {
		_, _, out := llmapitest.Render(t, dec(), &llmapi.AnthropicRenderer{ID: "a", Model: "pub"})
		var m anthropic.Message
		if err := json.Unmarshal(out, &m); err != nil || m.StopReason != "refusal" || len(m.Content) != 1 || m.Content[0].Text != refusal {
			t.Errorf("%s -> anthropic: %s (%v)", name, out, err)
		}
		_, _, out = llmapitest.Render(t, dec(), &llmapi.ChatRenderer{ID: "c", Model: "pub"})
		var c openai.ChatCompletion
		if err := json.Unmarshal(out, &c); err != nil || c.Choices[0].FinishReason != "content_filter" || c.Choices[0].Message.Content != refusal {
			t.Errorf("%s -> chat: %s (%v)", name, out, err)
		}
	}
	_, _, out := llmapitest.Render(t, llmapi.DecodeResponses([]byte(`{"id":"r2","model":"m","status":"completed","output":[
		{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"six times seven"}]},
		{"type":"message","id":"msg_2","role":"assistant","content":[{"type":"output_text","text":"42","annotations":[]}]}]}`)), &llmapi.AnthropicRenderer{ID: "a", Model: "pub"})
	var m anthropic.Message
	if err := json.Unmarshal(out, &m); err != nil || len(m.Content) != 2 || m.Content[0].Thinking != "six times seven" || m.Content[1].Text != "42" || m.StopReason != "end_turn" {
		t.Errorf("reasoning_text -> anthropic thinking: %s (%v)", out, err)
	}

	// A summary's parts stay apart in one thinking block.
	const summary = "**Plan**\n\nMultiply.\n\n**Check**\n\nSix sevens are 42."
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"**Plan**\n\nMultiply."},{"type":"summary_text","text":"**Check**\n\nSix sevens are 42."}]}`
	stream := ev(`{"type":"response.created","sequence_number":0,"response":{"id":"r3","object":"response","model":"m","status":"in_progress","output":[]}}`) +
		ev(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}`)
	seq := 2
	for i, part := range []string{`**Plan**\n\n`, `Multiply.`, `**Check**\n\n`, `Six sevens are 42.`} {
		if i%2 == 0 {
			stream += ev(fmt.Sprintf(`{"type":"response.reasoning_summary_part.added","sequence_number":%d,"item_id":"rs_1","output_index":0,"summary_index":%d,"part":{"type":"summary_text","text":""}}`, seq, i/2))
			seq++
		}
		stream += ev(fmt.Sprintf(`{"type":"response.reasoning_summary_text.delta","sequence_number":%d,"item_id":"rs_1","output_index":0,"summary_index":%d,"delta":"%s"}`, seq, i/2, part))
		seq++
	}
	stream += ev(`{"type":"response.output_item.done","sequence_number":9,"output_index":0,"item":`+reasoning+`}`) +
		ev(`{"type":"response.completed","sequence_number":10,"response":{"id":"r3","object":"response","model":"m","status":"completed","output":[`+reasoning+`]}}`)
	for name, dec := range map[string]llmapi.Decoder{
		"streamed": llmapi.DecodeResponsesStream(strings.NewReader(stream)),
		"buffered": llmapi.DecodeResponses([]byte(`{"id":"r3","model":"m","status":"completed","output":[` + reasoning + `]}`)),
	} {
		_, _, out := llmapitest.Render(t, dec, &llmapi.AnthropicRenderer{ID: "a", Model: "pub"})
		var m anthropic.Message
		if err := json.Unmarshal(out, &m); err != nil || len(m.Content) != 1 || m.Content[0].Thinking != summary {
			t.Errorf("%s summary parts -> anthropic thinking: %s (%v)", name, out, err)
		}
	}
}

// TestResponsesFailedMidStream: an answer that fails after its response
// was created ends with response.failed, which openai-go reads as the
// failed response with its error (Codex reads the same fields): status
// failed, the error's code and message.
func TestResponsesFailedMidStream(t *testing.T) {
	in := `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"par"}}]}` + "\n\n" +
		`data: {"error":{"message":"slow down","code":429}}` + "\n\n"
	stream, _, _ := llmapitest.Render(t, llmapi.DecodeChatStream(strings.NewReader(in)), &llmapi.ResponsesRenderer{ID: "resp_1", Model: "pub"})
	evs := llmapitest.Events(t, stream)
	var u responses.ResponseStreamEventUnion
	if err := json.Unmarshal(evs[len(evs)-1].Data, &u); err != nil {
		t.Fatal(err)
	}
	failed := u.AsResponseFailed()
	if failed.Type != "response.failed" || failed.Response.ID != "resp_1" || failed.Response.Status != responses.ResponseStatusFailed ||
		failed.Response.Error.Code != "rate_limit_exceeded" || failed.Response.Error.Message == "" || int(failed.SequenceNumber) != len(evs)-1 {
		t.Fatalf("last event %s", evs[len(evs)-1].Data)
	}
}

// heartbeater is a renderer with a heartbeat: what the Edge sends a
// silent stream in place of a comment.
type heartbeater interface {
	llmapi.Renderer
	Heartbeat() []byte
}

// renderBeating renders dec through r with a heartbeat before the
// answer's start and after each of its events, as if the stream fell
// silent at every point; it checks that nothing beats after the terminal.
func renderBeating(t *testing.T, dec llmapi.Decoder, r heartbeater) []byte {
	t.Helper()
	stream := r.Heartbeat()
	for {
		ev, err := dec.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		stream = append(stream, r.Event(ev)...)
		stream = append(stream, r.Heartbeat()...)
	}
	if b := r.Heartbeat(); b != nil {
		t.Fatalf("a heartbeat after the terminal: %s", b)
	}
	return stream
}

// TestHeartbeats: a stream that falls silent anywhere, heartbeats in
// its silences (the answer started by the first: the provider's start,
// later, adds nothing), is the same answer to the SDKs' accumulators, and
// holds to its format's grammar. An Anthropic heartbeat is a ping; a
// Responses one a response.in_progress whose response lists the items as
// the stream stood: those done in full, an open one as it was added.
func TestHeartbeats(t *testing.T) {
	fx := llmapitest.Fixture(t, "anthropic_stream_thinking_tools.sse")

	plain, _, _ := llmapitest.Render(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)), &llmapi.AnthropicRenderer{ID: "m", Model: "pub"})
	ar := &llmapi.AnthropicRenderer{ID: "m", Model: "pub", Streamed: true}
	stream := renderBeating(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)), ar)
	if ar.AdoptID("msg_provider") {
		t.Error("the provider's id was taken after a heartbeat started the message")
	}
	evs := llmapitest.Events(t, stream)
	if err := llmapitest.CheckAnthropic(evs); err != nil {
		t.Fatal(err)
	}
	pings := 0
	var kept []byte
	for _, ev := range evs {
		if ev.Type == "ping" {
			pings++
			continue
		}
		kept = sse.AppendEvent(kept, ev.Type, ev.Data)
	}
	if pings < 10 || !bytes.Equal(kept, plain) {
		t.Fatalf("%d pings; without them the stream is\n%s\nwant\n%s", pings, kept, plain)
	}
	if got, want := accumulateAnthropic(t, stream), accumulateAnthropic(t, plain); !reflect.DeepEqual(got.Content, want.Content) || got.Usage.OutputTokens != want.Usage.OutputTokens {
		t.Fatalf("accumulated %+v, want %+v", got, want)
	}

	rr := &llmapi.ResponsesRenderer{ID: "r1", Model: "pub", Created: 1}
	stream = renderBeating(t, llmapi.DecodeAnthropicStream(bytes.NewReader(fx)), rr)
	if rr.AdoptID("resp_provider") {
		t.Error("the provider's id was taken after a heartbeat started the response")
	}
	evs = llmapitest.Events(t, stream)
	if err := llmapitest.CheckResponses(evs); err != nil {
		t.Fatal(err)
	}
	final := checkResponses(t, stream)
	if final.OutputText() != "Checking." || len(final.Output) != 3 || final.Output[2].Arguments.OfString != `{"city": "San Francisco", "unit": "c"}` {
		t.Fatalf("final response %+v", final.Output)
	}
	status := map[string]string{} // each item's, as the stream stands
	beats := 0
	for _, ev := range evs {
		var u responses.ResponseStreamEventUnion
		if err := json.Unmarshal(ev.Data, &u); err != nil {
			t.Fatal(err)
		}
		switch u.Type {
		case "response.output_item.added":
			status[u.Item.ID] = "in_progress"
		case "response.output_item.done":
			status[u.Item.ID] = "completed"
		case "response.in_progress":
			beats++
			listed := 0
			for _, it := range u.Response.Output {
				var o struct{ ID, Status string }
				if err := json.Unmarshal([]byte(it.RawJSON()), &o); err != nil {
					t.Fatal(err)
				}
				listed++
				if want := status[o.ID]; want == "" || (o.Status != "" && o.Status != want) {
					t.Fatalf("a heartbeat lists %s as %q, the stream had it %q", o.ID, o.Status, want)
				}
			}
			if listed != len(status) {
				t.Fatalf("a heartbeat lists %d items of %d", listed, len(status))
			}
		}
	}
	if beats < 10 {
		t.Fatalf("%d response.in_progress events", beats)
	}
}
