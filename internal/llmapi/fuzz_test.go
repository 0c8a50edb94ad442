package llmapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
	"github.com/iop-dev/iop/internal/sse"
)

func seedFiles(f *testing.F, names ...string) {
	for _, n := range names {
		b, err := os.ReadFile("testdata/" + n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// drain runs a decoder into every renderer and checks the invariants a
// client relies on whatever the provider sent: the decoder ends with
// exactly one terminal, every rendered SSE event carries valid JSON (or
// [DONE]) and the buffered answer is valid JSON.
func drain(t *testing.T, mk func() llmapi.Decoder) {
	renderers := []llmapi.Renderer{
		&llmapi.AnthropicRenderer{ID: "msg_1", Model: "m"},
		&llmapi.ChatRenderer{ID: "c_1", Model: "m", IncludeUsage: true},
		&llmapi.ResponsesRenderer{ID: "resp_1", Model: "m"},
		// Calls of these tools (names the seeds use) render as
		// custom_tool_call items.
		&llmapi.ResponsesRenderer{ID: "resp_2", Model: "m", Freeform: map[string]bool{"f": true, "get_weather": true, "apply_patch": true}, Seal: true},
		&llmapi.ChatRenderer{ID: "c_2", Model: "m", Freeform: map[string]bool{"f": true, "get_weather": true, "apply_patch": true}},
	}
	// render runs a fresh decoder into r and returns the stream it wrote;
	// with beat, r's heartbeat goes before the answer and after its
	// events, as if the stream fell silent there: after each of the first
	// 16, then after the 32nd, the 64th... (a Responses heartbeat repeats
	// the answer so far: one after every event of a long answer would
	// take the fuzzer quadratic time).
	render := func(r llmapi.Renderer, beat bool) []byte {
		dec := mk()
		var stream []byte
		heartbeat := func(i int) {
			if beat && (i < 16 || i&(i-1) == 0) {
				stream = append(stream, r.(interface{ Heartbeat() []byte }).Heartbeat()...)
			}
		}
		heartbeat(0)
		terminals := 0
		for i := 0; ; i++ {
			if i > 1<<16 {
				t.Fatal("decoder does not end")
			}
			ev, err := dec.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("decoder error %v (terminals are events)", err)
			}
			if ev.Kind == llmapi.EvStop || ev.Kind == llmapi.EvError {
				terminals++
			}
			stream = append(stream, r.Event(ev)...)
			heartbeat(i)
		}
		if terminals != 1 {
			t.Fatalf("%d terminals", terminals)
		}
		return stream
	}
	for _, r := range renderers {
		stream := render(r, false)
		checkGrammar(t, r, stream)
		rd := sse.NewReader(bytes.NewReader(stream), 0)
		for {
			ev, err := rd.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("rendered stream unreadable: %v", err)
			}
			if string(ev.Data) != "[DONE]" && !json.Valid(ev.Data) {
				t.Fatalf("rendered event %q is not JSON: %q", ev.Type, ev.Data)
			}
		}
		_, body := r.Body()
		if !json.Valid(body) {
			t.Fatalf("buffered answer is not JSON: %q", body)
		}
		checkAgree(t, r, stream, body)
	}
	// A Streamed renderer, which keeps no text, writes the same events.
	freeform := map[string]bool{"f": true, "get_weather": true}
	twins := [][2]llmapi.Renderer{
		{&llmapi.AnthropicRenderer{ID: "msg_1", Model: "m"}, &llmapi.AnthropicRenderer{ID: "msg_1", Model: "m", Streamed: true}},
		{&llmapi.ChatRenderer{ID: "c_1", Model: "m", IncludeUsage: true, Freeform: freeform},
			&llmapi.ChatRenderer{ID: "c_1", Model: "m", IncludeUsage: true, Freeform: freeform, Streamed: true}},
	}
	for _, tw := range twins {
		// Ids made for calls the provider gave none are random.
		kept := madeID.ReplaceAll(render(tw[0], false), []byte("call_*"))
		streamed := madeID.ReplaceAll(render(tw[1], false), []byte("call_*"))
		if !bytes.Equal(kept, streamed) {
			t.Fatalf("a Streamed renderer wrote other events:\n%s\nfor\n%s", streamed, kept)
		}
	}
	// Heartbeats in every silence leave the stream in its grammar and
	// the answer as it was.
	for _, mkr := range []func() llmapi.Renderer{
		func() llmapi.Renderer { return &llmapi.AnthropicRenderer{ID: "msg_1", Model: "m", Streamed: true} },
		func() llmapi.Renderer {
			return &llmapi.ResponsesRenderer{ID: "resp_2", Model: "m", Freeform: map[string]bool{"f": true, "get_weather": true}, Seal: true}
		},
	} {
		plain, beating := render(mkr(), false), render(mkr(), true)
		r := mkr()
		checkGrammar(t, r, beating)
		format := llmapitest.FormatAnthropic
		if _, ok := r.(*llmapi.ResponsesRenderer); ok {
			format = llmapitest.FormatResponses
		}
		want, err := llmapitest.StreamAnswer(format, llmapitest.Events(t, madeID.ReplaceAll(plain, []byte("call_*"))))
		if err != nil {
			t.Fatal(err)
		}
		got, err := llmapitest.StreamAnswer(format, llmapitest.Events(t, madeID.ReplaceAll(beating, []byte("call_*"))))
		if err != nil {
			t.Fatalf("%T: %v in\n%s", r, err, beating)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("%T: heartbeats changed the answer (-without +with):\n%s", r, diff)
		}
	}
}

// checkGrammar holds stream, which r rendered, to the event grammar of
// r's client format.
func checkGrammar(t *testing.T, r llmapi.Renderer, stream []byte) {
	t.Helper()
	evs := llmapitest.Events(t, stream)
	var err error
	switch r := r.(type) {
	case *llmapi.AnthropicRenderer:
		err = llmapitest.CheckAnthropic(evs)
	case *llmapi.ChatRenderer:
		err = llmapitest.CheckChat(evs, r.IncludeUsage)
	case *llmapi.ResponsesRenderer:
		err = llmapitest.CheckResponses(evs)
	default:
		t.Fatalf("no grammar for %T", r)
	}
	if err != nil {
		t.Fatalf("%T: %v in\n%s", r, err, stream)
	}
}

// checkAgree holds the stream r rendered and the whole answer it then
// made to the same answer: a client that streams ends up holding what one
// that does not is given. A failed answer's whole body is its error alone.
func checkAgree(t *testing.T, r llmapi.Renderer, stream, body []byte) {
	t.Helper()
	var format string
	switch r := r.(type) {
	case *llmapi.AnthropicRenderer:
		format = llmapitest.FormatAnthropic
	case *llmapi.ChatRenderer:
		format = llmapitest.FormatChat
	case *llmapi.ResponsesRenderer:
		format = llmapitest.FormatResponses
	default:
		t.Fatalf("no format for %T", r)
	}
	streamed, err := llmapitest.StreamAnswer(format, llmapitest.Events(t, stream))
	if err != nil {
		t.Fatalf("%T: stream: %v in\n%s", r, err, stream)
	}
	whole, err := llmapitest.BodyAnswer(format, body)
	if err != nil {
		t.Fatalf("%T: whole answer: %v in\n%s", r, err, body)
	}
	if streamed.Error != "" {
		streamed = llmapitest.Answer{Error: streamed.Error}
	}
	if c, ok := r.(*llmapi.ChatRenderer); ok && !c.IncludeUsage {
		whole.Input, whole.Output = 0, 0 // the client did not ask for it in its stream
	}
	if diff := cmp.Diff(whole, streamed); diff != "" {
		t.Fatalf("%T: the stream and the whole answer differ (-whole +stream):\n%s\nstream:\n%s\nwhole:\n%s", r, diff, stream, body)
	}
}

// madeID matches the tool call ids llmapi makes up.
var madeID = regexp.MustCompile(`call_[A-Z2-7]{26}`)

func FuzzDecodeStream(f *testing.F) {
	seedFiles(f, "chat_stream_parallel_tools.sse", "anthropic_stream_thinking_tools.sse",
		"anthropic_stream_bad_indices.sse", "responses_stream_args_in_done.sse", "anthropic_stream_apply_patch.sse",
		"anthropic_stream_redacted.sse")
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":7}]}}]}\n\n"))
	// Gemini: parallel calls without an index, a thought signature on one.
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"},\"extra_content\":{\"google\":{\"thought_signature\":\"s\"}}},{\"id\":\"b\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"))
	// A call of a tool without parameters, its arguments never sent: the
	// stream gives it {} as the whole answer does.
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"now\"}}]}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n"))
	f.Add([]byte("data: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"message\",\"id\":\"m\"}}\n\n" +
		"data: {\"type\":\"response.refusal.delta\",\"item_id\":\"m\",\"delta\":\"no\"}\n\n" +
		"data: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\",\"id\":\"m\",\"content\":[{\"type\":\"refusal\",\"refusal\":\"no\"}]}}\n\n" +
		"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\"}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		drain(t, func() llmapi.Decoder { return llmapi.DecodeChatStream(bytes.NewReader(body)) })
		drain(t, func() llmapi.Decoder { return llmapi.DecodeAnthropicStream(bytes.NewReader(body)) })
		drain(t, func() llmapi.Decoder { return llmapi.DecodeResponsesStream(bytes.NewReader(body)) })
	})
}

