package llmapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/internal/llmapi"
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
	for _, to := range []target{toAnthropicCached, toChat} {
		if b := encoded(t, r, to); strings.Count(string(b), "mcp__github__get_me") != 2 || !strings.Contains(string(b), `"functions__exec"`) {
			t.Fatalf("%s", b)
		}
	}

	// The model calls a namespace's function and its custom tool.
	rend := &llmapi.ResponsesRenderer{ID: "r1", Model: "m", Freeform: r.FreeformTools(), Namespaced: r.NamespacedTools()}
	_, evs := responsesStream(t, rend, []llmapi.Event{
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

// TestToolSearch: Codex's own tool search (execution client) is carried
// as a function; a search in the history is its call, and the search's
// output offers the tools it loaded (once, however often loaded), which
// the model is told it can call now. The model's search is rendered back
// as a tool_search_call. OpenAI's hosted search is left out, and the
// tools it would have searched are offered.
func TestToolSearch(t *testing.T) {
	const github = `{"type":"namespace","name":"mcp__github","tools":[{"type":"function","name":"list_issues","parameters":{"type":"object"}}]}`
	body := `{"model":"m","input":[{"role":"user","content":"list my issues"},` +
		`{"type":"tool_search_call","call_id":"ts1","execution":"client","status":"completed","arguments":{"query":"github issues"}},` +
		`{"type":"tool_search_output","call_id":"ts1","execution":"client","status":"completed","tools":[` + github + `]},` +
		`{"type":"tool_search_call","call_id":"ts2","execution":"client","arguments":{"query":"issues"}},` +
		`{"type":"tool_search_output","call_id":"ts2","execution":"client","tools":[` + github + `]},` +
		`{"type":"function_call","call_id":"c1","namespace":"mcp__github","name":"list_issues","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"#1"}],` +
		`"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},` +
		`{"type":"tool_search","execution":"client","description":"Search for deferred tools.","parameters":{"type":"object","properties":{"query":{"type":"string"},"limit":{"type":"number"}},"required":["query"]}}]}`
	r, err := llmapi.DecodeResponsesRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range r.Tools {
		names = append(names, tl.Name)
	}
	if d := cmp.Diff([]string{"shell", "tool_search", "mcp__github__list_issues"}, names); d != "" || r.SearchTool() != "tool_search" {
		t.Fatalf("tools (-want +got):\n%s", d)
	}
	search, result := r.Messages[1].Parts[0], r.Messages[2].Parts[0]
	if search.Name != "tool_search" || string(search.Input) != `{"query":"github issues"}` ||
		result.ToolUseID != "ts1" || !strings.Contains(result.Content[0].Text, "mcp__github__list_issues") {
		t.Fatalf("history: %+v", r.Messages)
	}
	encoded(t, r, toAnthropicCached)
	encoded(t, r, toChat)

	rend := &llmapi.ResponsesRenderer{ID: "r1", Model: "m", Namespaced: r.NamespacedTools(), ToolSearch: r.SearchTool()}
	_, evs := responsesStream(t, rend, []llmapi.Event{
		{Kind: llmapi.EvStart},
		{Kind: llmapi.EvBlockStart, Index: 0, Block: llmapi.BlockToolUse, ToolID: "t1", Name: "tool_search"},
		{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockToolUse, Text: `{"query":`},
		{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockToolUse, Text: `"calendar"}`},
		{Kind: llmapi.EvBlockStop, Index: 0, Block: llmapi.BlockToolUse},
		{Kind: llmapi.EvStop, Reason: llmapi.StopToolUse},
	})
	var item struct {
		Type, ID, CallID, Execution string
		Arguments                   json.RawMessage
	}
	for _, ev := range evs {
		if strings.HasPrefix(ev.Type, "response.function_call") {
			t.Fatalf("%s for a tool search", ev.Type)
		}
		if ev.Type == "response.output_item.done" {
			var o struct{ Item json.RawMessage }
			json.Unmarshal(ev.Data, &o)
			json.Unmarshal(o.Item, &item)
			if !strings.Contains(string(o.Item), `"call_id":"t1"`) {
				t.Fatalf("item %s", o.Item)
			}
		}
	}
	if item.Type != "tool_search_call" || item.Execution != "client" || !strings.HasPrefix(item.ID, "tsc_") || string(item.Arguments) != `{"query":"calendar"}` {
		t.Fatalf("search call %+v", item)
	}

	// OpenAI's hosted search (the default execution) is left out with its
	// calls, and the tools it would search are offered.
	hosted := `{"model":"m","input":[{"role":"user","content":"x"},{"type":"tool_search_call","call_id":"s","execution":"server","arguments":{"paths":["a"]}},` +
		`{"type":"tool_search_output","call_id":"s","execution":"server","tools":[]}],"tools":[{"type":"tool_search"},{"type":"function","name":"a","defer_loading":true,"parameters":{"type":"object"}}]}`
	r, err = llmapi.DecodeResponsesRequest([]byte(hosted))
	if err != nil || len(r.Tools) != 1 || r.Tools[0].Name != "a" || len(r.Messages) != 1 || r.SearchTool() != "" {
		t.Fatalf("hosted: %v %+v", err, r)
	}

	for _, bad := range []string{
		`{"model":"m","input":"x","tools":[{"type":"tool_search","execution":"elsewhere"}]}`,
		`{"model":"m","input":[{"role":"user","content":"x"},{"type":"tool_search_call","call_id":"s","execution":"client","arguments":[1]}]}`,
		`{"model":"m","input":[{"role":"user","content":"x"},{"type":"tool_search_output","call_id":"s","execution":"client","tools":[{"type":"mcp"}]}]}`,
		`{"model":"m","input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":{"a":1}}]}`,
	} {
		if _, err := llmapi.DecodeResponsesRequest([]byte(bad)); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}

// TestToolReference: Claude Code's tool search (ToolSearch, with the
// tools it finds sent with defer_loading) answers with tool_reference
// blocks, which load a deferred tool at Anthropic; a translation offers
// every tool, and the model is told which the search found.
func TestToolReference(t *testing.T) {
	body := `{"model":"m","max_tokens":100,"tools":[{"name":"ToolSearch","input_schema":{"type":"object"}},` +
		`{"name":"mcp__echo__echo","input_schema":{"type":"object"},"defer_loading":true}],"messages":[{"role":"user","content":"echo ping"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"ToolSearch","input":{"query":"select:mcp__echo__echo"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"tool_reference","tool_name":"mcp__echo__echo"}]}]}]}`
	r, err := llmapi.DecodeAnthropicRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tools) != 2 || r.Tools[1].Name != "mcp__echo__echo" {
		t.Fatalf("tools %+v", r.Tools)
	}
	res := r.Messages[2].Parts[0]
	if len(res.Content) != 1 || res.Content[0].Text != "Tool mcp__echo__echo is loaded and can be called." {
		t.Fatalf("result %+v", res)
	}
	for _, to := range []target{toChat, toResponses} {
		if b := encoded(t, r, to); strings.Contains(string(b), "defer_loading") {
			t.Fatalf("%s", b)
		}
	}
	if _, err := llmapi.DecodeAnthropicRequest([]byte(strings.Replace(body, `"tool_name":"mcp__echo__echo"`, `"tool_name":""`, 1))); err == nil {
		t.Error("a reference to no tool was decoded")
	}
}

// TestAnthropicToolSearch: Anthropic's own tool search (a server tool
// over the tools sent with defer_loading) is left out of a translation
// with its calls and results, and the deferred tools are offered; any
// other server tool call is refused.
func TestAnthropicToolSearch(t *testing.T) {
	body := `{"model":"m","max_tokens":100,"tools":[{"type":"tool_search_tool_regex_20251119","name":"tool_search_tool_regex"},` +
		`{"name":"get_weather","input_schema":{"type":"object"},"defer_loading":true}],"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"tool_search_tool_regex","input":{"pattern":"weather"}},` +
		`{"type":"tool_search_tool_result","tool_use_id":"srvtoolu_1","content":{"type":"tool_search_tool_search_result","tool_references":[{"type":"tool_reference","tool_name":"get_weather"}]}},` +
		`{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}]}`
	r, err := llmapi.DecodeAnthropicRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Tools) != 1 || r.Tools[0].Name != "get_weather" || len(r.Messages[1].Parts) != 1 || r.Messages[1].Parts[0].Name != "get_weather" {
		t.Fatalf("tools %+v, turn %+v", r.Tools, r.Messages[1])
	}
	encoded(t, r, toChat)
	web := strings.Replace(body, `"name":"tool_search_tool_regex","input"`, `"name":"web_search","input"`, 1)
	if _, err := llmapi.DecodeAnthropicRequest([]byte(web)); err == nil {
		t.Error("a web search call was decoded")
	}
}

// TestAgentMessage: a message between Codex's agents reaches the model
// as a user turn naming who sent it; an encrypted one is refused.
func TestAgentMessage(t *testing.T) {
	body := `{"model":"m","input":[{"type":"agent_message","author":"/root","recipient":"/root/worker","content":[{"type":"input_text","text":"Fix the tests."},{"type":"input_text","text":"Report back."}]}]}`
	r, err := llmapi.DecodeResponsesRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Messages) != 1 || r.Messages[0].Role != llmapi.RoleUser || r.Messages[0].Parts[0].Text != "[Message from /root to /root/worker]\nFix the tests.\nReport back." {
		t.Fatalf("%+v", r.Messages)
	}
	for _, bad := range []string{
		strings.Replace(body, `{"type":"input_text","text":"Report back."}`, `{"type":"encrypted_content","encrypted_content":"gAAA"}`, 1),
		strings.Replace(body, `[{"type":"input_text","text":"Fix the tests."},{"type":"input_text","text":"Report back."}]`, `"Fix the tests."`, 1),
		strings.Replace(body, `"type":"input_text","text":"Report back."`, `"type":"input_image","image_url":"https://x/a.png"`, 1),
	} {
		if _, err := llmapi.DecodeResponsesRequest([]byte(bad)); err == nil || !strings.Contains(err.Error(), "agent message") && !strings.Contains(err.Error(), "content part") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
