package llmapi_test

import (
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
