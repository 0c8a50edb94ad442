package llmapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
	"github.com/iop-dev/iop/internal/sse"
)

// codexCompact is a compaction request as Codex sends it: instructions, a
// developer message, its context as a user message, the user's request, a
// tool loop, an earlier compaction's summary and the user's next request.
func codexCompact(last string) string {
	return `{"model":"m","instructions":"You are Codex.","parallel_tool_calls":true,"reasoning":{"effort":"high"},"text":{"verbosity":"low"},` +
		`"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}],"input":[` +
		`{"type":"message","role":"developer","content":[{"type":"input_text","text":"sandbox: workspace-write"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd /w</environment_context>"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"fix the bug in a.go"}]},` +
		`{"type":"function_call","call_id":"c1","name":"shell","arguments":"{\"cmd\":\"go test\"}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"FAIL a.go:3"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Fixed a.go."}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":` + quote(llmapi.CompactionSummaryPrefix+"old summary") + `}]},` +
		last + `]}`
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// inputItems are the items of a request body's input, as sent.
func inputItems(t *testing.T, body string) []json.RawMessage {
	t.Helper()
	var q struct{ Input []json.RawMessage }
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		t.Fatal(err)
	}
	return q.Input
}

type compacted struct {
	ID        string            `json:"id"`
	Object    string            `json:"object"`
	CreatedAt int64             `json:"created_at"`
	Output    []json.RawMessage `json:"output"`
	Usage     struct {
		InputTokens        int `json:"input_tokens"`
		OutputTokens       int `json:"output_tokens"`
		TotalTokens        int `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

// renderCompaction renders evs through c's renderer.
func renderCompaction(t *testing.T, c *llmapi.Compaction, evs ...llmapi.Event) (int, []byte) {
	t.Helper()
	r := c.Renderer("resp_1", 1700000000)
	for _, e := range evs {
		if out := r.Event(e); len(out) > 0 {
			t.Fatalf("a compaction rendered an event: %s", out)
		}
	}
	return r.Body()
}

func textAnswer(text string) []llmapi.Event {
	return []llmapi.Event{
		{Kind: llmapi.EvStart, ID: "msg_1"},
		{Kind: llmapi.EvBlockStart, Index: 0, Block: llmapi.BlockThinking},
		{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockThinking, Text: "Let me sum up."},
		{Kind: llmapi.EvBlockStop, Index: 0},
		{Kind: llmapi.EvBlockStart, Index: 1, Block: llmapi.BlockText},
		{Kind: llmapi.EvDelta, Index: 1, Block: llmapi.BlockText, Text: text},
		{Kind: llmapi.EvBlockStop, Index: 1},
		{Kind: llmapi.EvUsage, Usage: llmapi.Usage{Input: 1000, Output: 50, Cached: 900}},
		{Kind: llmapi.EvStop, Reason: llmapi.StopEnd},
	}
}

// TestCompaction: a compaction for a provider with none of its own asks
// the model for a summary of the whole conversation, its tools offered
// and none to be called, and answers with the conversation's user
// messages as they were sent (an earlier summary left out) and the
// summary as a user message after them.
func TestCompaction(t *testing.T) {
	body := codexCompact(`{"type":"message","role":"user","content":[{"type":"input_text","text":"now add a test"}]}`)
	c, err := llmapi.DecodeCompactionRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Summarize
	if s.Stream || s.Output != nil || s.ToolChoice == nil || s.ToolChoice.Mode != "none" || len(s.Tools) != 1 || s.ReasoningEffort != "high" {
		t.Fatalf("summary request: stream %v, output %v, tool choice %+v, %d tools, effort %q", s.Stream, s.Output, s.ToolChoice, len(s.Tools), s.ReasoningEffort)
	}
	last := s.Messages[len(s.Messages)-1]
	if n := len(last.Parts); last.Role != llmapi.RoleUser || n < 2 || last.Parts[n-2].Text != "now add a test" || !strings.Contains(last.Parts[n-1].Text, "summary") {
		t.Fatalf("the summary is not asked for after the user's last words: %+v", last)
	}
	for _, to := range []target{toAnthropicCached, toChat, toResponses} {
		b := encoded(t, s, to)
		if !strings.Contains(string(b), `"none"`) || !strings.Contains(string(b), `"shell"`) {
			t.Errorf("the tools are not offered with none to be called: %s", b)
		}
	}

	status, out := renderCompaction(t, c, textAnswer("## Task\nFix a.go, then add a test.")...)
	var got compacted
	if err := json.Unmarshal(out, &got); status != http.StatusOK || err != nil {
		t.Fatalf("%d %v %s", status, err, out)
	}
	in := inputItems(t, body)
	want := []string{string(in[1]), string(in[2]), string(in[7]),
		`{"content":[{"text":` + quote(llmapi.CompactionSummaryPrefix+"## Task\nFix a.go, then add a test.") + `,"type":"input_text"}],"role":"user","type":"message"}`}
	var gotItems []string
	for _, it := range got.Output {
		gotItems = append(gotItems, string(it))
	}
	if diff := cmp.Diff(want, gotItems); diff != "" {
		t.Errorf("output (-want +got):\n%s", diff)
	}
	if got.ID != "resp_1" || got.Object != "response.compaction" || got.CreatedAt != 1700000000 ||
		got.Usage.InputTokens != 1000 || got.Usage.OutputTokens != 50 || got.Usage.TotalTokens != 1050 || got.Usage.InputTokensDetails.CachedTokens != 900 {
		t.Errorf("compaction object: %s", out)
	}

	// Compacted in the middle of a turn, the conversation ends with a
	// tool's output: the request for the summary follows it in its turn.
	c, err = llmapi.DecodeCompactionRequest([]byte(codexCompact(`{"type":"function_call","call_id":"c2","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c2","output":"ok"}`)))
	if err != nil {
		t.Fatal(err)
	}
	last = c.Summarize.Messages[len(c.Summarize.Messages)-1]
	if last.Role != llmapi.RoleUser || len(last.Parts) != 2 || last.Parts[0].Kind != llmapi.PartToolResult || last.Parts[1].Kind != llmapi.PartText {
		t.Fatalf("mid-turn: %+v", last)
	}
	encoded(t, c.Summarize, toAnthropicCached)
}

// TestCompactionFailures: an answer with no summary in it compacts
// nothing; it fails, with the provider's own failure where it gave one.
func TestCompactionFailures(t *testing.T) {
	c, err := llmapi.DecodeCompactionRequest([]byte(codexCompact(`{"type":"message","role":"user","content":"go on"}`)))
	if err != nil {
		t.Fatal(err)
	}
	start := llmapi.Event{Kind: llmapi.EvStart, ID: "msg_1"}
	for _, tc := range []struct {
		name   string
		evs    []llmapi.Event
		status int
	}{
		{"blank text", textAnswer(" \n "), http.StatusBadGateway},
		{"no block", []llmapi.Event{start, {Kind: llmapi.EvStop, Reason: llmapi.StopEnd}}, http.StatusBadGateway},
		{"a tool call only", []llmapi.Event{start,
			{Kind: llmapi.EvBlockStart, Index: 0, Block: llmapi.BlockToolUse, ToolID: "t", Name: "shell"},
			{Kind: llmapi.EvDelta, Index: 0, Block: llmapi.BlockToolUse, Text: "{}"},
			{Kind: llmapi.EvBlockStop, Index: 0}, {Kind: llmapi.EvStop, Reason: llmapi.StopToolUse}}, http.StatusBadGateway},
		{"a refusal", append(textAnswer("I cannot help with that.")[:7], llmapi.Event{Kind: llmapi.EvStop, Reason: llmapi.StopRefusal}), http.StatusBadGateway},
		{"rate limited", []llmapi.Event{start, {Kind: llmapi.EvError, Err: &llmapi.APIError{Status: 429, Type: "rate_limit", Message: "slow down"}}}, http.StatusTooManyRequests},
	} {
		status, out := renderCompaction(t, c, tc.evs...)
		var e struct {
			Error struct{ Message string }
		}
		if status != tc.status || json.Unmarshal(out, &e) != nil || e.Error.Message == "" || strings.Contains(string(out), "output") {
			t.Errorf("%s: %d %s", tc.name, status, out)
		}
	}
}

// TestCompactionKeepsRecentUserMessages: the user messages kept are the
// most recent within CompactionKeepTokens; the one that crosses the bound
// keeps its opening text, cut at a character's start and marked, and
// none before it is kept. An input given as a string is the one user
// message.
func TestCompactionKeepsRecentUserMessages(t *testing.T) {
	var items []string
	for i := range 40 {
		text := fmt.Sprintf("request %02d: ", i) + strings.Repeat("é", 1500) // 3 KB
		items = append(items, `{"type":"message","role":"user","content":[{"type":"input_text","text":`+quote(text)+`}]}`,
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}`)
	}
	body := `{"model":"m","input":[` + strings.Join(items, ",") + `]}`
	c, err := llmapi.DecodeCompactionRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	_, out := renderCompaction(t, c, textAnswer("summary")...)
	var got compacted
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	in := inputItems(t, body)
	kept := got.Output[:len(got.Output)-1]
	total := 0
	for _, it := range kept {
		total += llmapi.EstimateTokens(it)
	}
	whole := llmapi.EstimateTokens(in[0])
	if n := llmapi.CompactionKeepTokens / whole; len(kept) != n+1 || total > llmapi.CompactionKeepTokens {
		t.Fatalf("kept %d messages (%d estimated tokens), want %d whole and one cut", len(kept), total, n)
	}
	for i, it := range kept[1:] {
		if string(it) != string(in[len(in)-2*(len(kept)-1-i)]) {
			t.Fatalf("kept[%d] = %.60s, not the input's", i+1, it)
		}
	}
	var cut struct {
		Content []struct{ Text string }
	}
	json.Unmarshal(kept[0], &cut)
	first := fmt.Sprintf("request %02d: ", 40-len(kept))
	if len(cut.Content) != 1 || !strings.HasPrefix(cut.Content[0].Text, first+"éé") || !strings.HasSuffix(cut.Content[0].Text, "compacted]") ||
		!utf8.ValidString(cut.Content[0].Text) || strings.Contains(cut.Content[0].Text, "\uFFFD") {
		t.Fatalf("the message crossing the bound: %.80s", kept[0])
	}

	c, err = llmapi.DecodeCompactionRequest([]byte(`{"model":"m","input":"hello"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, out = renderCompaction(t, c, textAnswer("summary")...)
	if err := json.Unmarshal(out, &got); err != nil || len(got.Output) != 2 ||
		string(got.Output[0]) != `{"content":[{"text":"hello","type":"input_text"}],"role":"user","type":"message"}` {
		t.Fatalf("string input: %s", out)
	}
}

// TestCompactionRefused: what a Responses request cannot carry to another
// format, a compaction cannot either.
func TestCompactionRefused(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","input":[{"type":"compaction","encrypted_content":"x"}]}`,
		`{"model":"m","input":[{"type":"message","role":"user","content":[{"type":"input_image","file_id":"f"}]}]}`,
		`{"model":"m","input":[]}`,
		`{"model":"m","input":7}`,
		`[]`,
	} {
		if _, err := llmapi.DecodeCompactionRequest([]byte(body)); err == nil {
			t.Errorf("%s: decoded", body)
		}
	}
}

