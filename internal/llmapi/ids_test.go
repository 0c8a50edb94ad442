package llmapi_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
)

// providerName is the pattern OpenAI and Anthropic hold tool names to.
var providerName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

func TestProviderToolName(t *testing.T) {
	long := "mcp__plugin_deploy_on_aws_awsiac__check_cloudformation_template_compliance" // 75 bytes
	at64 := strings.Repeat("x", 64)
	for _, name := range []string{"Read", "mcp__github__create_issue", "a-b_C9", at64} {
		if got := llmapi.ProviderToolName(name); got != name {
			t.Errorf("ProviderToolName(%q) = %q, want it unchanged", name, got)
		}
	}
	renamed := []string{
		long, long + "2", // differ only past the kept prefix
		"server.tool", "server:tool", "server tool", // differ only in a replaced byte
		"天気", "", at64 + "y", "a\x00b",
	}
	seen := map[string]string{}
	for _, name := range renamed {
		got := llmapi.ProviderToolName(name)
		if !providerName.MatchString(got) {
			t.Errorf("ProviderToolName(%q) = %q: not a name providers take", name, got)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("%q and %q are both renamed %q", other, name, got)
		}
		seen[got] = name
		if again := llmapi.ProviderToolName(name); again != got {
			t.Errorf("ProviderToolName(%q) gave %q, then %q", name, got, again)
		}
	}
	if got := llmapi.ProviderToolName(long); !strings.HasPrefix(got, long[:55]+"_") || len(got) != 64 {
		t.Errorf("ProviderToolName(long) = %q: want its first 55 bytes, _ and a hash", got)
	}
	if got := llmapi.ProviderToolName("server.tool"); !strings.HasPrefix(got, "server_tool_") {
		t.Errorf(`ProviderToolName("server.tool") = %q`, got)
	}
}

