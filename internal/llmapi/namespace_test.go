package llmapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
)

// codexNamespaces is a Codex request whose tools come in namespaces (an
// MCP server's, and a custom tool's in Codex's code mode), one of them
// in an additional_tools input item, with calls of them in its history.
const codexNamespaces = `{"model":"m","input":[` +
	`{"type":"additional_tools","role":"developer","tools":[{"type":"namespace","name":"multi_agent_v1","description":"Sub-agents.",` +
	`"tools":[{"type":"function","name":"spawn_agent","description":"Spawn one.","parameters":{"type":"object"}}]}]},` +
	`{"role":"user","content":"list my issues"},` +
	`{"type":"function_call","call_id":"c1","namespace":"mcp__github","name":"get_me","arguments":"{}"},` +
	`{"type":"function_call_output","call_id":"c1","output":"octocat"},` +
	`{"type":"custom_tool_call","call_id":"c2","namespace":"functions","name":"exec","input":"print(1)"},` +
	`{"type":"custom_tool_call_output","call_id":"c2","output":"1"}],` +
	`"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},` +
	`{"type":"namespace","name":"mcp__github","description":"GitHub's MCP server.","tools":[` +
	`{"type":"function","name":"get_me","parameters":{"type":"object"}},` +
	`{"type":"function","name":"list_issues","description":"List issues.","parameters":{"type":"object","properties":{"repo":{"type":"string"}}}}]},` +
	`{"type":"namespace","name":"functions","tools":[{"type":"custom","name":"exec","description":"Run code.","format":{"type":"text"}}]}],` +
	`"tool_choice":"auto"}`