// TestCompactionTrigger: Codex's compaction in the Responses API (a
// compaction_trigger item at the end of its input) asks the model for a
// summary and is answered, streamed or whole, with one compaction item
// that carries it; sent back, that item is the user message of the
// summary, to a translation and to a Responses provider relayed
// untranslated alike.
func TestCompactionTrigger(t *testing.T) {
	body := strings.Replace(codexCompact(`{"type":"compaction_trigger"}`), `"model":"m",`, `"model":"m","stream":true,"store":false,"include":["reasoning.encrypted_content"],`, 1)
	r, err := llmapi.DecodeResponsesRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	last := r.Messages[len(r.Messages)-1]
	if !r.Compact || !r.Stream || r.SealReasoning || r.ToolChoice == nil || r.ToolChoice.Mode != "none" ||
		last.Role != llmapi.RoleUser || !strings.Contains(last.Parts[len(last.Parts)-1].Text, "summary") {
		t.Fatalf("compact %v, stream %v, seal %v, tool choice %+v, last %+v", r.Compact, r.Stream, r.SealReasoning, r.ToolChoice, last)
	}
	if _, err := llmapi.DecodeCompactionRequest([]byte(body)); err == nil {
		t.Error("a compaction_trigger was taken in a compaction request")
	}
	if _, err := llmapi.DecodeResponsesRequest([]byte(strings.Replace(body, `{"type":"compaction_trigger"},`, ``, 1) + `x`)); err == nil {
		t.Error("malformed body decoded")
	}
	notLast := codexCompact(`{"type":"compaction_trigger"},{"type":"message","role":"user","content":"more"}`)
	if _, err := llmapi.DecodeResponsesRequest([]byte(notLast)); err == nil || !strings.Contains(err.Error(), "last") {
		t.Errorf("a compaction_trigger before the end: %v", err)
	}

	const summary = "## Task\nFix a.go <now>."
	stream, evs := responsesStream(t, &llmapi.ResponsesRenderer{ID: "resp_1", Model: "m", Compact: true}, textAnswer(summary))
	var item json.RawMessage
	for _, ev := range evs {
		var o struct {
			Item     json.RawMessage
			Response struct {
				Output []json.RawMessage
				Usage  struct {
					InputTokens int `json:"input_tokens"`
				}
			}
		}
		json.Unmarshal(ev.Data, &o)
		switch ev.Type {
		case "response.output_item.done":
			if item != nil {
				t.Fatalf("two items done: %s", stream)
			}
			item = o.Item
		case "response.completed":
			if len(o.Response.Output) != 1 || string(o.Response.Output[0]) != string(item) || o.Response.Usage.InputTokens != 1000 {
				t.Fatalf("completed: %s", ev.Data)
			}
		case "response.output_text.delta", "response.reasoning_summary_text.delta":
			t.Fatalf("the summary was streamed as the answer: %s", ev.Data)
		}
	}
	var cmp struct {
		Type, ID         string
		EncryptedContent string `json:"encrypted_content"`
	}
	if err := json.Unmarshal(item, &cmp); err != nil || cmp.Type != "compaction" || cmp.ID == "" || cmp.EncryptedContent == "" || strings.Contains(string(stream), "Fix a.go") {
		t.Fatalf("compaction item %s", item)
	}
	whole := &llmapi.ResponsesRenderer{ID: "resp_1", Model: "m", Compact: true}
	for _, e := range textAnswer(summary) {
		whole.Event(e)
	}
	status, out := whole.Body()
	var resp struct {
		Status string
		Output []json.RawMessage
	}
	if err := json.Unmarshal(out, &resp); status != 200 || err != nil || resp.Status != "completed" || len(resp.Output) != 1 || string(resp.Output[0]) != string(item) {
		t.Fatalf("whole: %d %s", status, out)
	}

	// Codex's next turn: its retained messages, the compaction, and the
	// user's next words.
	next := `{"model":"m","input":[{"type":"message","role":"user","content":"fix the bug in a.go"},` + string(item) +
		`,{"type":"message","role":"user","content":"go on"}]}`
	nr, err := llmapi.DecodeResponsesRequest([]byte(next))
	if err != nil {
		t.Fatal(err)
	}
	want := llmapi.CompactionSummaryPrefix + summary
	if len(nr.Messages) != 1 || len(nr.Messages[0].Parts) != 3 || nr.Messages[0].Parts[1].Text != want || nr.Compact {
		t.Fatalf("next turn: %+v", nr.Messages)
	}
	relayed, err := llmapi.UnsealResponses([]byte(next))
	if err != nil {
		t.Fatal(err)
	}
	items := inputItems(t, string(relayed))
	var msg struct {
		Type, Role string
		Content    []struct{ Type, Text string }
	}
	if err := json.Unmarshal(items[1], &msg); err != nil || len(items) != 3 || msg.Type != "message" || msg.Role != "user" ||
		len(msg.Content) != 1 || msg.Content[0].Text != want || llmapitest.CheckResponsesRequest(relayed) != nil {
		t.Fatalf("relayed untranslated: %s", relayed)
	}

	// A compaction that is not the gateway's, or one it did not make
	// whole, is refused.
	for _, enc := range []string{"gAAAA", "~iop.compaction.v1:!!", "~iop.compaction.v1:_w"} {
		b := strings.Replace(next, cmp.EncryptedContent, enc, 1)
		if _, err := llmapi.DecodeResponsesRequest([]byte(b)); err == nil {
			t.Errorf("%s: decoded", enc)
		}
		if _, err := llmapi.UnsealResponses([]byte(b)); err == nil && enc != "gAAAA" {
			t.Errorf("%s: relayed", enc)
		}
	}
}