// TestToolNamesRenamed: a tool name no provider format takes (one longer
// than 64 bytes, as Claude Code names some MCP tools, or one with a dot)
// is sent renamed in every translation: the tool, the tool choice and the
// history's call of it alike, so that the call still names the tool. A
// name providers take is sent as it is. ToolNames maps every renamed name
// back.
func TestToolNamesRenamed(t *testing.T) {
	long := "mcp__plugin_deploy_on_aws_awsiac__check_cloudformation_template_compliance"
	names := []string{long, "server.tool", "Read"}
	var tools []string
	for _, n := range names {
		tools = append(tools, `{"name":`+strconv.Quote(n)+`,"input_schema":{"type":"object"}}`)
	}
	req, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":99,"messages":[` +
		`{"role":"user","content":"check it"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":` + strconv.Quote(long) + `,"input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}],` +
		`"tools":[` + strings.Join(tools, ",") + `],"tool_choice":{"type":"tool","name":"server.tool"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, n := range names[:2] {
		want[llmapi.ProviderToolName(n)] = n
	}
	if got := req.ToolNames(); !maps.Equal(got, want) {
		t.Fatalf("ToolNames() = %q, want %q", got, want)
	}
	sent := []string{llmapi.ProviderToolName(long), llmapi.ProviderToolName("server.tool"), "Read"}
	for _, c := range []struct {
		format string
		encode func(*llmapi.Request, string) ([]byte, error)
		check  func([]byte) error
		// names reads the tools', the tool choice's and the history
		// call's names from the encoded body.
		names func(body map[string]any) (tools []string, choice, call string)
	}{
		{"chat", llmapi.EncodeChat, llmapitest.CheckChatRequest, func(b map[string]any) ([]string, string, string) {
			var tools []string
			for _, tl := range b["tools"].([]any) {
				tools = append(tools, tl.(map[string]any)["function"].(map[string]any)["name"].(string))
			}
			choice := b["tool_choice"].(map[string]any)["function"].(map[string]any)["name"].(string)
			call := b["messages"].([]any)[1].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["name"].(string)
			return tools, choice, call
		}},
		{"responses", llmapi.EncodeResponses, llmapitest.CheckResponsesRequest, func(b map[string]any) ([]string, string, string) {
			var tools []string
			for _, tl := range b["tools"].([]any) {
				tools = append(tools, tl.(map[string]any)["name"].(string))
			}
			var call string
			for _, it := range b["input"].([]any) {
				if it := it.(map[string]any); it["type"] == "function_call" {
					call = it["name"].(string)
				}
			}
			return tools, b["tool_choice"].(map[string]any)["name"].(string), call
		}},
		{"anthropic", llmapi.EncodeAnthropic, llmapitest.CheckAnthropicRequest, func(b map[string]any) ([]string, string, string) {
			var tools []string
			for _, tl := range b["tools"].([]any) {
				tools = append(tools, tl.(map[string]any)["name"].(string))
			}
			call := b["messages"].([]any)[1].(map[string]any)["content"].([]any)[0].(map[string]any)["name"].(string)
			return tools, b["tool_choice"].(map[string]any)["name"].(string), call
		}},
	} {
		t.Run(c.format, func(t *testing.T) {
			out, err := c.encode(req, "m")
			if err != nil {
				t.Fatal(err)
			}
			if err := c.check(out); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var body map[string]any
			if err := json.Unmarshal(out, &body); err != nil {
				t.Fatal(err)
			}
			tools, choice, call := c.names(body)
			if !slices.Equal(tools, sent) || choice != sent[1] || call != sent[0] {
				t.Errorf("tools %q, tool choice %q, history call %q; want tools %q, choice %q, call %q", tools, choice, call, sent, sent[1], sent[0])
			}
		})
	}
}

// TestToolNamesThatWouldMeet: a request that names one tool as another's
// renamed form is refused with 400, whichever format it came in: a call
// of the one name the provider knows both by could not be given back
// under the name the model meant.
func TestToolNamesThatWouldMeet(t *testing.T) {
	dotted := "server.tool"
	clash := llmapi.ProviderToolName(dotted)
	for _, c := range []struct {
		decode func([]byte) (*llmapi.Request, error)
		body   string
	}{
		{llmapi.DecodeAnthropicRequest, `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"}],"tools":[` +
			`{"name":"` + dotted + `","input_schema":{"type":"object"}},{"name":"` + clash + `","input_schema":{"type":"object"}}]}`},
		{llmapi.DecodeChatRequest, `{"model":"m","messages":[{"role":"user","content":"x"},` +
			`{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"` + clash + `","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"c1","content":"ok"}],"tools":[{"type":"function","function":{"name":"` + dotted + `"}}]}`},
		{llmapi.DecodeResponsesRequest, `{"model":"m","input":"x","tools":[{"type":"function","name":"` + clash + `"},{"type":"function","name":"` + dotted + `"}]}`},
	} {
		_, err := c.decode([]byte(c.body))
		var ae *llmapi.APIError
		if !errors.As(err, &ae) || ae.Status != 400 || !strings.Contains(ae.Message, clash) {
			t.Errorf("%s: got %v, want a 400 naming %q", c.body, err, clash)
		}
	}
}

