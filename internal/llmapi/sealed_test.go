package llmapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
)

// TestSealedThinkingRoundTrip: a Responses client that keeps its own
// reasoning state (Codex: store false, include
// reasoning.encrypted_content) is given an Anthropic model's signed
// thinking as a reasoning item's encrypted_content, streamed and whole.
// Sent back with the call's output, it reaches Anthropic as the thinking
// block it was, first in the assistant's turn, and the model goes on
// thinking; without it, Anthropic would refuse thinking in the tool loop,
// and it is turned off.
func TestSealedThinkingRoundTrip(t *testing.T) {
	upstream, err := os.ReadFile("testdata/anthropic_stream_thinking_tools.sse")
	if err != nil {
		t.Fatal(err)
	}
	items := func(seal bool) (streamed, whole []json.RawMessage) {
		return responsesItems(t, llmapi.DecodeAnthropicStream(strings.NewReader(string(upstream))), seal)
	}
	streamed, whole := items(true)
	if len(streamed) != 3 || len(whole) != 3 || string(streamed[0]) != string(whole[0]) {
		t.Fatalf("streamed items %s\nwhole %s", streamed, whole)
	}
	var reasoning struct {
		EncryptedContent string `json:"encrypted_content"`
	}
	if json.Unmarshal(whole[0], &reasoning); !strings.HasPrefix(reasoning.EncryptedContent, llmapi.SealedPrefix) {
		t.Fatalf("the reasoning item is not sealed: %s", whole[0])
	}
	if plain, _ := items(false); strings.Contains(string(plain[0]), "encrypted_content") {
		t.Errorf("a client that did not include reasoning.encrypted_content was given it: %s", plain[0])
	}

	next := func(reasoningItem string) map[string]any {
		t.Helper()
		input := `[{"role":"user","content":"weather in SF?"},` + reasoningItem + string(whole[1]) + `,` + string(whole[2]) + `,` +
			`{"type":"function_call_output","call_id":"toolu_01A","output":"18C"}]`
		req, out := translated(t, llmapi.DecodeResponsesRequest, `{"model":"m","store":false,"include":["reasoning.encrypted_content"],`+
			`"reasoning":{"effort":"medium"},"input":`+input+`,"tools":[{"type":"function","name":"get_weather"}]}`, toAnthropic)
		if !req.SealReasoning {
			t.Error("the include was not read")
		}
		var b map[string]any
		json.Unmarshal(out, &b)
		return b
	}
	b := next(string(whole[0]) + ",")
	assistant := b["messages"].([]any)[1].(map[string]any)["content"].([]any)
	first := assistant[0].(map[string]any)
	if first["type"] != "thinking" || first["thinking"] != "The user wants the weather." || first["signature"] != "EqQBCgIYAhIM" || b["thinking"] == nil {
		t.Fatalf("sent back, the thinking reached Anthropic as %v, thinking %v", assistant, b["thinking"])
	}
	// Reasoning state of another provider's (OpenAI's own encrypted
	// content) is left out, and thinking with it.
	if b := next(`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAABo-opaque"},`); b["thinking"] != nil ||
		strings.Contains(mustMarshal(t, b), "gAAAA") {
		t.Fatalf("foreign reasoning state: %v", b)
	}

	// A sealed item that does not open is refused.
	_, err = llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":[{"role":"user","content":"x"},` +
		`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"` + llmapi.SealedPrefix + `!!"}]}`))
	var ae *llmapi.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, "input[1].encrypted_content") {
		t.Fatalf("a broken sealed item: %v", err)
	}
}

// responsesItems renders dec's answer for a Responses client, sealing its
// thinking when seal is set, and returns the output items the stream
// finished (response.output_item.done) and the whole answer's.
func responsesItems(t *testing.T, dec llmapi.Decoder, seal bool) (streamed, whole []json.RawMessage) {
	t.Helper()
	stream, _, body := llmapitest.Render(t, dec, &llmapi.ResponsesRenderer{ID: "resp_1", Model: "m", Seal: seal})
	for _, ev := range llmapitest.Events(t, stream) {
		if ev.Type == "response.output_item.done" {
			var o struct{ Item json.RawMessage }
			json.Unmarshal(ev.Data, &o)
			streamed = append(streamed, o.Item)
		}
	}
	var o struct{ Output []json.RawMessage }
	if err := json.Unmarshal(body, &o); err != nil {
		t.Fatal(err)
	}
	return streamed, o.Output
}

// target is a provider format a test translates to: its encoder, for a
// model, and what that API takes.
type target struct {
	encode func(*llmapi.Request) ([]byte, error)
	check  func([]byte) error
}