// TestNamespaceTools: Responses namespace tools (Codex's MCP tools) reach
// every other format as functions named NamespacedName, calls in the
// history included, and a model's call of one is rendered back under the
// namespace and the tool's own name.
func TestNamespaceTools(t *testing.T) {
	r, err := llmapi.DecodeResponsesRequest([]byte(codexNamespaces))
	if err != nil {
		t.Fatal(err)
	}
	type tool struct{ Name, Description, Namespace, Local string }
	var got []tool
	for _, tl := range r.Tools {
		got = append(got, tool{tl.Name, tl.Description, tl.Namespace, tl.Local})
	}
	want := []tool{
		{"multi_agent_v1__spawn_agent", "Spawn one.", "multi_agent_v1", "spawn_agent"},
		{"shell", "", "", ""},
		{"mcp__github__get_me", "GitHub's MCP server.", "mcp__github", "get_me"},
		{"mcp__github__list_issues", "List issues.", "mcp__github", "list_issues"},
		{"functions__exec", "Run code.", "functions", "exec"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("tools (-want +got):\n%s", d)
	}
	if len(r.Messages) != 5 || r.Messages[1].Parts[0].Name != "mcp__github__get_me" || r.Messages[3].Parts[0].Name != "functions__exec" {
		t.Fatalf("history %+v", r.Messages)
	}
	if ff := r.FreeformTools(); !ff["functions__exec"] || len(ff) != 1 {
		t.Fatalf("freeform %v", ff)
	}
	for name, enc := range map[string]func() ([]byte, error){
		"anthropic": func() ([]byte, error) { return llmapi.EncodeAnthropic(r, "claude-sonnet-4-5") },
		"chat":      func() ([]byte, error) { return llmapi.EncodeChat(r, "qwen3") },
	} {
		b, err := enc()
		check := map[string]func([]byte) error{"anthropic": llmapitest.CheckAnthropicRequest, "chat": llmapitest.CheckChatRequest}[name]
		if err != nil || check(b) != nil || strings.Count(string(b), "mcp__github__get_me") != 2 || !strings.Contains(string(b), `"functions__exec"`) {
			t.Fatalf("%s: %v %v\n%s", name, err, check(b), b)
		}
	}

	// The model calls a namespace's function and its custom tool.
	rend := &llmapi.ResponsesRenderer{ID: "r1", Model: "m", Freeform: r.FreeformTools(), Namespaced: r.NamespacedTools()}
	stream := render(t, rend, []llmapi.Event{
		{Kind: llmapi.EvStart},
		{Kind: llmapi.EvBlockStart, Index: 0, Block: llmapi.BlockToolUse, ToolID: "t1", Name: "mcp__github__list_issues"},
		{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockToolUse, Text: `{"repo":"iop"}`},
		{Kind: llmapi.EvBlockStop, Index: 0, Block: llmapi.BlockToolUse},
		{Kind: llmapi.EvBlockStart, Index: 1, Block: llmapi.BlockToolUse, ToolID: "t2", Name: "functions__exec"},
		{Kind: llmapi.EvDelta, Index: 1, Block: llmapi.BlockToolUse, Text: `{"input":"print(2)"}`},
		{Kind: llmapi.EvBlockStop, Index: 1, Block: llmapi.BlockToolUse},
		{Kind: llmapi.EvBlockStart, Index: 2, Block: llmapi.BlockToolUse, ToolID: "t3", Name: "shell"},
		{Kind: llmapi.EvBlockStop, Index: 2, Block: llmapi.BlockToolUse},
		{Kind: llmapi.EvStop, Reason: llmapi.StopToolUse},
	})
	evs := llmapitest.Events(t, stream)
	if err := llmapitest.CheckResponses(evs); err != nil {
		t.Fatalf("%v\n%s", err, stream)
	}
	type item struct {
		Type, Name, Namespace, Arguments, Input string
	}
	var done []item
	for _, ev := range evs {
		if ev.Type == "response.output_item.done" {
			var o struct{ Item item }
			json.Unmarshal(ev.Data, &o)
			done = append(done, o.Item)
		}
	}
	wantItems := []item{
		{Type: "function_call", Name: "list_issues", Namespace: "mcp__github", Arguments: `{"repo":"iop"}`},
		{Type: "custom_tool_call", Name: "exec", Namespace: "functions", Input: "print(2)"},
		{Type: "function_call", Name: "shell", Arguments: "{}"},
	}
	if d := cmp.Diff(wantItems, done); d != "" {
		t.Fatalf("calls (-want +got):\n%s", d)
	}
	_, body := rend.Body()
	if !strings.Contains(string(body), `"namespace":"mcp__github"`) || strings.Contains(string(body), "mcp__github__list_issues") {
		t.Fatalf("whole: %s", body)
	}

	// A tool choice may name a namespace's tool.
	tc := strings.Replace(codexNamespaces, `"tool_choice":"auto"`, `"tool_choice":{"type":"function","namespace":"mcp__github","name":"get_me"}`, 1)
	if r, err := llmapi.DecodeResponsesRequest([]byte(tc)); err != nil || r.ToolChoice.Name != "mcp__github__get_me" {
		t.Fatalf("tool choice: %v", err)
	}
}

// TestNamespaceToolsRefused: a namespace that no translation can carry
// faithfully is refused: one without a name, one inside another, one
// that holds a hosted tool, and one whose tool takes the name of another
// tool.
func TestNamespaceToolsRefused(t *testing.T) {
	for _, tools := range []string{
		`[{"type":"namespace","tools":[{"type":"function","name":"a"}]}]`,
		`[{"type":"namespace","name":"n","tools":[{"type":"namespace","name":"m","tools":[]}]}]`,
		`[{"type":"namespace","name":"n","tools":[{"type":"web_search"}]}]`,
		`[{"type":"namespace","name":"n","tools":[{"type":"function"}]}]`,
		`[{"type":"function","name":"n__a"},{"type":"namespace","name":"n","tools":[{"type":"function","name":"a"}]}]`,
		`[{"type":"namespace","name":"n","tools":[{"type":"custom","name":"a","format":{"type":"grammar"}}]}]`,
	} {
		if _, err := llmapi.DecodeResponsesRequest([]byte(`{"model":"m","input":"x","tools":` + tools + `}`)); err == nil {
			t.Errorf("%s: decoded", tools)
		}
	}
}