// TestOpenAICallIDsAndUser: a conversation another provider began can
// hold tool call ids longer than OpenAI takes (40 bytes in Chat
// Completions, 64 in Responses; a gateway that keeps Gemini's thought
// signature in the id makes hundreds), and Claude Code's end-user id runs
// to about 150 bytes where OpenAI takes 64. Translated for OpenAI, a long
// id is cut with a hash of the whole, alike in the call and its result,
// so that two ids with one prefix stay apart; a long user id becomes its
// SHA-256, one value for one user. Short ones go as they are, and
// Anthropic is sent the user id as it came.
func TestOpenAICallIDsAndUser(t *testing.T) {
	long1 := "call_7f3a__thought__" + strings.Repeat("Q2lnbmF0dXJl", 20)
	long2 := long1 + "x"
	user := "user_" + strings.Repeat("ab", 32) + "_account__session_9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"
	req, err := llmapi.DecodeAnthropicRequest([]byte(`{"model":"m","max_tokens":9,"metadata":{"user_id":"` + user + `"},"messages":[` +
		`{"role":"user","content":"go"},{"role":"assistant","content":[` +
		`{"type":"tool_use","id":"` + long1 + `","name":"f","input":{}},{"type":"tool_use","id":"` + long2 + `","name":"f","input":{}},` +
		`{"type":"tool_use","id":"toolu_01short","name":"f","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"` + long1 + `","content":"a"},` +
		`{"type":"tool_result","tool_use_id":"` + long2 + `","content":"b"},{"type":"tool_result","tool_use_id":"toolu_01short","content":"c"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(user))
	wantUser := hex.EncodeToString(sum[:])
	check := func(format string, max int, calls, results []string, sentUser string) {
		t.Helper()
		if !slices.Equal(calls, results) || len(calls) != 3 || calls[0] == calls[1] || calls[2] != "toolu_01short" {
			t.Errorf("%s: calls %q, results %q", format, calls, results)
		}
		for _, id := range calls {
			if len(id) > max {
				t.Errorf("%s: an id of %d bytes: %q", format, len(id), id)
			}
		}
		if sentUser != wantUser {
			t.Errorf("%s: user %q, want %q", format, sentUser, wantUser)
		}
	}

	out, err := llmapi.EncodeChat(req, "gpt-4o")
	if err != nil {
		t.Fatal(err)
	}
	var chat struct {
		User     string
		Messages []struct {
			ToolCalls []struct{ ID string } `json:"tool_calls"`
			ToolCall  string                `json:"tool_call_id"`
		}
	}
	json.Unmarshal(out, &chat)
	var calls, results []string
	for _, m := range chat.Messages {
		for _, c := range m.ToolCalls {
			calls = append(calls, c.ID)
		}
		if m.ToolCall != "" {
			results = append(results, m.ToolCall)
		}
	}
	check("chat", 40, calls, results, chat.User)

	if out, err = llmapi.EncodeResponses(req, "gpt-5"); err != nil {
		t.Fatal(err)
	}
	var resp struct {
		User  string
		Input []struct {
			Type   string
			CallID string `json:"call_id"`
		}
	}
	json.Unmarshal(out, &resp)
	calls, results = nil, nil
	for _, it := range resp.Input {
		switch it.Type {
		case "function_call":
			calls = append(calls, it.CallID)
		case "function_call_output":
			results = append(results, it.CallID)
		}
	}
	check("responses", 64, calls, results, resp.User)

	if out, err = llmapi.EncodeAnthropic(req, "claude"); err != nil || !strings.Contains(string(out), `"user_id":"`+user+`"`) {
		t.Errorf("Anthropic was not sent the user id as it came: %v %s", err, out)
	}
}

// TestGeminiThoughtSignature: Gemini 3 over Chat Completions signs each
// tool call (extra_content.google.thought_signature) and refuses a
// history whose calls come back without it. A client of another format
// is given the signature in the call's id, the one place every client
// sends back; a translation for Chat Completions sends it back in the
// call's extra_content, under the provider's id, to any model but
// OpenAI's own (which refuse the field); other formats get the
// provider's id alone. Gemini sends parallel calls whole and without an
// index: each is its own call.
func TestGeminiThoughtSignature(t *testing.T) {
	const sig = `{"google":{"thought_signature":"EjQKMgEMOdbHJChLX75QUCJjyYlm+/=="}}`
	stream := "data: {\"id\":\"g1\",\"model\":\"gemini-3-pro-preview\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[" +
		"{\"id\":\"fc_a\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"a.go\\\"}\"},\"extra_content\":" + sig + "}," +
		"{\"id\":\"fc_b\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"path\\\":\\\"b.go\\\"}\"}}]}}]}\n\n" +
		"data: {\"id\":\"g1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"
	buffered := `{"id":"g1","model":"gemini-3-pro-preview","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","tool_calls":[` +
		`{"id":"fc_a","type":"function","function":{"name":"read","arguments":"{\"path\":\"a.go\"}"},"extra_content":` + sig + `},` +
		`{"id":"fc_b","type":"function","function":{"name":"read","arguments":"{\"path\":\"b.go\"}"}}]}}]}`
	for name, dec := range map[string]func() llmapi.Decoder{
		"stream":   func() llmapi.Decoder { return llmapi.DecodeChatStream(strings.NewReader(stream)) },
		"buffered": func() llmapi.Decoder { return llmapi.DecodeChat([]byte(buffered)) },
	} {
		t.Run(name, func(t *testing.T) {
			_, _, body := llmapitest.Render(t, dec(), &llmapi.ResponsesRenderer{ID: "r", Model: "m"})
			var o struct {
				Output []struct {
					CallID    string `json:"call_id"`
					Arguments string
				}
			}
			if err := json.Unmarshal(body, &o); err != nil || len(o.Output) != 2 || o.Output[1].CallID != "fc_b" ||
				!strings.HasPrefix(o.Output[0].CallID, "fc_a") || o.Output[0].Arguments != `{"path":"a.go"}` || o.Output[1].Arguments != `{"path":"b.go"}` {
				t.Fatalf("%v %s", err, body)
			}
			// Codex's next turn: the calls as it was given them, and their outputs.
			next := `{"model":"m","input":[{"role":"user","content":"read them"},` +
				`{"type":"function_call","call_id":"` + o.Output[0].CallID + `","name":"read","arguments":"{}"},` +
				`{"type":"function_call","call_id":"fc_b","name":"read","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"` + o.Output[0].CallID + `","output":"package a"},` +
				`{"type":"function_call_output","call_id":"fc_b","output":"package b"}],"tools":[{"type":"function","name":"read"}]}`
			req, out := translated(t, llmapi.DecodeResponsesRequest, next, target{func(r *llmapi.Request) ([]byte, error) {
				return llmapi.EncodeChat(r, "gemini-3-pro-preview")
			}, llmapitest.CheckChatRequest})
			var chat struct {
				Messages []struct {
					ToolCallID string `json:"tool_call_id"`
					ToolCalls  []struct {
						ID           string
						ExtraContent json.RawMessage `json:"extra_content"`
					} `json:"tool_calls"`
				}
			}
			json.Unmarshal(out, &chat)
			if len(chat.Messages) != 4 || len(chat.Messages[1].ToolCalls) != 2 {
				t.Fatalf("sent %s", out)
			}
			calls := chat.Messages[1].ToolCalls
			if calls[0].ID != "fc_a" || string(calls[0].ExtraContent) != sig || calls[1].ID != "fc_b" || calls[1].ExtraContent != nil ||
				chat.Messages[2].ToolCallID != "fc_a" || chat.Messages[3].ToolCallID != "fc_b" {
				t.Fatalf("the signature did not go back with its call: %s", out)
			}
			// OpenAI's own models, and the other formats, get the ids alone.
			for _, enc := range []func() ([]byte, error){
				func() ([]byte, error) { return llmapi.EncodeChat(req, "gpt-5") },
				func() ([]byte, error) { return llmapi.EncodeAnthropic(req, "claude") },
				func() ([]byte, error) { return llmapi.EncodeResponses(req, "gpt-5") },
			} {
				out, err := enc()
				if err != nil || strings.Contains(string(out), "thought_signature") || strings.Contains(string(out), "_iopsig_") || !strings.Contains(string(out), `"fc_a"`) {
					t.Fatalf("%v %s", err, out)
				}
			}
		})
	}
}