// The targets most tests translate to: a Claude model that thinks with a
// budget (with its prompt cache marked, toAnthropicCached), and an open
// model behind Chat Completions or Responses.
var (
	toAnthropic       = target{func(r *llmapi.Request) ([]byte, error) { return llmapi.EncodeAnthropic(r, "claude-sonnet-4-5") }, llmapitest.CheckAnthropicRequest}
	toAnthropicCached = target{func(r *llmapi.Request) ([]byte, error) {
		return llmapi.EncodeAnthropicWith(r, "claude-sonnet-4-5", llmapi.AnthropicModel{MaxTokens: 8192, PromptCache: true})
	}, llmapitest.CheckAnthropicRequest}
	toChat      = target{func(r *llmapi.Request) ([]byte, error) { return llmapi.EncodeChat(r, "qwen3") }, llmapitest.CheckChatRequest}
	toResponses = target{func(r *llmapi.Request) ([]byte, error) { return llmapi.EncodeResponses(r, "qwen3") }, llmapitest.CheckResponsesRequest}
)

// translated decodes a client's body and encodes it for to, failing the
// test unless both succeed and the provider would take the result.
func translated(t *testing.T, decode func([]byte) (*llmapi.Request, error), body string, to target) (*llmapi.Request, []byte) {
	t.Helper()
	req, err := decode([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return req, encoded(t, req, to)
}

// encoded encodes r for to, failing the test unless it succeeds and the
// provider would take the result.
func encoded(t *testing.T, r *llmapi.Request, to target) []byte {
	t.Helper()
	out, err := to.encode(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := to.check(out); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUnsealResponses: a Responses request relayed untranslated
// leaves out the reasoning items the gateway sealed, and nothing else;
// one that holds none is passed as it is, byte for byte. (Its
// compactions: TestCompactionTrigger.)
func TestUnsealResponses(t *testing.T) {
	sealed := `{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"` + llmapi.SealedPrefix + `eyJ0ZXh0IjoiIn0"}`
	theirs := `{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"gAAAAB"}`
	call := `{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"x\": 1.50}"}`
	body := `{"model":"m", "input":[{"role":"user","content":"x"},` + sealed + `,` + theirs + `,` + call + `],"store":false}`
	out, err := llmapi.UnsealResponses([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m", "input":[{"role":"user","content":"x"},` + theirs + `,` + call + `],"store":false}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	// A user's text that mentions the prefix is no reasoning item.
	for _, b := range []string{want, `{"input":"` + llmapi.SealedPrefix + `"}`, `{"input":[{"role":"user","content":"` + llmapi.SealedPrefix + `"}]}`} {
		if out, err := llmapi.UnsealResponses([]byte(b)); err != nil || string(out) != b {
			t.Errorf("%s: changed to %s (%v)", b, out, err)
		}
	}
}

// TestRedactedThinkingRoundTrip: Anthropic's safety systems may give a
// tool-calling turn's thinking as a redacted_thinking block, opaque data
// Anthropic needs back, in order and unchanged beside the turn's other
// thinking, to go on with the loop. A Responses client keeping its own
// reasoning state is given it sealed, streamed and whole, as signed
// thinking is; sent back, it reaches Anthropic as the redacted_thinking
// block it was, after the thinking block before it. No client is shown
// its data.
func TestRedactedThinkingRoundTrip(t *testing.T) {
	upstream, err := os.ReadFile("testdata/anthropic_stream_redacted.sse")
	if err != nil {
		t.Fatal(err)
	}
	const data = "EmwKAhgBEgy3va3pzix/LafPsn4a"
	buffered := `{"id":"msg_02","type":"message","role":"assistant","model":"claude-x","content":[` +
		`{"type":"thinking","thinking":"The user wants the weather.","signature":"EqQBCgIYAhIM"},` +
		`{"type":"redacted_thinking","data":"` + data + `"},` +
		`{"type":"tool_use","id":"toolu_01A","name":"get_weather","input":{"city":"SF"}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":25,"output_tokens":89}}`
	decoders := map[string]func() llmapi.Decoder{
		"stream":   func() llmapi.Decoder { return llmapi.DecodeAnthropicStream(strings.NewReader(string(upstream))) },
		"buffered": func() llmapi.Decoder { return llmapi.DecodeAnthropic([]byte(buffered)) },
	}
	for name, dec := range decoders {
		t.Run(name, func(t *testing.T) {
			streamed, whole := responsesItems(t, dec(), true)
			if len(whole) != 3 || len(streamed) != 3 || string(streamed[1]) != string(whole[1]) {
				t.Fatalf("streamed items %s\nwhole %s", streamed, whole)
			}
			if all := fmt.Sprintf("%s %s", streamed, whole); strings.Contains(all, data) {
				t.Errorf("the redacted data reached the client unsealed:\n%s", all)
			}

			input := `[{"role":"user","content":"weather in SF?"},` + string(whole[0]) + `,` + string(whole[1]) + `,` + string(whole[2]) + `,` +
				`{"type":"function_call_output","call_id":"toolu_01A","output":"18C"}]`
			_, out := translated(t, llmapi.DecodeResponsesRequest, `{"model":"m","store":false,"include":["reasoning.encrypted_content"],`+
				`"reasoning":{"effort":"medium"},"input":`+input+`,"tools":[{"type":"function","name":"get_weather"}]}`, toAnthropic)
			var b struct {
				Thinking json.RawMessage
				Messages []struct {
					Content []struct {
						Type, Thinking, Signature, Data string
					}
				}
			}
			if err := json.Unmarshal(out, &b); err != nil {
				t.Fatal(err)
			}
			turn := b.Messages[1].Content
			if len(turn) != 3 || turn[0].Type != "thinking" || turn[0].Signature != "EqQBCgIYAhIM" ||
				turn[1].Type != "redacted_thinking" || turn[1].Data != data || turn[2].Type != "tool_use" || b.Thinking == nil {
				t.Fatalf("sent back, the turn reached Anthropic as\n%s", out)
			}
		})
	}

	// Clients of the other formats are given none of it, streamed or
	// whole (only an Anthropic provider redacts, so an Anthropic client
	// meets its answers untranslated).
	for _, r := range []llmapi.Renderer{&llmapi.AnthropicRenderer{ID: "msg_1", Model: "m"}, &llmapi.ChatRenderer{ID: "c_1", Model: "m"}} {
		stream, _, body := llmapitest.Render(t, decoders["stream"](), r)
		if strings.Contains(string(stream)+string(body), data) || strings.Contains(string(stream)+string(body), "redacted") {
			t.Errorf("%T gave the client the redacted block:\n%s\n%s", r, stream, body)
		}
	}
}

// TestOpenAIReasoningRoundTrip: an OpenAI reasoning model answering
// through Responses is asked for its reasoning's state (include
// reasoning.encrypted_content), which a client of another format is
// given as its thinking block's signature, streamed and whole; Claude
// Code sends the block back in its tool loop, and it reaches the model
// as the reasoning item it was, before the call, so the model goes on
// thinking. Anthropic, and models that are not OpenAI's, get none of it.
func TestOpenAIReasoningRoundTrip(t *testing.T) {
	const enc = "gAAAAABo-encrypted-state=="
	stream := "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-5\",\"status\":\"in_progress\"}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]}}\n\n" +
		"event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"item_id\":\"rs_1\",\"delta\":\"**Reading the file**\"}\n\n" +
		"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"**Reading the file**\"}],\"encrypted_content\":\"" + enc + "\"}}\n\n" +
		"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"Read\",\"arguments\":\"\"}}\n\n" +
		"event: response.function_call_arguments.delta\ndata: {\"type\":\"response.function_call_arguments.delta\",\"item_id\":\"fc_1\",\"delta\":\"{\\\"file_path\\\":\\\"a.go\\\"}\"}\n\n" +
		"event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"output_index\":1,\"item\":{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"call_1\",\"name\":\"Read\",\"arguments\":\"{\\\"file_path\\\":\\\"a.go\\\"}\"}}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-5\",\"status\":\"completed\",\"usage\":{\"input_tokens\":10,\"output_tokens\":5}}}\n\n"
	whole := `{"id":"resp_1","model":"gpt-5","status":"completed","output":[` +
		`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"**Reading the file**"}],"encrypted_content":"` + enc + `"},` +
		`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"Read","arguments":"{\"file_path\":\"a.go\"}"}],"usage":{"input_tokens":10,"output_tokens":5}}`
	for name, dec := range map[string]func() llmapi.Decoder{
		"stream":   func() llmapi.Decoder { return llmapi.DecodeResponsesStream(strings.NewReader(stream)) },
		"buffered": func() llmapi.Decoder { return llmapi.DecodeResponses([]byte(whole)) },
	} {
		t.Run(name, func(t *testing.T) {
			_, _, body := llmapitest.Render(t, dec(), &llmapi.AnthropicRenderer{ID: "msg_1", Model: "m"})
			var msg struct {
				Content []json.RawMessage
			}
			if err := json.Unmarshal(body, &msg); err != nil || len(msg.Content) != 2 || !strings.Contains(string(msg.Content[0]), `"signature":"~openai-reasoning:`+enc+`"`) {
				t.Fatalf("%v %s", err, body)
			}
			// Claude Code's next turn: the block, the call, its result.
			next := `{"model":"m","max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":4000},"messages":[{"role":"user","content":"read a.go"},` +
				`{"role":"assistant","content":[` + string(msg.Content[0]) + `,` + string(msg.Content[1]) + `]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"package a"}]}],` +
				`"tools":[{"name":"Read","input_schema":{"type":"object"}}]}`
			req, out := translated(t, llmapi.DecodeAnthropicRequest, next, target{func(r *llmapi.Request) ([]byte, error) {
				return llmapi.EncodeResponses(r, "gpt-5")
			}, llmapitest.CheckResponsesRequest})
			var got struct {
				Include []string
				Input   []struct {
					Type             string
					EncryptedContent string `json:"encrypted_content"`
					Summary          []struct{ Text string }
				}
			}
			json.Unmarshal(out, &got)
			if len(got.Input) != 4 || got.Input[1].Type != "reasoning" || got.Input[1].EncryptedContent != enc ||
				len(got.Input[1].Summary) != 1 || got.Input[1].Summary[0].Text != "**Reading the file**" || got.Input[2].Type != "function_call" ||
				len(got.Include) != 1 || got.Include[0] != "reasoning.encrypted_content" {
				t.Fatalf("sent %s", out)
			}
			for model, enc := range map[string]func() ([]byte, error){
				"claude": func() ([]byte, error) { return llmapi.EncodeAnthropic(req, "claude-sonnet-4-5") },
				"qwen":   func() ([]byte, error) { return llmapi.EncodeResponses(req, "qwen3") },
				"chat":   func() ([]byte, error) { return llmapi.EncodeChat(req, "gpt-5") },
			} {
				out, err := enc()
				if err != nil || strings.Contains(string(out), "encrypted") || strings.Contains(string(out), "openai-reasoning") {
					t.Fatalf("%s: %v %s", model, err, out)
				}
			}
		})
	}
}

// TestDropForeignThinking: an Anthropic request relayed untranslated goes
// without the thinking blocks that hold an OpenAI reasoning model's state
// (a route's previous provider answered the conversation); when that
// leaves the final tool-calling turn without thinking, thinking is turned
// off, as Anthropic requires. Anything else is passed as it is, byte for
// byte.
func TestDropForeignThinking(t *testing.T) {
	foreign := `{"type":"thinking","thinking":"Reading.","signature":"~openai-reasoning:gAAAA"}`
	own := `{"type":"thinking","thinking":"Hm.","signature":"EqQBCgIYAhIM"}`
	call := `{"type":"tool_use","id":"call_1","name":"Read","input":{"p":"a"}}`
	result := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"package a"}]}`
	for _, c := range []struct {
		name, in, want string
	}{
		{"the last turn's only thinking",
			`{"model":"m","thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[` + foreign + `,` + call + `]},` + result + `]}`,
			`{"model":"m","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"x"},{"content":[` + call + `],"role":"assistant"},` + result + `]}`},
		{"beside Anthropic's own",
			`{"model":"m","thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[` + own + `,` + foreign + `,` + call + `]},` + result + `]}`,
			`{"model":"m","thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"x"},{"content":[` + own + `,` + call + `],"role":"assistant"},` + result + `]}`},
		{"an earlier turn's",
			`{"model":"m","thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[` + foreign + `,{"type":"text","text":"a"}]},{"role":"user","content":"y"}]}`,
			`{"model":"m","thinking":{"type":"adaptive"},"messages":[{"role":"user","content":"x"},{"content":[{"type":"text","text":"a"}],"role":"assistant"},{"role":"user","content":"y"}]}`},
	} {
		out, err := llmapi.DropForeignThinking([]byte(c.in))
		if err != nil || string(out) != c.want {
			t.Errorf("%s: %v\ngot  %s\nwant %s", c.name, err, out, c.want)
		}
	}
	for _, b := range []string{
		`{"model":"m","messages":[{"role":"assistant","content":[` + own + `,` + call + `]},` + result + `]}`,
		`{"model":"m","messages":[{"role":"user","content":"~openai-reasoning: is just text"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"\"~openai-reasoning:"}]}]}`,
	} {
		if out, err := llmapi.DropForeignThinking([]byte(b)); err != nil || string(out) != b {
			t.Errorf("%s: changed to %s (%v)", b, out, err)
		}
	}
}