// TestCompactionTriggerNoSummary: an answer with no summary fails the
// compaction, streamed and whole.
func TestCompactionTriggerNoSummary(t *testing.T) {
	stream, evs := responsesStream(t, &llmapi.ResponsesRenderer{ID: "resp_1", Model: "m", Compact: true}, textAnswer("  "))
	if evs[len(evs)-1].Type != "response.failed" || !strings.Contains(string(stream), "no summary") {
		t.Fatalf("%s", stream)
	}
	whole := &llmapi.ResponsesRenderer{ID: "resp_1", Model: "m", Compact: true}
	for _, e := range textAnswer("") {
		whole.Event(e)
	}
	if status, out := whole.Body(); status != http.StatusBadGateway || !strings.Contains(string(out), "no summary") {
		t.Fatalf("whole: %d %s", status, out)
	}
}

// responsesStream renders evs through r as a stream, fails t unless the
// stream keeps the Responses stream grammar, and returns it and its
// events.
func responsesStream(t *testing.T, r *llmapi.ResponsesRenderer, evs []llmapi.Event) ([]byte, []sse.Event) {
	t.Helper()
	var out []byte
	for _, e := range evs {
		out = append(out, r.Event(e)...)
	}
	got := llmapitest.Events(t, out)
	if err := llmapitest.CheckResponses(got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out, got
}