func FuzzDecodeBuffered(f *testing.F) {
	seedFiles(f, "chat_buffered_tool.json", "anthropic_buffered.json")
	f.Add([]byte(`{"output":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`))
	f.Add([]byte(`{"content":[{"type":"redacted_thinking","data":"EmwK"},{"type":"tool_use","id":"t","name":"f","input":{}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		drain(t, func() llmapi.Decoder { return llmapi.DecodeChat(body) })
		drain(t, func() llmapi.Decoder { return llmapi.DecodeAnthropic(body) })
		drain(t, func() llmapi.Decoder { return llmapi.DecodeResponses(body) })
	})
}

// FuzzDecodeRequest feeds client bodies to the request decoders: a body
// either decodes to a Request that the encoders turn into valid JSON (or
// refuse with an error), or is refused with an error. Nothing panics, and
// what is encoded for each API is what it takes (CheckAnthropicRequest,
// CheckChatRequest, CheckResponsesRequest).
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":10,"system":"s","messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"tool_result","tool_use_id":"t","content":"x"}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":1024}}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}],"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"model":"m","instructions":"i","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"}],"reasoning":{"effort":"high"}}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","strict":true,"schema":{"type":"object"}}},"text":{"format":{"type":"json_object"}},"output_config":{"format":{"type":"json_schema","schema":{}}},"n":1}`))
	f.Add([]byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"document","title":"t","source":{"type":"base64","media_type":"application/pdf","data":"JVBE"}},{"type":"document","source":{"type":"content","content":[{"type":"text","text":"x"}]}},{"type":"file","file":{"filename":"a","file_data":"data:application/pdf;base64,JVBE"}},{"type":"input_file","file_url":"https://x/a.pdf"}]}]}`))
	f.Add([]byte(`{"model":"m","input":[{"type":"custom_tool_call","call_id":"c","name":"p","input":"*** Begin Patch"},{"type":"custom_tool_call_output","call_id":"c","output":"ok"}],"tools":[{"type":"custom","name":"p","format":{"type":"grammar","syntax":"lark","definition":"start: x"}},{"type":"custom","name":"q","format":{"type":"text"}}],"tool_choice":{"type":"custom","name":"p"}}`))
	f.Add([]byte(`{"model":"m","input":"x","tools":[{"type":"function","name":"a"},{"type":"custom","name":"b"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"custom","name":"b"}]},"allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"a"}}]}}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","custom":{"name":"p","input":"*** Begin Patch"}}]},{"role":"tool","tool_call_id":"c","content":"ok"}],"tools":[{"type":"custom","custom":{"name":"p","format":{"type":"grammar","grammar":{"syntax":"lark","definition":"start: x"}}}},{"type":"custom","custom":{"name":"q","format":{"type":"text"}}}],"tool_choice":{"type":"custom","custom":{"name":"p"}}}`))
	// Claude Code's tool loop after an OpenAI reasoning model answered it.
	f.Add([]byte(`{"model":"m","max_tokens":9,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"thinking","thinking":"r","signature":"~openai-reasoning:gAAA"},{"type":"tool_use","id":"c","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":"r"}]}]}`))
	// Claude Code's billing header, a block of its own and a block's first line, and a system message.
	f.Add([]byte(`{"model":"m","max_tokens":9,"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.337.a23; cch=1f0e2;"},{"type":"text","text":"x-anthropic-billing-header: a\nS","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"x"},{"role":"system","content":"e"}]}`))
	// A call whose id carries a provider's signature (withCallSignature).
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a_iopsig_eyJnb29nbGUiOnsidGhvdWdodF9zaWduYXR1cmUiOiJzIn19","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a_iopsig_eyJnb29nbGUiOnsidGhvdWdodF9zaWduYXR1cmUiOiJzIn19","content":"r"}]}`))
	// Codex's hosted web search, left out in translation, and a search
	// call of an earlier turn.
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":"x"},{"type":"web_search_call","id":"ws","status":"completed","action":{"type":"search","query":"q"}}],"tools":[{"type":"function","name":"f"},{"type":"web_search","external_web_access":false}],"tool_choice":"auto"}`))
	// Codex's next turn after Anthropic thought and called a tool: the
	// sealed reasoning item it was given, the call, its output.
	f.Add([]byte(`{"model":"m","store":false,"include":["reasoning.encrypted_content"],"reasoning":{"effort":"low"},"input":[{"role":"user","content":"x"},` +
		`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"Let me look."}],"encrypted_content":"` + llmapi.SealedPrefix + `eyJ0ZXh0IjoiTGV0IG1lIGxvb2suIiwic2lnbmF0dXJlIjoiRXFRQkNnSVlBaElNIn0"},` +
		`{"type":"function_call","call_id":"toolu_1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"toolu_1","output":"r"}],"tools":[{"type":"function","name":"f"}]}`))
	// Blank text OpenAI's formats take, and a prefill ending in a space.
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"w"},{"role":"assistant","content":"\n\n","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":" "},{"role":"user","content":[{"type":"text","text":" "},{"type":"text","text":"ok"}]},{"role":"assistant","content":"Sure, "}]}`))
	// A compaction, for a provider with none of its own: an earlier
	// summary, a long user message and one in a string.
	f.Add([]byte(`{"model":"m","instructions":"i","input":[{"role":"user","content":"` + strings.Repeat("<x> é", 20000) + `"},{"role":"assistant","content":"ok"},` +
		`{"role":"user","content":[{"type":"input_text","text":` + quote(llmapi.CompactionSummaryPrefix+"s") + `}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"}],"tools":[{"type":"function","name":"f"}],"parallel_tool_calls":true,"text":{"verbosity":"low"}}`))
	// Codex's compaction in the Responses API, and a compaction the
	// gateway made sent back (a summary of "## Task").
	f.Add([]byte(`{"model":"m","stream":true,"input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"r"},{"type":"compaction_trigger"}],"tools":[{"type":"function","name":"f"}]}`))
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":"x"},{"type":"compaction","id":"cmp_1","encrypted_content":"~iop.compaction.v1:IyMgVGFzaw"},{"role":"user","content":"go on"}]}`))
	// Codex's namespace tools, in tools and in an additional_tools item,
	// with calls of them.
	f.Add([]byte(`{"model":"m","input":[{"type":"additional_tools","role":"developer","tools":[{"type":"namespace","name":"a","tools":[{"type":"function","name":"f"}]}]},` +
		`{"role":"user","content":"x"},{"type":"custom_tool_call","call_id":"c","namespace":"n","name":"e","input":"1"},{"type":"custom_tool_call_output","call_id":"c","output":"r"}],` +
		`"tools":[{"type":"namespace","name":"n","description":"d","tools":[{"type":"custom","name":"e"},{"type":"function","name":"g"}]}],"tool_choice":{"type":"function","namespace":"n","name":"g"}}`))
	// Claude Code's tool search: a deferred tool and a reference to it.
	f.Add([]byte(`{"model":"m","max_tokens":9,"tools":[{"name":"ToolSearch","input_schema":{"type":"object"}},{"name":"e","input_schema":{"type":"object"},"defer_loading":true}],` +
		`"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"ToolSearch","input":{"query":"e"}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_reference","tool_name":"e"}]}]}]}`))
	// Anthropic's server-side tool search, a search and its result.
	f.Add([]byte(`{"model":"m","max_tokens":9,"tools":[{"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"},{"name":"e","input_schema":{"type":"object"},"defer_loading":true}],` +
		`"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"server_tool_use","id":"s","name":"tool_search_tool_bm25","input":{"query":"e"}},` +
		`{"type":"tool_search_tool_result","tool_use_id":"s","content":{"type":"tool_search_tool_search_result","tool_references":[]}},{"type":"text","text":"ok"}]}]}`))
	// A message between Codex's agents.
	f.Add([]byte(`{"model":"m","input":[{"type":"agent_message","author":"/root","recipient":"/root/w","content":[{"type":"input_text","text":"go"}]}]}`))
	// Codex's tool search: the tool, a search and the tools it loaded.
	f.Add([]byte(`{"model":"m","input":[{"role":"user","content":"x"},{"type":"tool_search_call","call_id":"s","execution":"client","arguments":{"query":"q"}},` +
		`{"type":"tool_search_output","call_id":"s","execution":"client","tools":[{"type":"namespace","name":"n","tools":[{"type":"function","name":"g"}]},{"type":"function","name":"h"}]}],` +
		`"tools":[{"type":"tool_search","execution":"client","parameters":{"type":"object"}},{"type":"tool_search"},{"type":"function","name":"h","defer_loading":true}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		compaction := func(b []byte) (*llmapi.Request, error) {
			c, err := llmapi.DecodeCompactionRequest(b)
			if err != nil {
				return nil, err
			}
			// Its answer is a compaction object whose kept user messages
			// are within their bound.
			r := c.Renderer("resp_1", 1)
			for _, e := range []llmapi.Event{{Kind: llmapi.EvStart}, {Kind: llmapi.EvBlockStart, Block: llmapi.BlockText},
				{Kind: llmapi.EvDelta, Block: llmapi.BlockText, Text: "summary"}, {Kind: llmapi.EvStop, Reason: llmapi.StopEnd}} {
				r.Event(e)
			}
			status, out := r.Body()
			var got struct {
				Object string
				Output []json.RawMessage
			}
			if err := json.Unmarshal(out, &got); status != 200 || err != nil || got.Object != "response.compaction" || len(got.Output) == 0 {
				t.Fatalf("compaction answer %d %q (%v) of %q", status, out, err, b)
			}
			kept := 0
			for _, it := range got.Output[:len(got.Output)-1] {
				kept += llmapi.EstimateTokens(it)
			}
			if kept > llmapi.CompactionKeepTokens {
				t.Fatalf("%d estimated tokens of user messages kept, of %q", kept, b)
			}
			return c.Summarize, nil
		}
		for _, dec := range []func([]byte) (*llmapi.Request, error){
			llmapi.DecodeAnthropicRequest, llmapi.DecodeChatRequest, llmapi.DecodeResponsesRequest, compaction,
		} {
			req, err := dec(body)
			if err != nil {
				if req != nil {
					t.Fatal("request returned with an error")
				}
				continue
			}
			// What is sent to each API is JSON it takes, whatever the
			// client sent; or it is refused before it is sent.
			for _, c := range []struct {
				api   string
				enc   func(*llmapi.Request, string) ([]byte, error)
				check func([]byte) error
			}{
				{"Anthropic", llmapi.EncodeAnthropic, llmapitest.CheckAnthropicRequest},
				{"Anthropic with its prompt cache", func(r *llmapi.Request, m string) ([]byte, error) {
					return llmapi.EncodeAnthropicWith(r, m, llmapi.AnthropicModel{PromptCache: true})
				}, llmapitest.CheckAnthropicRequest},
				{"Chat Completions", llmapi.EncodeChat, llmapitest.CheckChatRequest},
				{"Responses", llmapi.EncodeResponses, llmapitest.CheckResponsesRequest},
			} {
				out, err := c.enc(req, "target")
				if err != nil {
					continue
				}
				if !json.Valid(out) {
					t.Fatalf("encoded %s request is not JSON: %q", c.api, out)
				}
				if err := c.check(out); err != nil {
					t.Fatalf("%s would refuse it: %v\n%s\nfrom %s", c.api, err, out, body)
				}
			}
			_, _, _ = llmapi.ToInput(req)
		}
		// Relayed untranslated, a Responses body stays JSON, and keeps
		// no reasoning item or compaction the gateway sealed.
		if out, err := llmapi.UnsealResponses(body); err == nil && json.Valid(body) {
			if !json.Valid(out) {
				t.Fatalf("unsealing made %q of %q", out, body)
			}
			if again, _ := llmapi.UnsealResponses(out); !bytes.Equal(again, out) {
				t.Fatalf("a sealed item is left in %q", out)
			}
		}
		// So does an Anthropic body without another provider's thinking.
		if out, err := llmapi.DropForeignThinking(body); err == nil && json.Valid(body) {
			if !json.Valid(out) {
				t.Fatalf("dropping foreign thinking made %q of %q", out, body)
			}
			if again, _ := llmapi.DropForeignThinking(out); !bytes.Equal(again, out) {
				t.Fatalf("foreign thinking is left in %q", out)
			}
		}
		// And one without Claude Code's billing header, which is left
		// out of nothing but the system prompt.
		if out, err := llmapi.DropBillingHeader(body); err == nil && json.Valid(body) {
			if !json.Valid(out) {
				t.Fatalf("dropping the billing header made %q of %q", out, body)
			}
			if again, _ := llmapi.DropBillingHeader(out); !bytes.Equal(again, out) {
				t.Fatalf("a billing header is left in %q", out)
			}
			if !bytes.Equal(out, body) && !bytes.Contains(body, []byte("x-anthropic-billing-header:")) {
				t.Fatalf("%q changed to %q without a billing header", body, out)
			}
		}
	})
}

// FuzzRunEvents drives RunEvents with any sequence of a run's events (as a
// Node may send them: starts repeated or missing, usage anywhere, a tool
// call's arguments not an object, no terminal) and holds what each
// renderer makes of it to the client format's grammar, as the Edge feeds
// it: up to the first terminal, and a completion when the run ends
// without one.
func FuzzRunEvents(f *testing.F) {
	f.Add([]byte("\x00m\x01hello\x02reason\x03{\"a\":1}\x04\x05"))
	f.Add([]byte("\x01a\x03[1]\x01b\x05"))
	f.Add([]byte("\x03\x03{}\x06"))
	f.Add([]byte("\x02r\x01t\x02r\x04"))
	f.Fuzz(func(t *testing.T, b []byte) {
		// Each event is an opcode and, up to the next opcode byte (< 8),
		// its text.
		var evs []execution.Event
		for len(b) > 0 && len(evs) < 64 {
			op := b[0] % 8
			b = b[1:]
			n := 0
			for n < len(b) && b[n] >= 8 {
				n++
			}
			// A run's text comes off the wire, in protobuf strings: UTF-8.
			text := strings.ToValidUTF8(string(b[:n]), "\uFFFD")
			b = b[n:]
			switch op {
			case 0:
				evs = append(evs, execution.Event{Kind: execution.EventStarted, Model: text})
			case 1:
				evs = append(evs, execution.Event{Kind: execution.EventDelta, Text: text})
			case 2:
				evs = append(evs, execution.Event{Kind: execution.EventDelta, Text: text, Reasoning: true})
			case 3:
				name := "f"
				if len(text)%3 == 0 {
					name = "" // a nameless call
				}
				evs = append(evs, execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{Name: name, Arguments: text}})
			case 4:
				evs = append(evs, execution.Event{Kind: execution.EventUsage, Usage: &execution.Usage{InputTokens: int64(len(text)), OutputTokens: 1}})
			case 5:
				evs = append(evs, execution.Event{Kind: execution.EventCompleted, StopReason: text})
			case 6:
				evs = append(evs, execution.Event{Kind: execution.EventFailed, Failure: &execution.Failure{Class: execution.FailureProvider, Message: text}})
			default:
				evs = append(evs, execution.Event{Kind: execution.EventCompleted, StopReason: "tool_calls"})
			}
		}
		evs = append(evs, execution.Event{Kind: execution.EventCompleted, StopReason: "stop"})
		// Each format's stream, from a renderer that keeps no text (as
		// the Edge streams), beside a renderer that keeps it (as the Edge
		// answers whole): the same events, and its whole answer the one
		// the stream makes.
		for _, tw := range [][2]llmapi.Renderer{
			{&llmapi.AnthropicRenderer{ID: "msg_1", Model: "m", Streamed: true}, &llmapi.AnthropicRenderer{ID: "msg_1", Model: "m"}},
			{&llmapi.ChatRenderer{ID: "c_1", Model: "m", IncludeUsage: true, Streamed: true}, &llmapi.ChatRenderer{ID: "c_1", Model: "m", IncludeUsage: true}},
			{&llmapi.ResponsesRenderer{ID: "resp_1", Model: "m"}, &llmapi.ResponsesRenderer{ID: "resp_1", Model: "m"}},
		} {
			var conv llmapi.RunEvents
			var stream, kept []byte
		run:
			for _, e := range evs {
				for _, c := range conv.Convert(e) {
					stream = append(stream, tw[0].Event(c)...)
					kept = append(kept, tw[1].Event(c)...)
					if c.Kind == llmapi.EvStop || c.Kind == llmapi.EvError {
						break run
					}
				}
			}
			checkGrammar(t, tw[0], stream)
			if !bytes.Equal(stream, kept) {
				t.Fatalf("a Streamed renderer wrote other events:\n%s\nfor\n%s", stream, kept)
			}
			_, body := tw[1].Body()
			if !json.Valid(body) {
				t.Fatalf("buffered answer is not JSON: %q", body)
			}
			checkAgree(t, tw[1], kept, body)
		}
	})
}
