package edge_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	anadapter "github.com/iop-dev/iop/execution/adapters/anthropic"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/llmapi/llmapitest"
	"github.com/iop-dev/iop/internal/sse"
	"github.com/iop-dev/iop/node"
)

// toolScript answers with text, two parallel tool calls and usage, in
// whatever format the upstream is asked in.
func toolScript(*upstreamtest.Request) upstreamtest.Script {
	return upstreamtest.Script{
		Text:      []string{"Checking ", "both."},
		ToolCalls: []upstreamtest.ToolCall{{ID: "call_a", Name: "weather", Arguments: `{"city":"Paris"}`}, {ID: "call_b", Name: "weather", Arguments: `{"city":"Seoul"}`}},
		Usage:     upstreamtest.Usage{InputTokens: 40, OutputTokens: 12},
	}
}

var weatherTool = map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}

// TestEveryClientFormatAgainstEveryUpstreamFormat sends each client format
// (Chat Completions, Responses, Anthropic Messages; buffered and streamed)
// through the Edge to upstreams speaking Chat Completions and Responses
// (gpt-local: relayed untranslated where the format matches), only
// Anthropic Messages, only Responses and only Chat Completions, and checks
// every answer with the official client SDKs.
func TestEveryClientFormatAgainstEveryUpstreamFormat(t *testing.T) {
	r := newRig(t, rigOpts{reply: toolScript})
	ac := anthropic.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey(apiKey), aoption.WithMaxRetries(0))
	wantCalls := [][2]string{{"call_a", `{"city":"Paris"}`}, {"call_b", `{"city":"Seoul"}`}}

	for _, model := range []string{"gpt-local", "via-anthropic", "via-responses", "via-chat"} {
		t.Run("messages/"+model, func(t *testing.T) {
			params := anthropic.MessageNewParams{
				Model: anthropic.Model(model), MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather in Paris and Seoul?"))},
				Tools:    []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "weather", InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherTool["properties"]}}}},
			}
			check := func(t *testing.T, m *anthropic.Message) {
				t.Helper()
				if m.StopReason != "tool_use" || len(m.Content) != 3 || m.Content[0].Text != "Checking both." {
					t.Fatalf("message %+v", m)
				}
				for i, w := range wantCalls {
					if b := m.Content[i+1]; b.ID != w[0] || string(b.Input) != w[1] {
						t.Errorf("tool_use %d: %s %s", i, b.ID, b.Input)
					}
				}
				if m.Usage.OutputTokens != 12 || m.Usage.InputTokens+m.Usage.CacheReadInputTokens != 40 {
					t.Errorf("usage %+v", m.Usage)
				}
			}
			m, err := ac.Messages.New(ctx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			check(t, m)
			stream := ac.Messages.NewStreaming(ctx(t), params)
			acc := anthropic.Message{}
			for stream.Next() {
				if err := acc.Accumulate(stream.Current()); err != nil {
					t.Fatal(err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			check(t, &acc)
		})
		t.Run("chat/"+model, func(t *testing.T) {
			params := openai.ChatCompletionNewParams{Model: model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
				Tools:    []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{Name: "weather", Parameters: weatherTool})},
			}
			check := func(t *testing.T, msg openai.ChatCompletionMessage, finish string) {
				t.Helper()
				if msg.Content != "Checking both." || finish != "tool_calls" || len(msg.ToolCalls) != 2 {
					t.Fatalf("content %q finish %q calls %d", msg.Content, finish, len(msg.ToolCalls))
				}
				for i, w := range wantCalls {
					if tc := msg.ToolCalls[i]; tc.ID != w[0] || tc.Function.Arguments != w[1] {
						t.Errorf("tool call %d: %s %s", i, tc.ID, tc.Function.Arguments)
					}
				}
			}
			c, err := r.client.Chat.Completions.New(ctx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			check(t, c.Choices[0].Message, c.Choices[0].FinishReason)
			if c.Usage.PromptTokens != 40 || c.Usage.CompletionTokens != 12 {
				t.Errorf("usage %+v", c.Usage)
			}
			params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			s := r.client.Chat.Completions.NewStreaming(ctx(t), params)
			acc := openai.ChatCompletionAccumulator{}
			for s.Next() {
				acc.AddChunk(s.Current())
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			check(t, acc.Choices[0].Message, acc.Choices[0].FinishReason)
			if acc.Usage.CompletionTokens != 12 {
				t.Errorf("streamed usage %+v", acc.Usage)
			}
		})
		t.Run("responses/"+model, func(t *testing.T) {
			params := responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")},
				Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "weather", Parameters: weatherTool}}}}
			check := func(t *testing.T, resp *responses.Response) {
				t.Helper()
				if resp.OutputText() != "Checking both." {
					t.Fatalf("output text %q", resp.OutputText())
				}
				var calls [][2]string
				for _, it := range resp.Output {
					if it.Type == "function_call" {
						calls = append(calls, [2]string{it.CallID, it.Arguments.OfString})
					}
				}
				if len(calls) != 2 || calls[0] != wantCalls[0] || calls[1] != wantCalls[1] {
					t.Errorf("function calls %v", calls)
				}
				if resp.Usage.OutputTokens != 12 {
					t.Errorf("usage %+v", resp.Usage)
				}
			}
			resp, err := r.client.Responses.New(ctx(t), params)
			if err != nil {
				t.Fatal(err)
			}
			check(t, resp)
			check(t, r.streamResponses(t, params, nil))
		})
	}
	// Which way each went: same-format pairs were relayed untranslated.
	seen := map[string]int{}
	for _, q := range r.calls() {
		seen[q.API]++
	}
	// gpt-local: Chat and Messages clients as chat (4), Responses clients
	// as responses (2); via-anthropic: all six as messages; via-responses:
	// all six as responses; via-chat: all six as chat.
	if seen["chat"] != 10 || seen["responses"] != 8 || seen["messages"] != 6 {
		t.Errorf("upstream calls by API: %v, want chat 10, responses 8, messages 6", seen)
	}
	r.settled()
}

func TestAnthropicErrorsAndCountTokens(t *testing.T) {
	r := newRig(t, rigOpts{capacity: 1})
	status, body, h := r.postAnthropic(t, "/v1/messages", "wrong", `{"model":"via-anthropic","max_tokens":5,"messages":[]}`)
	if status != 401 || !strings.Contains(body, `"type":"authentication_error"`) || !strings.Contains(body, `"type":"error"`) {
		t.Fatalf("401: %d %s", status, body)
	}
	// Anthropic's SDKs read the request id from request-id and show the
	// body's request_id in their errors.
	if rid := h.Get("Request-Id"); rid == "" || rid != h.Get("X-Request-Id") || !strings.Contains(body, `"request_id":"`+rid+`"`) {
		t.Fatalf("401 without its request id: %v %s", h, body)
	}
	status, body, _ = r.postAnthropic(t, "/v1/messages", apiKey, `{"model":"nope","max_tokens":5,"messages":[]}`)
	if status != 404 || !strings.Contains(body, "not_found_error") {
		t.Fatalf("404: %d %s", status, body)
	}
	// Overload in Anthropic's terms: 529 overloaded_error.
	gen, _ := r.srv.Registry().Current("box")
	r.srv.Registry().Disconnect("box", gen, "test")
	status, body, h0 := r.postAnthropic(t, "/v1/messages", apiKey, `{"model":"via-anthropic","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`)
	if status != 529 || !strings.Contains(body, "overloaded_error") || h0.Get("Retry-After") == "" {
		t.Fatalf("overloaded: %d %s", status, body)
	}
	for {
		if _, ok := r.srv.Registry().Current("box"); ok {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Passed through to an Anthropic provider.
	status, body, h = r.postAnthropic(t, "/v1/messages/count_tokens", apiKey, `{"model":"via-anthropic","messages":[{"role":"user","content":"hello"}]}`)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	json.Unmarshal([]byte(body), &ct)
	if status != 200 || ct.InputTokens == 0 || h.Get("X-IOP-Token-Count") != "" {
		t.Fatalf("count_tokens passed through: %d %s %v", status, body, h)
	}
	// Its Anthropic headers go with it: a beta changes what a request may
	// hold, so its count too. One that cannot travel is refused.
	for _, c := range []struct {
		beta   string
		status int
	}{{"token-counting-2024-11-01", 200}, {"caf\xe9", 400}} {
		asked := len(r.upstream.Requests())
		resp, out := r.do(t, "POST", "/v1/messages/count_tokens", `{"model":"via-anthropic","messages":[{"role":"user","content":"hello"}]}`,
			map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01", "anthropic-beta": c.beta})
		calls := r.upstream.Requests()[asked:]
		passed := len(calls) == 1 && calls[0].Header.Get("Anthropic-Beta") == c.beta && calls[0].Header.Get("Anthropic-Version") == "2023-06-01"
		if resp.StatusCode != c.status || passed != (c.status == 200) || c.status == 400 && (len(calls) != 0 || !strings.Contains(out, "Anthropic-Beta")) {
			t.Fatalf("count_tokens with beta %q: %d %s; the provider was asked %d times", c.beta, resp.StatusCode, out, len(calls))
		}
	}
	// No Anthropic provider behind the route: the Edge's documented estimate.
	status, body, h = r.postAnthropic(t, "/v1/messages/count_tokens", apiKey, `{"model":"gpt-local","messages":[{"role":"user","content":"hello"}]}`)
	if status != 200 || h.Get("X-IOP-Token-Count") != "estimate" {
		t.Fatalf("count_tokens estimate: %d %s %v", status, body, h)
	}
}

// Stateful Responses features pass through to the provider that holds the
// state when no translation is needed, and are refused with a clear 400
// when they would be.
func TestStatefulResponses(t *testing.T) {
	r := newRig(t, rigOpts{})
	params := responses.ResponseNewParams{Model: "gpt-local", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}}
	first, err := r.client.Responses.New(ctx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	// A streamed response is remembered from its response.created event.
	s := r.client.Responses.NewStreaming(ctx(t), params)
	streamedID := ""
	for s.Next() {
		if ev := s.Current(); ev.Type == "response.created" {
			streamedID = ev.Response.ID
		}
	}
	if err := s.Err(); err != nil || streamedID == "" {
		t.Fatalf("stream: %v, id %q", err, streamedID)
	}
	for _, id := range []string{first.ID, streamedID} {
		got, err := r.client.Responses.Get(ctx(t), id, responses.ResponseGetParams{})
		if err != nil {
			t.Fatalf("GET %s: %v", id, err)
		}
		if got.ID != id || got.OutputText() == "" {
			t.Fatalf("GET %s: %+v", id, got)
		}
	}
	status := func(key, id string) int {
		req, _ := http.NewRequest("GET", r.url+"/v1/responses/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Another key cannot read it, nor learn that it exists.
	if got := status(apiKey+"-bob", first.ID); got != 404 {
		t.Fatalf("another key read a response: %d", got)
	}
	if got := status(apiKey, "resp_unknown"); got != 404 {
		t.Fatalf("unknown id: %d", got)
	}

	// previous_response_id: passed through when untranslated...
	params.PreviousResponseID = openai.String(first.ID)
	if _, err := r.client.Responses.New(ctx(t), params); err != nil {
		t.Fatalf("previous_response_id, untranslated: %v", err)
	}
	// ...and a clear 400 where it cannot be: on another route, for another
	// key, for an id this Edge never saw.
	refused := func(what string, c openai.Client, p responses.ResponseNewParams) {
		t.Helper()
		_, err := c.Responses.New(ctx(t), p)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "previous_response_id") {
			t.Fatalf("previous_response_id %s: %v", what, err)
		}
	}
	other := params
	other.Model = "via-anthropic"
	refused("on a translated route", r.client, other)
	bob := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(apiKey+"-bob"), option.WithMaxRetries(0))
	other.Model = "via-anthropic"
	refused("of another key", bob, other)
	unknown := params
	unknown.PreviousResponseID = openai.String("resp_never_seen")
	refused("unknown", r.client, unknown)
	gets := 0
	for _, q := range r.calls() {
		if q.API == "get_response" {
			gets++
		}
	}
	if gets != 2 {
		t.Errorf("GETs reaching the provider: %d, want 2 (refused ones never leave the Edge)", gets)
	}
	r.settled()
}

// TestTranslatedAnthropicErrorsCarryTheRequestID: an Anthropic client
// served by a provider of another format gets its error, whole or
// mid-stream, with the request's id as request_id, as the Edge's own
// errors carry it.
func TestTranslatedAnthropicErrorsCarryTheRequestID(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if q.Stream {
			return upstreamtest.Script{Text: []string{"a", "b", "c"}, ErrorAfter: 1}
		}
		return upstreamtest.Script{Status: 500}
	}})
	for _, stream := range []bool{false, true} {
		status, b, h := r.postAnthropic(t, "/v1/messages", apiKey,
			fmt.Sprintf(`{"model":"gpt-local","max_tokens":50,"stream":%t,"messages":[{"role":"user","content":"x"}]}`, stream))
		rid := h.Get("Request-Id")
		if rid == "" || !strings.Contains(b, `"type":"error"`) || !strings.Contains(b, `"request_id":"`+rid+`"`) {
			t.Fatalf("stream %t: %d %v\n%s", stream, status, h, b)
		}
	}
	r.settled()
}

// TestTranslatedRefusalsCarryRetryAfter: a provider's refusal that a
// retry may get past (rate limited, overloaded) reaches a client of
// another format with the status its SDK retries on and a Retry-After:
// the provider's own delay, bounded, or one second.
func TestTranslatedRefusalsCarryRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		name, path, model string
		upStatus          int
		upRetry           string
		status            int
		retry             string
	}{
		{"chat to anthropic, rate limited", "/v1/chat/completions", "via-anthropic", 429, "7", 429, "7"},
		{"chat to anthropic, overloaded", "/v1/chat/completions", "via-anthropic", 529, "", 503, "1"},
		{"anthropic to chat, unavailable", "/v1/messages", "gpt-local", 503, "30", 529, "30"},
		{"a delay beyond the bound", "/v1/chat/completions", "via-anthropic", 429, "999999", 429, "3600"},
		{"a date is not read", "/v1/chat/completions", "via-anthropic", 503, "Wed, 21 Oct 2015 07:28:00 GMT", 503, "1"},
		{"a server error is not retried", "/v1/chat/completions", "via-anthropic", 500, "5", 502, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{reply: func(*upstreamtest.Request) upstreamtest.Script {
				return upstreamtest.Script{Status: tc.upStatus, RetryAfter: tc.upRetry}
			}})
			resp, body := r.do(t, "POST", tc.path, `{"model":"`+tc.model+`","max_tokens":50,"messages":[{"role":"user","content":"x"}]}`,
				map[string]string{"Authorization": "Bearer " + apiKey, "x-api-key": apiKey, "anthropic-version": "2023-06-01"})
			if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.retry {
				t.Fatalf("%d Retry-After %q, want %d %q\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), tc.status, tc.retry, body)
			}
			r.settled()
		})
	}
}

// TestTranslatedAnswerOfTheOtherKind: a provider that ignores the stream
// flag (an event stream for a whole answer, a whole answer for a stream)
// is decoded as what it sent and rendered as what the client asked for,
// usage booked; before, either was a 502 or a broken stream.
func TestTranslatedAnswerOfTheOtherKind(t *testing.T) {
	anthropicSSE := "event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"up-model","usage":{"input_tokens":11,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi there"}}` + "\n\n" +
		"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
		"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}` + "\n\n" +
		"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"
	anthropicJSON := `{"id":"msg_1","type":"message","role":"assistant","model":"up-model","content":[{"type":"text","text":"hi there"}],"stop_reason":"end_turn","usage":{"input_tokens":11,"output_tokens":5}}`
	chatSSE := `data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"hi there"}}]}` + "\n\n" +
		`data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"c1","object":"chat.completion.chunk","model":"up-model","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":5,"total_tokens":16}}` + "\n\n" +
		"data: [DONE]\n\n"
	for _, tc := range []struct {
		name, path, model, raw string
		stream                 bool
		want                   string // in the client's answer
	}{
		{"whole chat answer from an anthropic stream", "/v1/chat/completions", "via-anthropic", anthropicSSE, false, `"content":"hi there"`},
		{"chat stream from a whole anthropic answer", "/v1/chat/completions", "via-anthropic", anthropicJSON, true, `"content":"hi there"`},
		{"whole messages answer from a chat stream", "/v1/messages", "gpt-local", chatSSE, false, `"text":"hi there"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{reply: func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: tc.raw} }})
			resp, body := r.do(t, "POST", tc.path, fmt.Sprintf(`{"model":%q,"max_tokens":50,"stream":%t,"messages":[{"role":"user","content":"x"}]}`, tc.model, tc.stream),
				map[string]string{"Authorization": "Bearer " + apiKey, "x-api-key": apiKey, "anthropic-version": "2023-06-01"})
			ct := resp.Header.Get("Content-Type")
			if resp.StatusCode != 200 || !strings.Contains(body, tc.want) || strings.HasPrefix(ct, "text/event-stream") != tc.stream {
				t.Fatalf("%d %s:\n%s", resp.StatusCode, ct, body)
			}
			if tc.stream && (!strings.Contains(body, "[DONE]") || strings.Contains(body, `"error"`)) {
				t.Fatalf("stream without its end:\n%s", body)
			}
			r.settled()
			if u := r.usageOf("alice"); u.InputTokens != 11 || u.OutputTokens != 5 {
				t.Fatalf("usage %+v", u)
			}
		})
	}
}

// upstreamCarriesFreeform checks the last upstream call, which must be
// an Anthropic Messages request carrying the freeform tool apply_patch
// (lark grammar "start: patch") as one function tool whose one string
// parameter describes the grammar; with history, also the turn before it:
// the call as a tool_use whose input holds patch, then its tool_result.
func (r *rig) upstreamCarriesFreeform(t *testing.T, patch string, history bool) {
	t.Helper()
	calls := r.calls()
	last := calls[len(calls)-1]
	var up struct {
		Tools []struct {
			InputSchema struct {
				Properties map[string]struct{ Type, Description string }
			} `json:"input_schema"`
		}
		Messages []struct{ Content []map[string]any }
	}
	if err := json.Unmarshal(last.Body, &up); err != nil || last.API != "messages" || len(up.Tools) != 1 {
		t.Fatalf("upstream request %s %s: %v", last.API, last.Body, err)
	}
	if in := up.Tools[0].InputSchema.Properties["input"]; in.Type != "string" || !strings.Contains(in.Description, "lark grammar:\nstart: patch") {
		t.Errorf("upstream tool %+v", up.Tools[0])
	}
	if !history {
		return
	}
	if len(up.Messages) != 3 || up.Messages[1].Content[0]["type"] != "tool_use" || up.Messages[2].Content[0]["type"] != "tool_result" {
		t.Fatalf("history upstream: %s", last.Body)
	}
	if in, _ := up.Messages[1].Content[0]["input"].(map[string]any); in["input"] != patch {
		t.Errorf("the call upstream: %v", up.Messages[1].Content[0])
	}
}

// TestChatCustomToolThroughTranslation: a Chat Completions client's
// custom tool reaches an Anthropic upstream as a function with one string
// parameter, and the model's call of it comes back as a custom tool call,
// whole (read through the official SDK) and streamed; the next turn sends
// the call and its output back as the upstream's tool_use and
// tool_result.
func TestChatCustomToolThroughTranslation(t *testing.T) {
	const patch = "*** Begin Patch\n*** Add File: a.txt\n+\"hi\"\n*** End Patch"
	args, _ := json.Marshal(map[string]string{"input": patch})
	r := newRig(t, rigOpts{reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{ToolCalls: []upstreamtest.ToolCall{{ID: "call_p", Name: "apply_patch", Arguments: string(args)}}}
	}})
	tool := openai.ChatCompletionCustomTool(openai.ChatCompletionCustomToolCustomParam{Name: "apply_patch", Description: openai.String("Edit files."),
		Format: openai.ChatCompletionCustomToolCustomFormatUnionParam{OfGrammar: &openai.ChatCompletionCustomToolCustomFormatGrammarParam{
			Grammar: openai.ChatCompletionCustomToolCustomFormatGrammarGrammarParam{Syntax: "lark", Definition: "start: patch"}}}})
	params := chatParams("via-anthropic", "add a.txt")
	params.Tools = []openai.ChatCompletionToolUnionParam{tool}
	resp, err := r.client.Chat.Completions.New(ctx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	if calls := resp.Choices[0].Message.ToolCalls; len(calls) != 1 || calls[0].Type != "custom" ||
		calls[0].AsCustom().ID != "call_p" || calls[0].AsCustom().Custom.Name != "apply_patch" || calls[0].AsCustom().Custom.Input != patch {
		t.Fatalf("calls %+v", resp.Choices[0].Message.ToolCalls)
	}

	// Streamed (the SDK has no type for a custom call's delta: read raw).
	body, _ := json.Marshal(map[string]any{"model": "via-anthropic", "stream": true, "messages": []any{map[string]any{"role": "user", "content": "add a.txt"}},
		"tools": []any{map[string]any{"type": "custom", "custom": map[string]any{"name": "apply_patch"}}}})
	_, stream := r.do(t, "POST", "/v1/chat/completions", string(body), map[string]string{"Authorization": "Bearer " + apiKey})
	input, name := "", ""
	for _, line := range strings.Split(stream, "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					ToolCalls []struct {
						Type     string
						Function json.RawMessage
						Custom   struct{ Name, Input string }
					} `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		for _, ch := range c.Choices {
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Function != nil {
					t.Fatalf("a function delta for a custom tool: %s", data)
				}
				name += tc.Custom.Name
				input += tc.Custom.Input
			}
		}
	}
	if name != "apply_patch" || input != patch || !strings.Contains(stream, `"finish_reason":"tool_calls"`) {
		t.Fatalf("streamed call %q %q:\n%s", name, input, stream)
	}

	// The upstream, asked in Anthropic Messages, got a function tool; the
	// next turn carries the call and its output back.
	params.Messages = append(params.Messages, resp.Choices[0].Message.ToParam(), openai.ToolMessage("Done!", "call_p"))
	if _, err := r.client.Chat.Completions.New(ctx(t), params); err != nil {
		t.Fatal(err)
	}
	r.upstreamCarriesFreeform(t, patch, true)
	r.settled()
}

// TestJSONOutputThroughTranslation: a Chat Completions client's JSON
// output format reaches each upstream in that upstream's own field, and
// what a translation cannot carry is refused with a 400 that names it,
// with nothing sent upstream; the untranslated path forwards it as sent.
func TestJSONOutputThroughTranslation(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		// Ordered routes whose first provider cannot carry what the
		// requests below ask for, and whose second can.
		c.Routes = append(c.Routes,
			edge.Route{Model: "anthropic-then-responses", Targets: []edge.Target{{ProviderID: "claude", Model: "up-model"}, {ProviderID: "resp-only", Model: "up-model"}}},
			edge.Route{Model: "responses-then-anthropic", Targets: []edge.Target{{ProviderID: "resp-only", Model: "up-model"}, {ProviderID: "claude", Model: "up-model"}}})
	}})
	schema := map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}}
	format := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &openai.ResponseFormatJSONSchemaParam{
		JSONSchema: openai.ResponseFormatJSONSchemaJSONSchemaParam{Name: "thing", Schema: schema, Strict: openai.Bool(true)},
	}}
	upstreamField := map[string][]string{ // where each upstream's body holds the schema
		"gpt-local":     {"response_format", "json_schema", "schema"},
		"via-anthropic": {"output_config", "format", "schema"},
		"via-responses": {"text", "format", "schema"},
	}
	for model, path := range upstreamField {
		before := len(r.calls())
		_, err := r.client.Chat.Completions.New(ctx(t), openai.ChatCompletionNewParams{
			Model: model, ResponseFormat: format,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
		})
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		calls := r.calls()
		if len(calls) != before+1 {
			t.Fatalf("%s: %d upstream calls, want 1", model, len(calls)-before)
		}
		var got any
		json.Unmarshal(calls[len(calls)-1].Body, &got)
		for _, k := range path {
			m, _ := got.(map[string]any)
			got = m[k]
		}
		if fmt.Sprint(got) != fmt.Sprint(schema) {
			t.Errorf("%s: upstream got schema %v in %s", model, got, calls[len(calls)-1].Body)
		}
	}

	before := len(r.calls())
	var apiErr *openai.Error
	for _, c := range []struct {
		model string
		p     openai.ChatCompletionNewParams
		want  string
	}{
		{"via-anthropic", openai.ChatCompletionNewParams{N: openai.Int(2)}, "n > 1"},
		{"via-responses", openai.ChatCompletionNewParams{Logprobs: openai.Bool(true)}, "logprobs"},
		{"via-anthropic", openai.ChatCompletionNewParams{ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}}}, "JSON mode without a schema"},
	} {
		c.p.Model, c.p.Messages = c.model, []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}
		_, err := r.client.Chat.Completions.New(ctx(t), c.p)
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, c.want) {
			t.Errorf("%s with %s: %v, want 400 naming it", c.model, c.want, err)
		}
	}
	if n := len(r.calls()) - before; n != 0 {
		t.Fatalf("%d refused requests reached the upstream", n)
	}
	// A route's provider that cannot carry the request is no candidate:
	// another of its providers that can serves it, every time.
	jsonMode := openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &openai.ResponseFormatJSONObjectParam{}}
	for _, c := range []struct {
		model, api string
		p          openai.ChatCompletionNewParams
	}{
		{"anthropic-then-responses", "responses", openai.ChatCompletionNewParams{ResponseFormat: jsonMode}},
		{"responses-then-anthropic", "messages", openai.ChatCompletionNewParams{Stop: openai.ChatCompletionNewParamsStopUnion{OfString: openai.String("END")}}},
	} {
		for range 3 {
			before := len(r.calls())
			c.p.Model, c.p.Messages = c.model, []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}
			if _, err := r.client.Chat.Completions.New(ctx(t), c.p); err != nil {
				t.Fatalf("%s: %v", c.model, err)
			}
			if calls := r.calls(); len(calls) != before+1 || calls[len(calls)-1].API != c.api {
				t.Fatalf("%s: served by %q, want %q", c.model, calls[len(calls)-1].API, c.api)
			}
		}
	}
	// Untranslated, the upstream answers n itself.
	if _, err := r.client.Chat.Completions.New(ctx(t), openai.ChatCompletionNewParams{
		Model: "gpt-local", N: openai.Int(2), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
	}); err != nil {
		t.Fatalf("n=2 untranslated: %v", err)
	}
	r.settled()
}

// TestModelFieldsThroughTranslation: an Anthropic client's max_tokens
// (the Messages API requires one) and thinking budget (Claude Code with
// extended thinking) reach each model of one route behind a provider of
// Chat Completions and Responses in the fields that model takes: an
// OpenAI reasoning model is spoken to in Responses (max_output_tokens,
// and its reasoning's state asked for), the others in Chat Completions
// with max_tokens; GPT-4o gets no reasoning_effort, which it refuses,
// the others get one. Each class of target has its own encoding. A
// target whose name does not tell (an Azure deployment) is given its
// class (Target.ModelClass), which also overrides a name that does.
func TestModelFieldsThroughTranslation(t *testing.T) {
	models := []string{"up-model", "gpt-5-mini", "gpt-4o", "prod-reasoner", "prod-chat", "gpt-5-named-other"}
	classes := map[string]string{"prod-reasoner": edge.ModelOpenAIReasoning, "prod-chat": edge.ModelOpenAIChat, "gpt-5-named-other": edge.ModelOther}
	r := newRig(t, rigOpts{nodeModels: models, mutate: func(c *edge.Config) {
		allowModels(c, "local", models)
		var targets []edge.Target
		for _, m := range models {
			targets = append(targets, edge.Target{ProviderID: "local", Model: m, Weight: 1, ModelClass: classes[m]})
		}
		c.Routes = append(c.Routes, edge.Route{Model: "mixed", Strategy: edge.Weighted, Targets: targets})
	}})
	ac := anthropic.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey(apiKey), aoption.WithMaxRetries(0))
	r.eachTargetServes(t, models, func() {
		if _, err := ac.Messages.New(ctx(t), anthropic.MessageNewParams{Model: "mixed", MaxTokens: 9000,
			Thinking: anthropic.ThinkingConfigParamOfEnabled(8000),
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}}); err != nil {
			t.Fatal(err)
		}
	}, func(q *upstreamtest.Request, body map[string]any) {
		if q.Model == "gpt-5-mini" || q.Model == "prod-reasoner" {
			// OpenAI's reasoning models are spoken to in Responses, which
			// carries their reasoning from turn to turn.
			reasoning, _ := body["reasoning"].(map[string]any)
			if q.API != "responses" || body["max_output_tokens"] != float64(9000) || reasoning["effort"] != "medium" ||
				fmt.Sprint(body["include"]) != "[reasoning.encrypted_content]" {
				t.Fatalf("%s got %s %s", q.Model, q.API, q.Body)
			}
			return
		}
		limit, other, effort := "max_tokens", "max_completion_tokens", any("medium")
		if q.Model == "gpt-4o" || q.Model == "prod-chat" {
			effort = nil
		}
		if q.API != "chat" || body[limit] != float64(9000) || body[other] != nil || body["reasoning_effort"] != effort {
			t.Fatalf("%s got %s", q.Model, q.Body)
		}
	})
	r.settled()
}

// eachTargetServes sends a request with ask until each of targets (the
// upstream models of a weighted route's targets) has served one, at most
// 200 times, and hands check each request the upstream was sent, with
// its decoded body.
func (r *rig) eachTargetServes(t *testing.T, targets []string, ask func(), check func(q *upstreamtest.Request, body map[string]any)) {
	t.Helper()
	seen := map[string]bool{}
	for i := 0; i < 200 && len(seen) < len(targets); i++ {
		before := len(r.calls())
		ask()
		calls := r.calls()
		if len(calls) != before+1 {
			t.Fatalf("%d upstream calls", len(calls)-before)
		}
		q := calls[before]
		var body map[string]any
		if err := json.Unmarshal(q.Body, &body); err != nil {
			t.Fatalf("%s was sent %s: %v", q.Model, q.Body, err)
		}
		check(q, body)
		seen[q.Model] = true
	}
	if len(seen) != len(targets) {
		t.Fatalf("served by %v; want each of %q", seen, targets)
	}
}

// allowModels gives provider id of c's Node the models.
func allowModels(c *edge.Config, id string, models []string) {
	for j := range c.Nodes[0].Providers {
		if p := &c.Nodes[0].Providers[j]; p.ID == id {
			p.Models = models
		}
	}
}

// TestDocumentThroughTranslation: a PDF an Anthropic client sends (Claude
// Code reading one) reaches a Chat Completions upstream as a file part and
// a Responses upstream as an input_file, through the Edge and the Node.
func TestDocumentThroughTranslation(t *testing.T) {
	r := newRig(t, rigOpts{})
	ac := anthropic.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey(apiKey), aoption.WithMaxRetries(0))
	doc := anthropic.NewDocumentBlock(anthropic.Base64PDFSourceParam{Data: "JVBERi0xLjQK"})
	for model, want := range map[string]string{
		"via-chat":      `{"file":{"file_data":"data:application/pdf;base64,JVBERi0xLjQK","filename":"document"},"type":"file"}`,
		"via-responses": `{"file_data":"data:application/pdf;base64,JVBERi0xLjQK","filename":"document","type":"input_file"}`,
	} {
		before := len(r.calls())
		if _, err := ac.Messages.New(ctx(t), anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 64,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(doc, anthropic.NewTextBlock("sum up"))}}); err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		calls := r.calls()
		if len(calls) != before+1 || !strings.Contains(string(calls[len(calls)-1].Body), want) {
			t.Fatalf("%s: upstream got %s, want %s in it", model, calls[len(calls)-1].Body, want)
		}
	}
	r.settled()
}

// TestFreeformToolThroughTranslation: Codex's apply_patch, a Responses
// custom tool, works against a model reached in another format: the
// provider gets a function with one string parameter, and the client, with
// the official SDK, gets a custom_tool_call whose input is the patch,
// buffered and streamed; the call and its output, sent back as history,
// reach the provider as a tool call and its result.
func TestFreeformToolThroughTranslation(t *testing.T) {
	const patch = "*** Begin Patch\n*** Add File: a.txt\n+\"hi\"\n*** End Patch"
	args, _ := json.Marshal(map[string]string{"input": patch})
	r := newRig(t, rigOpts{reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{ToolCalls: []upstreamtest.ToolCall{{ID: "call_p", Name: "apply_patch", Arguments: string(args)}}}
	}})
	tool := responses.ToolUnionParam{OfCustom: &responses.CustomToolParam{Name: "apply_patch", Description: openai.String("Edit files."),
		Format: shared.CustomToolInputFormatUnionParam{OfGrammar: &shared.CustomToolInputFormatGrammarParam{Syntax: "lark", Definition: "start: patch"}}}}
	params := responses.ResponseNewParams{Model: "via-anthropic", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("add a.txt")},
		Tools: []responses.ToolUnionParam{tool}}
	check := func(t *testing.T, resp *responses.Response) {
		t.Helper()
		if len(resp.Output) != 1 {
			t.Fatalf("output %+v", resp.Output)
		}
		if c := resp.Output[0].AsCustomToolCall(); c.Type != "custom_tool_call" || c.CallID != "call_p" || c.Name != "apply_patch" || c.Input != patch {
			t.Fatalf("call %+v", c)
		}
	}
	resp, err := r.client.Responses.New(ctx(t), params)
	if err != nil {
		t.Fatal(err)
	}
	check(t, resp)
	var input string
	final := r.streamResponses(t, params, func(ev responses.ResponseStreamEventUnion) {
		if ev.Type == "response.custom_tool_call_input.delta" {
			input += ev.Delta
		}
	})
	if input != patch {
		t.Fatalf("streamed input %q", input)
	}
	check(t, final)

	// The upstream, asked in Anthropic Messages, got a function tool.
	r.upstreamCarriesFreeform(t, patch, false)

	// The next turn sends the call and its output back.
	params.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("add a.txt", responses.EasyInputMessageRoleUser),
		{OfCustomToolCall: &responses.ResponseCustomToolCallParam{CallID: "call_p", Name: "apply_patch", Input: patch}},
		{OfCustomToolCallOutput: &responses.ResponseCustomToolCallOutputParam{CallID: "call_p", Output: responses.ResponseCustomToolCallOutputOutputUnionParam{OfString: openai.String("Done!")}}},
	}}
	if _, err := r.client.Responses.New(ctx(t), params); err != nil {
		t.Fatal(err)
	}
	r.upstreamCarriesFreeform(t, patch, true)
	r.settled()
}

// TestStreamGrammarEveryPath holds every streamed answer a client can get,
// each client format from each upstream format (relayed untranslated where
// they match, translated otherwise) and from a command-line run, with text
// alone and with text and two tool calls, to the client format's event
// grammar (llmapitest.CheckAnthropic and the others): block order, call
// fragments, one terminal, sequence numbers. Where the formats match, the
// fake upstream's own stream is what is checked.
func TestStreamGrammarEveryPath(t *testing.T) {
	var tools atomic.Bool // the upstream answers with tool calls
	r := newRig(t, withCLI(t, 0, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if tools.Load() {
			return toolScript(q)
		}
		return upstreamtest.Script{Text: []string{"Just ", "text."}, Usage: upstreamtest.Usage{InputTokens: 5, OutputTokens: 2}}
	}}))
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	const schema = `{"type":"object","properties":{"city":{"type":"string"}}}`
	for _, withTools := range []bool{false, true} {
		tools.Store(withTools)
		for _, model := range []string{"gpt-local", "via-anthropic", "via-responses", "via-chat", "via-cat"} {
			chatTools := `,"tools":[{"type":"function","function":{"name":"weather","parameters":` + schema + `}}]`
			messagesTools := `,"tools":[{"name":"weather","input_schema":` + schema + `}]`
			responsesTools := `,"tools":[{"type":"function","name":"weather","parameters":` + schema + `}]`
			if model == "via-cat" { // a command takes no tools
				chatTools, messagesTools, responsesTools = "", "", ""
			}
			for _, c := range []struct {
				path, body string
				header     map[string]string
				check      func([]sse.Event) error
			}{
				{"/v1/chat/completions", `{"model":"` + model + `","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"weather?"}]` + chatTools + `}`, oa,
					func(evs []sse.Event) error { return llmapitest.CheckChat(evs, true) }},
				{"/v1/messages", `{"model":"` + model + `","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"weather?"}]` + messagesTools + `}`, an,
					llmapitest.CheckAnthropic},
				{"/v1/responses", `{"model":"` + model + `","stream":true,"input":"weather?"` + responsesTools + `}`, oa, llmapitest.CheckResponses},
			} {
				resp, body := r.do(t, "POST", c.path, c.body, c.header)
				name := fmt.Sprintf("%s from %s (tools %v)", c.path, model, withTools)
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", name, resp.StatusCode, body)
				}
				evs := llmapitest.Events(t, []byte(body))
				if len(evs) < 3 {
					t.Fatalf("%s: %d events:\n%s", name, len(evs), body)
				}
				if err := c.check(evs); err != nil {
					t.Errorf("%s: %v in\n%s", name, err, body)
				}
			}
		}
	}
	r.settled()
}

// TestFailureBeforeOutputHasItsStatus: a provider that answers 200 and
// then fails before any output (its first event is an error) is answered,
// translated, with the failure's own HTTP status and the client format's
// error body, as when the provider refuses with its status: 429 (with
// Retry-After) for a rate limit, 503 (529 to Anthropic clients) for an
// overload, whether the client asked for a stream or not. Clients' retry
// rules read the status; an error event inside a 200 stream escapes them.
// A failure after output still ends the 200 stream with its error event.
func TestFailureBeforeOutputHasItsStatus(t *testing.T) {
	chatLimited := `data: {"error":{"message":"slow down","code":429}}` + "\n\n"
	anthropicOverloaded := "event: error\n" + `data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}` + "\n\n"
	// The provider's start (and Anthropic's ping) come first, no content:
	// still before any output.
	chatStartThenLimited := `data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n" + chatLimited
	anthropicStartThenOverloaded := "event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_up","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":3,"output_tokens":1}}}` + "\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" + anthropicOverloaded
	var raw atomic.Value
	r := newRig(t, rigOpts{reply: func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: raw.Load().(string)} }})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	for _, tc := range []struct {
		name, upstream, path, body string
		header                     map[string]string
		status                     int
		typ                        string
		provider                   string // which cools: its model for a rate limit, all of it for an overload
	}{
		{"chat 429 to a Responses stream", chatLimited, "/v1/responses", `{"model":"via-chat","stream":true,"input":"x"}`, oa, 429, `"type":"rate_limit_error"`, "chat-only"},
		{"chat 429 to a whole Responses answer", chatLimited, "/v1/responses", `{"model":"via-chat","input":"x"}`, oa, 429, `"type":"rate_limit_error"`, "chat-only"},
		{"chat 429 to an Anthropic stream", chatLimited, "/v1/messages", `{"model":"via-chat","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`, an, 429, `"type":"rate_limit_error"`, "chat-only"},
		{"anthropic overload to a Chat stream", anthropicOverloaded, "/v1/chat/completions", `{"model":"via-anthropic","stream":true,"messages":[{"role":"user","content":"x"}]}`, oa, 503, `"type":"server_error"`, "claude"},
		{"chat start, then 429, to an Anthropic stream", chatStartThenLimited, "/v1/messages", `{"model":"via-chat","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`, an, 429, `"type":"rate_limit_error"`, "chat-only"},
		{"anthropic start, then overload, to a Chat stream", anthropicStartThenOverloaded, "/v1/chat/completions", `{"model":"via-anthropic","stream":true,"messages":[{"role":"user","content":"x"}]}`, oa, 503, `"type":"server_error"`, "claude"},
		{"anthropic overload to a Responses stream", anthropicOverloaded, "/v1/responses", `{"model":"via-anthropic","stream":true,"input":"x"}`, oa, 503, `"type":"server_error"`, "claude"},
	} {
		raw.Store(tc.upstream)
		resp, body := r.do(t, "POST", tc.path, tc.body, tc.header)
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.typ) || resp.Header.Get("Content-Type") != "application/json" ||
			resp.Header.Get("Retry-After") == "" || strings.Contains(body, "event:") {
			t.Errorf("%s: %d %v %s", tc.name, resp.StatusCode, resp.Header, body)
		}
		// The provider cools (for a second) as for the same refusal made
		// with its status: the model for a rate limit, all of it for an
		// overload. The next case waits the cooldown out.
		cooling := func() (whole bool, models int) {
			for _, p := range r.srv.Status().Nodes[0].Providers {
				if p.ID == tc.provider {
					return !p.CoolingUntil.IsZero(), len(p.CoolingModels)
				}
			}
			t.Fatalf("no provider %s", tc.provider)
			return
		}
		if whole, models := cooling(); whole != (tc.status == 503) || (models == 1) != (tc.status == 429) {
			t.Errorf("%s: %s cools as a whole %v, %d models", tc.name, tc.provider, whole, models)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if whole, models := cooling(); !whole && models == 0 {
				break
			}
		}
	}
	// After output, the stream has begun: its error event ends it.
	raw.Store(`data: {"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"par"}}]}` + "\n\n" + chatLimited)
	resp, body := r.do(t, "POST", "/v1/messages", `{"model":"via-chat","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`, an)
	if resp.StatusCode != 200 || !strings.Contains(body, "event: error") || !strings.Contains(body, `"rate_limit_error"`) {
		t.Errorf("failure after output: %d %s", resp.StatusCode, body)
	}
	r.settled()
}

// TestStreamedAndWholeAgreeEveryPath asks every path twice, streamed and
// not, for the same provider answer and holds the two to the same answer
// as each client format's SDK reads it: a client gets the same text,
// reasoning, calls, stop reason and usage whether it streams or not. The
// answers: text with usage (cached tokens too); thinking, text and three
// parallel calls, one of a tool without parameters whose arguments never
// come; text cut off at the token limit, in each upstream format's terms.
// The three client formats must be given the same answer too, each in its
// own terms (canonicalAnswer).
func TestStreamedAndWholeAgreeEveryPath(t *testing.T) {
	var scenario atomic.Value
	cutOff := map[string]string{"chat": "length", "messages": "max_tokens", "responses": "max_output_tokens"}
	r := newRig(t, withCLI(t, 0, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Script{Text: []string{"Just ", "text."}, Usage: upstreamtest.Usage{InputTokens: 50, OutputTokens: 7, CachedTokens: 20}}
		switch scenario.Load() {
		case "tools":
			sc.Reasoning = []string{"Two ", "cities."}
			sc.ToolCalls = []upstreamtest.ToolCall{{ID: "call_a", Name: "weather", Arguments: `{"city":"Paris"}`},
				{ID: "call_b", Name: "clock"}, {ID: "call_c", Name: "weather", Arguments: `{"city":"Seoul"}`}}
		case "cut off":
			sc.StopReason = cutOff[q.API]
		}
		return sc
	}}))
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	const schema = `{"type":"object","properties":{"city":{"type":"string"}}}`
	for _, sc := range []string{"text", "tools", "cut off"} {
		scenario.Store(sc)
		withTools := sc == "tools"
		for _, model := range []string{"gpt-local", "via-anthropic", "via-responses", "via-chat", "via-cat"} {
			chatTools := `,"tools":[{"type":"function","function":{"name":"weather","parameters":` + schema + `}},{"type":"function","function":{"name":"clock"}}]`
			messagesTools := `,"tools":[{"name":"weather","input_schema":` + schema + `},{"name":"clock","input_schema":{"type":"object"}}]`
			responsesTools := `,"tools":[{"type":"function","name":"weather","parameters":` + schema + `},{"type":"function","name":"clock"}]`
			if model == "via-cat" { // a command takes no tools
				chatTools, messagesTools, responsesTools = "", "", ""
			}
			answers := map[string]llmapitest.Answer{} // by client format
			for _, c := range []struct {
				format, path, body string
				header             map[string]string
			}{
				{llmapitest.FormatChat, "/v1/chat/completions", `{"model":"` + model + `",STREAM,"messages":[{"role":"user","content":"weather?"}]` + chatTools + `}`, oa},
				{llmapitest.FormatAnthropic, "/v1/messages", `{"model":"` + model + `","max_tokens":50,STREAM,"messages":[{"role":"user","content":"weather?"}]` + messagesTools + `}`, an},
				{llmapitest.FormatResponses, "/v1/responses", `{"model":"` + model + `",STREAM,"input":"weather?"` + responsesTools + `}`, oa},
			} {
				name := fmt.Sprintf("%s from %s (%s)", c.path, model, sc)
				ask := func(stream bool) (string, edge.Usage) {
					how := fmt.Sprintf(`"stream":%v`, stream)
					if stream && c.format == llmapitest.FormatChat {
						how += `,"stream_options":{"include_usage":true}`
					}
					body := strings.Replace(c.body, "STREAM", how, 1)
					before := r.usageOf("alice")
					resp, out := r.do(t, "POST", c.path, body, c.header)
					if resp.StatusCode != 200 {
						t.Fatalf("%s (stream %v): %d %s", name, stream, resp.StatusCode, out)
					}
					// What the key is charged is booked when the answer ends.
					r.settled()
					after := r.usageOf("alice")
					return out, edge.Usage{Requests: after.Requests - before.Requests, InputTokens: after.InputTokens - before.InputTokens,
						OutputTokens: after.OutputTokens - before.OutputTokens, EstimatedTokens: after.EstimatedTokens - before.EstimatedTokens}
				}
				stream, streamUse := ask(true)
				whole, wholeUse := ask(false)
				// Reported usage is booked alike; an estimate (a command
				// reports none) is of the request body, which differs by
				// its stream options.
				estimated := func(u edge.Usage) bool { return u.EstimatedTokens > 0 }
				// Anthropic's input_tokens leaves the cached ones out.
				wantInput := map[string]int64{"gpt-local": 50, "via-chat": 50, "via-responses": 50, "via-anthropic": 70}
				if streamUse.Requests != 1 || wholeUse.Requests != 1 || streamUse.InputTokens != wholeUse.InputTokens ||
					streamUse.OutputTokens != wholeUse.OutputTokens || estimated(streamUse) != estimated(wholeUse) || estimated(streamUse) != (model == "via-cat") ||
					model != "via-cat" && (streamUse.InputTokens != wantInput[model] || streamUse.OutputTokens != 7) {
					t.Errorf("%s: the key was charged %+v for the stream, %+v for the whole answer", name, streamUse, wholeUse)
				}
				evs := llmapitest.Events(t, []byte(stream))
				if err := map[string]func([]sse.Event) error{llmapitest.FormatAnthropic: llmapitest.CheckAnthropic,
					llmapitest.FormatChat:      func(evs []sse.Event) error { return llmapitest.CheckChat(evs, true) },
					llmapitest.FormatResponses: llmapitest.CheckResponses}[c.format](evs); err != nil {
					t.Errorf("%s: %v in\n%s", name, err, stream)
				}
				got, err := llmapitest.StreamAnswer(c.format, evs)
				if err != nil {
					t.Fatalf("%s: stream: %v in\n%s", name, err, stream)
				}
				want, err := llmapitest.BodyAnswer(c.format, []byte(whole))
				if err != nil {
					t.Fatalf("%s: whole: %v in\n%s", name, err, whole)
				}
				clientCutOff := map[string]string{llmapitest.FormatChat: "length", llmapitest.FormatAnthropic: "max_tokens",
					llmapitest.FormatResponses: "incomplete:max_output_tokens"}[c.format]
				if want.Text == "" || model != "via-cat" && (withTools != (len(want.Calls) == 3) || (sc == "cut off") != (want.Stop == clientCutOff)) {
					t.Errorf("%s: the answer is %+v", name, want)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: streamed and whole differ (-whole +streamed):\n%s\nstream:\n%s\nwhole:\n%s", name, diff, stream, whole)
				}
				answers[c.format] = canonicalAnswer(c.format, want)
			}
			// Every client format is given the same answer, in its terms.
			for _, f := range []string{llmapitest.FormatAnthropic, llmapitest.FormatResponses} {
				if diff := cmp.Diff(answers[llmapitest.FormatChat], answers[f]); diff != "" {
					t.Errorf("%s from %s (%s): its answer differs from Chat's (-chat +%s):\n%s", f, model, sc, f, diff)
				}
			}
		}
	}
	r.settled()
}

// canonicalAnswer puts an answer a client of format holds in terms every
// format shares: its stop reason as end, max or tool, without Anthropic's
// thinking signatures (only Anthropic clients are given them).
func canonicalAnswer(format string, a llmapitest.Answer) llmapitest.Answer {
	stops := map[string]map[string]string{
		llmapitest.FormatChat:      {"stop": "end", "length": "max", "tool_calls": "tool"},
		llmapitest.FormatAnthropic: {"end_turn": "end", "max_tokens": "max", "tool_use": "tool"},
		llmapitest.FormatResponses: {"completed": "end", "incomplete:max_output_tokens": "max"},
	}
	stop, ok := stops[format][a.Stop]
	if !ok {
		stop = "unknown " + a.Stop
	}
	if format == llmapitest.FormatResponses && stop == "end" && len(a.Calls) > 0 {
		stop = "tool" // a Responses answer that calls tools is completed
	}
	a.Stop, a.Signatures = stop, ""
	return a
}

// TestUpstreamSeesOneRequestWhateverTheClientFormat sends each of two
// conversations in each client format to each upstream format: a system
// prompt, a tool call and its result, then a new question, with a tool,
// tool choice and a temperature; and an image, a forced tool with
// parallel calls off, top_p and an end-user id. It holds what each
// upstream received, read back by that format's own decoder, to one
// request: a provider is asked the same thing whichever API its client
// speaks.
func TestUpstreamSeesOneRequestWhateverTheClientFormat(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"ok"}}
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	const schema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	type ask struct {
		path, body string
		header     map[string]string
	}
	const png = "iVBORw0KGgo="
	conversations := [][]ask{{
		{"/v1/chat/completions", `{"model":"MODEL","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"weather in Paris?"},` +
			`{"role":"assistant","content":"Checking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":"18C"},{"role":"user","content":"and in Seoul?"}],` +
			`"tools":[{"type":"function","function":{"name":"weather","description":"Weather by city","parameters":` + schema + `}}],"tool_choice":"auto",` +
			`"max_completion_tokens":100,"temperature":0.5}`, oa},
		{"/v1/messages", `{"model":"MODEL","system":"Be brief.","messages":[{"role":"user","content":"weather in Paris?"},` +
			`{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"call_1","name":"weather","input":{"city":"Paris"}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18C"},{"type":"text","text":"and in Seoul?"}]}],` +
			`"tools":[{"name":"weather","description":"Weather by city","input_schema":` + schema + `}],"tool_choice":{"type":"auto"},` +
			`"max_tokens":100,"temperature":0.5}`, an},
		{"/v1/responses", `{"model":"MODEL","instructions":"Be brief.","input":[{"role":"user","content":"weather in Paris?"},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Checking."}]},` +
			`{"type":"function_call","call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}"},` +
			`{"type":"function_call_output","call_id":"call_1","output":"18C"},{"role":"user","content":"and in Seoul?"}],` +
			`"tools":[{"type":"function","name":"weather","description":"Weather by city","parameters":` + schema + `}],"tool_choice":"auto",` +
			`"max_output_tokens":100,"temperature":0.5}`, oa},
	}, {
		{"/v1/chat/completions", `{"model":"MODEL","messages":[{"role":"user","content":[{"type":"text","text":"where is this?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png + `"}}]}],` +
			`"tools":[{"type":"function","function":{"name":"weather","parameters":` + schema + `}}],` +
			`"tool_choice":{"type":"function","function":{"name":"weather"}},"parallel_tool_calls":false,"max_completion_tokens":50,"top_p":0.9,"user":"u-7"}`, oa},
		{"/v1/messages", `{"model":"MODEL","messages":[{"role":"user","content":[{"type":"text","text":"where is this?"},` +
			`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}}]}],` +
			`"tools":[{"name":"weather","input_schema":` + schema + `}],` +
			`"tool_choice":{"type":"tool","name":"weather","disable_parallel_tool_use":true},"max_tokens":50,"top_p":0.9,"metadata":{"user_id":"u-7"}}`, an},
		{"/v1/responses", `{"model":"MODEL","input":[{"role":"user","content":[{"type":"input_text","text":"where is this?"},` +
			`{"type":"input_image","image_url":"data:image/png;base64,` + png + `"}]}],` +
			`"tools":[{"type":"function","name":"weather","parameters":` + schema + `}],` +
			`"tool_choice":{"type":"function","name":"weather"},"parallel_tool_calls":false,"max_output_tokens":50,"top_p":0.9,"user":"u-7"}`, oa},
	}}
	decoders := map[string]func([]byte) (*llmapi.Request, error){
		"chat": llmapi.DecodeChatRequest, "messages": llmapi.DecodeAnthropicRequest, "responses": llmapi.DecodeResponsesRequest,
	}
	for n, bodies := range conversations {
		for _, model := range []string{"via-chat", "via-anthropic", "via-responses"} {
			var first *llmapi.Request
			for _, b := range bodies {
				seen := len(r.upstream.Requests())
				resp, out := r.do(t, "POST", b.path, strings.Replace(b.body, "MODEL", model, 1), b.header)
				if resp.StatusCode != 200 {
					t.Fatalf("%s to %s: %d %s", b.path, model, resp.StatusCode, out)
				}
				reqs := r.upstream.Requests()
				if len(reqs) != seen+1 {
					t.Fatalf("%s to %s: %d upstream requests", b.path, model, len(reqs)-seen)
				}
				q := reqs[seen]
				got, err := decoders[q.API](q.Body)
				if err != nil {
					t.Fatalf("%s to %s: the upstream's %s request does not decode: %v\n%s", b.path, model, q.API, err, q.Body)
				}
				if first == nil {
					first = got
					continue
				}
				if diff := cmp.Diff(first, got); diff != "" {
					t.Errorf("conversation %d, %s to %s: the upstream was asked otherwise than from %s (-chat +this):\n%s\n%s", n, b.path, model, bodies[0].path, diff, q.Body)
				}
			}
		}
	}
	r.settled()
}

// TestEmptyConversationRefused: a translated or command-line request with
// no turn to answer (no messages, or a system prompt alone) is refused with
// 400 in the client's format before any provider is asked; a command was
// run with nothing and answered 200 with nothing.
func TestEmptyConversationRefused(t *testing.T) {
	r := newRig(t, withCLI(t, 0, rigOpts{reply: toolScript}))
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	for _, model := range []string{"via-cat", "via-anthropic", "via-chat", "via-responses"} {
		for _, c := range []struct {
			path, body string
			header     map[string]string
		}{
			{"/v1/chat/completions", `{"model":"MODEL","messages":[]}`, oa},
			{"/v1/chat/completions", `{"model":"MODEL","messages":null}`, oa},
			{"/v1/chat/completions", `{"model":"MODEL","messages":[{"role":"system","content":"Be brief."}]}`, oa},
			{"/v1/messages", `{"model":"MODEL","max_tokens":5,"system":"Be brief.","messages":[]}`, an},
			{"/v1/responses", `{"model":"MODEL","instructions":"Be brief.","input":[]}`, oa},
		} {
			if model == "via-chat" && c.path == "/v1/chat/completions" || model == "via-responses" && c.path == "/v1/responses" ||
				model == "via-anthropic" && c.path == "/v1/messages" {
				continue // relayed as the client wrote it: the provider answers
			}
			asked := len(r.upstream.Requests())
			body := strings.Replace(c.body, "MODEL", model, 1)
			resp, out := r.do(t, "POST", c.path, body, c.header)
			if resp.StatusCode != 400 || !strings.Contains(out, "invalid_request_error") || !strings.Contains(out, "at least one") {
				t.Errorf("%s %s: %d %s", c.path, body, resp.StatusCode, out)
			}
			if n := len(r.upstream.Requests()) - asked; n != 0 {
				t.Errorf("%s %s: the provider was asked %d times", c.path, body, n)
			}
		}
	}
	r.settled()
	// Usage counts the requests dispatched to a provider, a command's too.
	if u := r.usageOf("alice"); u.Requests != 0 {
		t.Errorf("%d requests were dispatched", u.Requests)
	}
}

// TestToolNamesRenamedThroughTranslation: a tool name no provider takes
// (an MCP tool whose prefixed name passes 64 bytes, a name with a dot)
// reaches a provider of another format renamed (llmapi.ProviderToolName),
// and the model's calls of it reach the client under the client's own
// name, streamed and whole. A request relayed untranslated reaches its provider
// as the client sent it.
func TestToolNamesRenamedThroughTranslation(t *testing.T) {
	long := "mcp__plugin_deploy_on_aws_awsiac__check_cloudformation_template_compliance"
	names := []string{long, "server.tool", "weather"}
	var received atomic.Value // []string: the tool names the last upstream request carried
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		got := q.ToolNames()
		received.Store(got)
		sc := upstreamtest.Script{Text: []string{"Calling."}}
		for i, n := range got { // the model calls every tool by the name it was given
			sc.ToolCalls = append(sc.ToolCalls, upstreamtest.ToolCall{ID: fmt.Sprintf("call_%d", i), Name: n, Arguments: `{"n":1}`})
		}
		return sc
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	var chatTools, messagesTools, responsesTools []string
	for _, n := range names {
		chatTools = append(chatTools, `{"type":"function","function":{"name":"`+n+`"}}`)
		messagesTools = append(messagesTools, `{"name":"`+n+`","input_schema":{"type":"object"}}`)
		responsesTools = append(responsesTools, `{"type":"function","name":"`+n+`"}`)
	}
	for _, c := range []struct {
		format, path, body string
		header             map[string]string
		native             string // the model relayed untranslated
	}{
		{llmapitest.FormatChat, "/v1/chat/completions", `{"model":"MODEL",STREAM,"messages":[{"role":"user","content":"go"}],"tools":[` + strings.Join(chatTools, ",") + `]}`, oa, "via-chat"},
		{llmapitest.FormatAnthropic, "/v1/messages", `{"model":"MODEL","max_tokens":50,STREAM,"messages":[{"role":"user","content":"go"}],"tools":[` + strings.Join(messagesTools, ",") + `]}`, an, "via-anthropic"},
		{llmapitest.FormatResponses, "/v1/responses", `{"model":"MODEL",STREAM,"input":"go","tools":[` + strings.Join(responsesTools, ",") + `]}`, oa, "via-responses"},
	} {
		for _, model := range []string{"via-chat", "via-anthropic", "via-responses"} {
			want := names
			if model != c.native {
				want = nil
				for _, n := range names {
					want = append(want, llmapi.ProviderToolName(n))
				}
			}
			for _, stream := range []bool{false, true} {
				name := fmt.Sprintf("%s to %s (stream %v)", c.path, model, stream)
				body := strings.Replace(strings.Replace(c.body, "MODEL", model, 1), "STREAM", fmt.Sprintf(`"stream":%v`, stream), 1)
				resp, out := r.do(t, "POST", c.path, body, c.header)
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d %s", name, resp.StatusCode, out)
				}
				if got, _ := received.Load().([]string); !slices.Equal(got, want) {
					t.Errorf("%s: the provider was given tools %q, want %q", name, got, want)
				}
				var a llmapitest.Answer
				var err error
				if stream {
					a, err = llmapitest.StreamAnswer(c.format, llmapitest.Events(t, []byte(out)))
				} else {
					a, err = llmapitest.BodyAnswer(c.format, []byte(out))
				}
				if err != nil {
					t.Fatalf("%s: %v in\n%s", name, err, out)
				}
				var called []string
				for _, call := range a.Calls {
					called = append(called, call.Name)
				}
				if !slices.Equal(called, names) {
					t.Errorf("%s: the client was given calls of %q, want %q\n%s", name, called, names, out)
				}
			}
		}
	}
	r.settled()
}

// TestTranslatedOutputLimit: Anthropic requires an output limit, and a
// request translated for it whose client set none (Codex sends none) is
// sent its target's: Target.MaxTokens, or the one its model's name tells
// (4096 for a name it does not). Targets of one route with different
// limits each get their own; a client's own limit goes to every target.
func TestTranslatedOutputLimit(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		c.Routes = append(c.Routes, edge.Route{Model: "claude-limits", Strategy: edge.Weighted, Targets: []edge.Target{
			{ProviderID: "claude", Model: "up-model", Weight: 1, MaxTokens: 20000},
			{ProviderID: "claude", Model: "up-model", Weight: 1},
		}})
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	for _, c := range []struct {
		name, path, body string
		want             []float64 // the limits the targets are sent
	}{
		{"a Responses request without a limit", "/v1/responses", `{"model":"claude-limits","input":"go"}`, []float64{20000, 4096}},
		{"a Chat request without a limit", "/v1/chat/completions", `{"model":"claude-limits","messages":[{"role":"user","content":"go"}]}`, []float64{20000, 4096}},
		{"a Chat request with its own", "/v1/chat/completions", `{"model":"claude-limits","max_completion_tokens":300,"messages":[{"role":"user","content":"go"}]}`, []float64{300}},
	} {
		seen := map[float64]bool{}
		for i := 0; i < 100 && (len(seen) < len(c.want) || i < 10); i++ {
			before := len(r.upstream.Requests())
			resp, out := r.do(t, "POST", c.path, c.body, oa)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", c.name, resp.StatusCode, out)
			}
			reqs := r.upstream.Requests()
			if len(reqs) != before+1 || reqs[before].API != "messages" {
				t.Fatalf("%s: %d upstream requests", c.name, len(reqs)-before)
			}
			var body struct {
				MaxTokens float64 `json:"max_tokens"`
			}
			json.Unmarshal(reqs[before].Body, &body)
			if !slices.Contains(c.want, body.MaxTokens) {
				t.Fatalf("%s: max_tokens %v, want one of %v", c.name, body.MaxTokens, c.want)
			}
			seen[body.MaxTokens] = true
		}
		if len(seen) != len(c.want) {
			t.Errorf("%s: the targets were sent %v, want each of %v", c.name, seen, c.want)
		}
	}
	r.settled()
}

// TestSealedThinkingThroughTheEdge: Codex keeps no state at its provider
// (store false) and asks for its reasoning state back (include
// reasoning.encrypted_content). Answered by an Anthropic model that
// thought and called a tool, it is given the signed thinking sealed in the
// reasoning item, streamed and whole; sending the items back with the
// call's output, its next request reaches Anthropic with that thinking
// block and thinking on. Relayed untranslated to a Responses provider, the
// same request goes without the sealed item, which that provider could
// not open.
func TestSealedThinkingThroughTheEdge(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Reasoning: []string{"Paris, ", "then."}, ToolCalls: []upstreamtest.ToolCall{{ID: "toolu_1", Name: "weather", Arguments: `{"city":"Paris"}`}}}
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	const opts = `"store":false,"include":["reasoning.encrypted_content"],"reasoning":{"effort":"low"},"tools":[{"type":"function","name":"weather"}]`
	for _, stream := range []bool{false, true} {
		resp, out := r.do(t, "POST", "/v1/responses", fmt.Sprintf(`{"model":"via-anthropic","stream":%v,"input":"weather?",%s}`, stream, opts), oa)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		var items []string
		if stream {
			for _, ev := range llmapitest.Events(t, []byte(out)) {
				if ev.Type == "response.output_item.done" {
					var o struct{ Item json.RawMessage }
					json.Unmarshal(ev.Data, &o)
					items = append(items, string(o.Item))
				}
			}
		} else {
			var o struct{ Output []json.RawMessage }
			json.Unmarshal([]byte(out), &o)
			for _, it := range o.Output {
				items = append(items, string(it))
			}
		}
		if len(items) != 2 || !strings.Contains(items[0], `"encrypted_content":"`+llmapi.SealedPrefix) {
			t.Fatalf("stream %v: output items %q", stream, items)
		}
		input := `[{"role":"user","content":"weather?"},` + strings.Join(items, ",") + `,{"type":"function_call_output","call_id":"toolu_1","output":"18C"}]`
		for _, model := range []string{"via-anthropic", "via-responses"} {
			before := len(r.upstream.Requests())
			resp, out := r.do(t, "POST", "/v1/responses", `{"model":"`+model+`","input":`+input+`,`+opts+`}`, oa)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", model, resp.StatusCode, out)
			}
			q := r.upstream.Requests()[before]
			var body struct {
				Thinking any `json:"thinking"`
				Messages []struct {
					Content []struct {
						Type, Thinking, Signature string
					} `json:"content"`
				} `json:"messages"`
			}
			json.Unmarshal(q.Body, &body)
			switch {
			case model == "via-anthropic" && (body.Thinking == nil || len(body.Messages) < 2 || body.Messages[1].Content[0].Type != "thinking" ||
				body.Messages[1].Content[0].Thinking != "Paris, then." || body.Messages[1].Content[0].Signature != "sig-upstreamtest"):
				t.Errorf("stream %v: Anthropic was sent %s", stream, q.Body)
			case model == "via-responses" && (strings.Contains(string(q.Body), llmapi.SealedPrefix) || !strings.Contains(string(q.Body), `"call_id":"toolu_1"`)):
				t.Errorf("stream %v: the Responses provider was sent %s", stream, q.Body)
			}
		}
	}
	r.settled()
}

// TestSamplingByModelClassThroughResponses: a request translated for
// Responses is encoded apart for each class of model a route's targets
// are: OpenAI's reasoning models refuse a temperature, which any other
// model is sent. Targets of both classes behind one route each get their
// own (they shared one encoding, the first target's).
func TestSamplingByModelClassThroughResponses(t *testing.T) {
	models := []string{"up-model", "gpt-5-mini"}
	r := newRig(t, rigOpts{nodeModels: models, mutate: func(c *edge.Config) {
		allowModels(c, "resp-only", models)
		c.Routes = append(c.Routes, edge.Route{Model: "mixed-responses", Strategy: edge.Weighted, Targets: []edge.Target{
			{ProviderID: "resp-only", Model: "up-model", Weight: 1}, {ProviderID: "resp-only", Model: "gpt-5-mini", Weight: 1},
		}})
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	r.eachTargetServes(t, models, func() {
		resp, out := r.do(t, "POST", "/v1/chat/completions", `{"model":"mixed-responses","temperature":0.7,"messages":[{"role":"user","content":"x"}]}`, oa)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	}, func(q *upstreamtest.Request, body map[string]any) {
		if want := q.Model != "gpt-5-mini"; q.API != "responses" || (body["temperature"] != nil) != want {
			t.Fatalf("%s was sent %s", q.Model, q.Body)
		}
	})
	r.settled()
}

// TestReasoningGivenBackToDeepSeek: DeepSeek's thinking mode refuses a
// tool loop whose assistant messages do not give its reasoning back.
// Claude Code keeps the thinking blocks it was given and Codex the sealed
// reasoning items (include reasoning.encrypted_content); either way the
// next request reaches DeepSeek, through Chat Completions, with each
// assistant message's reasoning_content. A model of another class is not
// sent the field.
func TestReasoningGivenBackToDeepSeek(t *testing.T) {
	models := []string{"up-model", "deepseek-reasoner"}
	r := newRig(t, rigOpts{nodeModels: models, reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Reasoning: []string{"Paris ", "first."}, ToolCalls: []upstreamtest.ToolCall{{ID: "call_1", Name: "weather", Arguments: `{"city":"Paris"}`}}}
	}, mutate: func(c *edge.Config) {
		allowModels(c, "chat-only", models)
		c.Routes = append(c.Routes, edge.Route{Model: "via-deepseek", Targets: []edge.Target{{ProviderID: "chat-only", Model: "deepseek-reasoner"}}})
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	// sent returns the reasoning_content of each assistant message the
	// upstream was last sent.
	sent := func() []any {
		reqs := r.upstream.Requests()
		var b struct{ Messages []map[string]any }
		json.Unmarshal(reqs[len(reqs)-1].Body, &b)
		var out []any
		for _, m := range b.Messages {
			if m["role"] == "assistant" {
				out = append(out, m["reasoning_content"])
			}
		}
		return out
	}
	tools := `"tools":[{"name":"weather","input_schema":{"type":"object"}}]`
	for _, model := range []string{"via-deepseek", "via-chat"} {
		want := []any{"Paris first."}
		if model == "via-chat" {
			want = []any{nil}
		}
		// Claude Code: the answer's content blocks go back as they came.
		resp, out := r.do(t, "POST", "/v1/messages", `{"model":"`+model+`","max_tokens":500,"messages":[{"role":"user","content":"weather?"}],`+tools+`}`, an)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		var first struct{ Content json.RawMessage }
		json.Unmarshal([]byte(out), &first)
		resp, out = r.do(t, "POST", "/v1/messages", `{"model":"`+model+`","max_tokens":500,"messages":[{"role":"user","content":"weather?"},`+
			`{"role":"assistant","content":`+string(first.Content)+`},{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"18C"}]}],`+tools+`}`, an)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		if got := sent(); !slices.Equal(got, want) {
			t.Errorf("Anthropic client to %s: reasoning_content %q, want %q (first answer %s)", model, got, want, first.Content)
		}
		// Codex: the sealed reasoning item goes back with the call.
		const opts = `"store":false,"include":["reasoning.encrypted_content"],"tools":[{"type":"function","name":"weather"}]`
		resp, out = r.do(t, "POST", "/v1/responses", `{"model":"`+model+`","input":"weather?",`+opts+`}`, oa)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		var items struct{ Output []json.RawMessage }
		json.Unmarshal([]byte(out), &items)
		var input []string
		input = append(input, `{"role":"user","content":"weather?"}`)
		for _, it := range items.Output {
			input = append(input, string(it))
		}
		input = append(input, `{"type":"function_call_output","call_id":"call_1","output":"18C"}`)
		resp, out = r.do(t, "POST", "/v1/responses", `{"model":"`+model+`","input":[`+strings.Join(input, ",")+`],`+opts+`}`, oa)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
		if got := sent(); !slices.Equal(got, want) {
			t.Errorf("Responses client to %s: reasoning_content %q, want %q (first output %s)", model, got, want, items.Output)
		}
	}
	r.settled()
}

// TestThinkingByClaudeGeneration: Claude Opus 4.8 is asked to think
// adaptively with an effort, and refuses a budget; Sonnet 4.5 takes only
// a budget. Both behind one route, with the same output limit, each is
// sent its own way of thinking (one shared encoding would give one of
// them a request it refuses). A deployment whose name does not tell (a
// Bedrock inference profile) is asked as Target.Thinking says.
func TestThinkingByClaudeGeneration(t *testing.T) {
	models := []string{"up-model", "claude-opus-4-8", "claude-sonnet-4-5"}
	r := newRig(t, rigOpts{nodeModels: models, mutate: func(c *edge.Config) {
		allowModels(c, "claude", models)
		c.Routes = append(c.Routes, edge.Route{Model: "claude-gens", Strategy: edge.Weighted, Targets: []edge.Target{
			{ProviderID: "claude", Model: "claude-opus-4-8", Weight: 1}, {ProviderID: "claude", Model: "claude-sonnet-4-5", Weight: 1},
			{ProviderID: "claude", Model: "up-model", Weight: 1, Thinking: edge.ThinkingAdaptive, MaxTokens: 64000},
		}})
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	want := map[string]string{"claude-opus-4-8": "adaptive", "claude-sonnet-4-5": "enabled", "up-model": "adaptive"}
	r.eachTargetServes(t, models, func() {
		resp, out := r.do(t, "POST", "/v1/chat/completions", `{"model":"claude-gens","reasoning_effort":"medium","messages":[{"role":"user","content":"x"}]}`, oa)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	}, func(q *upstreamtest.Request, _ map[string]any) {
		var body struct {
			MaxTokens int `json:"max_tokens"`
			Thinking  struct {
				Type   string `json:"type"`
				Budget int    `json:"budget_tokens"`
			} `json:"thinking"`
			OutputConfig struct {
				Effort string `json:"effort"`
			} `json:"output_config"`
		}
		json.Unmarshal(q.Body, &body)
		if body.Thinking.Type != want[q.Model] || body.MaxTokens != 64000 ||
			(body.Thinking.Type == "adaptive") != (body.OutputConfig.Effort == "medium" && body.Thinking.Budget == 0) {
			t.Fatalf("%s was sent %s", q.Model, q.Body)
		}
	})
	r.settled()
}

// TestCodexWebSearchThroughTheEdge: Codex offers OpenAI's hosted web
// search in every request (cached search by default). Served by a
// provider of another format, the request goes without it and is
// answered; served by a Responses provider, untranslated, it carries the
// tool as the client sent it. A request that forces the search is
// refused where it cannot run.
func TestCodexWebSearchThroughTheEdge(t *testing.T) {
	r := newRig(t, rigOpts{})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	body := func(model, extra string) string {
		return `{"model":"` + model + `","stream":true,"store":false,"input":[{"role":"user","content":"look it up"}],` +
			`"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}},{"type":"web_search","external_web_access":false}]` + extra + `}`
	}
	for _, model := range []string{"via-anthropic", "via-chat", "via-responses"} {
		before := len(r.upstream.Requests())
		resp, out := r.do(t, "POST", "/v1/responses", body(model, ""), oa)
		if resp.StatusCode != 200 || !strings.Contains(out, "response.completed") {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, out)
		}
		q := r.upstream.Requests()[before]
		if sent := strings.Contains(string(q.Body), `"type":"web_search"`); sent != (model == "via-responses") || !strings.Contains(string(q.Body), "shell") {
			t.Errorf("%s: the provider was sent %s", model, q.Body)
		}
	}
	resp, out := r.do(t, "POST", "/v1/responses", body("via-anthropic", `,"tool_choice":{"type":"web_search"}`), oa)
	if resp.StatusCode != 400 || !strings.Contains(out, "web_search") {
		t.Fatalf("a forced search: %d %s", resp.StatusCode, out)
	}
	r.settled()
}

// TestResponsesCompact: Codex, given the built-in OpenAI provider with
// the Edge as its base URL, compacts a long conversation through POST
// /v1/responses/compact. A route whose provider speaks Responses relays
// it (the model named, the reasoning the Edge sealed for Anthropic left
// out), and its usage is booked; a route with none refuses it with 400
// saying why, since compaction is the provider's own state; it is never
// streamed. Before, the path was unknown (404) and Codex's session could
// not go on once its context was full.
func TestResponsesCompact(t *testing.T) {
	r := newRig(t, rigOpts{})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	sealed := `{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"` + llmapi.SealedPrefix + `eyJ0ZXh0IjoieCJ9"}`
	body := func(model, extra string) string {
		return `{"model":"` + model + `","instructions":"You are Codex.","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"fix it"}]},` +
			sealed + `,{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"},` +
			`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Fixed."}]}],"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}]` + extra + `}`
	}
	before := len(r.upstream.Requests())
	resp, out := r.do(t, "POST", "/v1/responses/compact", body("via-responses", `,"parallel_tool_calls":false,"reasoning":{"effort":"medium"}`), oa)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	var got struct {
		Object string `json:"object"`
		Output []struct {
			Type             string `json:"type"`
			Role             string `json:"role"`
			EncryptedContent string `json:"encrypted_content"`
		} `json:"output"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Object != "response.compaction" || len(got.Output) != 2 ||
		got.Output[0].Role != "user" || got.Output[1].Type != "compaction" || got.Output[1].EncryptedContent == "" {
		t.Fatalf("compacted: %v %s", err, out)
	}
	q := r.upstream.Requests()[before]
	if q.API != "responses_compact" || q.Model != "up-model" || strings.Contains(string(q.Body), llmapi.SealedPrefix) || !strings.Contains(string(q.Body), `"call_id":"c1"`) {
		t.Fatalf("the provider was sent %s %s", q.API, q.Body)
	}
	var booked bool
	for _, u := range r.srv.Usage() {
		booked = booked || u.Key == "alice" && u.OutputTokens >= 32
	}
	if !booked {
		t.Errorf("the compaction's usage was not booked: %+v", r.srv.Usage())
	}

	for _, c := range []struct {
		name, body, want string
	}{
		{"streamed", body("via-responses", `,"stream":true`), "false for embeddings and compaction"},
		{"streamed, to Anthropic", body("via-anthropic", `,"stream":true`), "false for embeddings and compaction"},
		{"an item no translation carries", strings.Replace(body("via-anthropic", ""), `{"type":"function_call",`, `{"type":"compaction","encrypted_content":"x"},{"type":"function_call",`, 1), "cannot be translated"},
	} {
		n := len(r.upstream.Requests())
		resp, out := r.do(t, "POST", "/v1/responses/compact", c.body, oa)
		if resp.StatusCode != 400 || !strings.Contains(out, c.want) || len(r.upstream.Requests()) != n {
			t.Errorf("%s: %d %s", c.name, resp.StatusCode, out)
		}
	}
	r.settled()
}

// TestCompactionByTranslation: a route served by Anthropic or a Chat
// Completions server compacts a Codex conversation by having the model
// summarize it, in the provider's format, its tools offered and none to
// be called; the answer is the conversation's user messages as sent and
// the summary, plain messages that Codex's next turn carries to the same
// provider. An answer with no summary compacts nothing.
func TestCompactionByTranslation(t *testing.T) {
	var blank atomic.Bool
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if blank.Load() {
			return upstreamtest.Script{Text: []string{""}}
		}
		return upstreamtest.Script{Text: []string{"## Task\n", "Fix a.go."}, Usage: upstreamtest.Usage{InputTokens: 900, OutputTokens: 40}}
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	const user = `{"type":"message","role":"user","content":[{"type":"input_text","text":"fix a.go <quickly>"}]}`
	const body = `{"model":"%s","instructions":"You are Codex.","input":[` + user + `,` +
		`{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"FAIL"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Fixed."}]}],` +
		`"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}],"parallel_tool_calls":false,"reasoning":{"effort":"medium"}}`
	for model, api := range map[string]string{"via-anthropic": "messages", "via-chat": "chat"} {
		before := len(r.upstream.Requests())
		resp, out := r.do(t, "POST", "/v1/responses/compact", fmt.Sprintf(body, model), oa)
		var got struct {
			Object string
			Output []json.RawMessage
			Usage  struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(out), &got); resp.StatusCode != 200 || err != nil || got.Object != "response.compaction" || len(got.Output) != 2 {
			t.Fatalf("%s: %d %s", model, resp.StatusCode, out)
		}
		var summary struct{ Role, Content []struct{ Text string } }
		json.Unmarshal(got.Output[1], &summary)
		if string(got.Output[0]) != user || len(summary.Content) != 1 || summary.Content[0].Text != llmapi.CompactionSummaryPrefix+"## Task\nFix a.go." {
			t.Fatalf("%s: output %s", model, out)
		}
		q := r.upstream.Requests()[before]
		check := llmapitest.CheckChatRequest
		if api == "messages" {
			check = llmapitest.CheckAnthropicRequest
		}
		if q.API != api || q.Model != "up-model" || !strings.Contains(string(q.Body), "context window is nearly full") ||
			!strings.Contains(string(q.Body), `"shell"`) || !strings.Contains(string(q.Body), `"none"`) || check(q.Body) != nil {
			t.Fatalf("%s: the provider was sent %s %s (%v)", model, q.API, q.Body, check(q.Body))
		}
		if got.Usage.InputTokens != 900 || got.Usage.OutputTokens != 40 {
			t.Errorf("%s: usage %+v", model, got.Usage)
		}

		// Codex's next turn: the compacted history, then its context and
		// the user's next words.
		next := `{"model":"` + model + `","input":[` + string(got.Output[0]) + `,` + string(got.Output[1]) +
			`,{"type":"message","role":"user","content":[{"type":"input_text","text":"go on"}]}]}`
		if resp, out := r.do(t, "POST", "/v1/responses", next, oa); resp.StatusCode != 200 {
			t.Fatalf("%s: next turn: %d %s", model, resp.StatusCode, out)
		}
	}
	var booked bool
	for _, u := range r.srv.Usage() {
		booked = booked || u.Key == "alice" && u.InputTokens >= 1800 && u.OutputTokens >= 80
	}
	if !booked {
		t.Errorf("the summaries' usage was not booked: %+v", r.srv.Usage())
	}

	// OpenAI's SDK reads the answer: the user's message, then the
	// summary in a user message.
	res, err := r.client.Responses.Compact(ctx(t), responses.ResponseCompactParams{Model: "via-anthropic",
		Input: responses.ResponseCompactParamsInputUnion{OfString: openai.String("hello")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Output) != 2 || res.Output[0].Type != "message" || res.Output[1].Role != "user" ||
		len(res.Output[1].Content) != 1 || !strings.HasSuffix(res.Output[1].Content[0].Text, "Fix a.go.") || res.Usage.OutputTokens != 40 {
		t.Fatalf("SDK: %s", res.RawJSON())
	}

	blank.Store(true)
	resp, out := r.do(t, "POST", "/v1/responses/compact", fmt.Sprintf(body, "via-anthropic"), oa)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(out, "no summary") || strings.Contains(out, "output") {
		t.Fatalf("no summary: %d %s", resp.StatusCode, out)
	}
	r.settled()
}

// TestCompactionTriggerByTranslation: Codex's compaction in the
// Responses API (a compaction_trigger item, its remote compaction v2, on
// by default in recent versions) on a route served by Anthropic or a Chat
// Completions server: the model summarizes the conversation, and the
// stream's one item is a compaction that carries the summary. Codex's
// next turn sends it back with the messages it kept: translated, the
// provider reads the summary; relayed untranslated to a Responses
// provider, the item is the user message of the summary.
func TestCompactionTriggerByTranslation(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"## Task\n", "Fix a.go."}, Usage: upstreamtest.Usage{InputTokens: 900, OutputTokens: 40}}
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	const user = `{"type":"message","role":"user","content":[{"type":"input_text","text":"fix a.go"}]}`
	const body = `{"model":"%s","stream":true,"store":false,"include":["reasoning.encrypted_content"],"instructions":"You are Codex.","input":[` + user + `,` +
		`{"type":"function_call","call_id":"c1","name":"shell","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"FAIL"},` +
		`{"type":"compaction_trigger"}],"tools":[{"type":"function","name":"shell","parameters":{"type":"object"}}],"parallel_tool_calls":true}`
	for model, api := range map[string]string{"via-anthropic": "messages", "via-chat": "chat"} {
		before := len(r.upstream.Requests())
		resp, out := r.do(t, "POST", "/v1/responses", fmt.Sprintf(body, model), oa)
		evs := llmapitest.Events(t, []byte(out))
		if err := llmapitest.CheckResponses(evs); resp.StatusCode != 200 || err != nil {
			t.Fatalf("%s: %d %v\n%s", model, resp.StatusCode, err, out)
		}
		var items []json.RawMessage
		for _, ev := range evs {
			if ev.Type == "response.output_item.done" {
				var o struct{ Item json.RawMessage }
				json.Unmarshal(ev.Data, &o)
				items = append(items, o.Item)
			}
		}
		if len(items) != 1 || !strings.Contains(string(items[0]), `"type":"compaction"`) || evs[len(evs)-1].Type != "response.completed" {
			t.Fatalf("%s: %s", model, out)
		}
		q := r.upstream.Requests()[before]
		if q.API != api || !strings.Contains(string(q.Body), "context window is nearly full") || !strings.Contains(string(q.Body), `"none"`) {
			t.Fatalf("%s: the provider was sent %s %s", model, q.API, q.Body)
		}

		for _, next := range []string{model, "via-responses"} {
			n := len(r.upstream.Requests())
			turn := `{"model":"` + next + `","input":[` + user + `,` + string(items[0]) + `,{"type":"message","role":"user","content":"go on"}]}`
			if resp, out := r.do(t, "POST", "/v1/responses", turn, oa); resp.StatusCode != 200 {
				t.Fatalf("%s, next turn on %s: %d %s", model, next, resp.StatusCode, out)
			}
			sent := string(r.upstream.Requests()[n].Body)
			if !strings.Contains(sent, "Compacted conversation") || !strings.Contains(sent, `Fix a.go.`) || strings.Contains(sent, "compaction.v1") {
				t.Fatalf("%s, next turn on %s: the provider was sent %s", model, next, sent)
			}
		}
	}
	r.settled()
}

// TestQuietCompactionKeptAlive: a streamed compaction shows the client
// nothing while the model writes the summary; once its events have
// rendered to nothing for the keep-alive interval, a keep-alive goes, as
// between events, so that a proxy or client that drops a silent
// connection keeps it: a response.in_progress event, which Codex's idle
// timeout counts (it counts no comment).
func TestQuietCompactionKeptAlive(t *testing.T) {
	words := make([]string, 12)
	for i := range words {
		words[i] = "word "
	}
	r := newRig(t, rigOpts{keepAlive: 40 * time.Millisecond, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: words, ChunkDelay: 25 * time.Millisecond} // 300 ms of chunks, none 40 ms apart
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	resp, out := r.do(t, "POST", "/v1/responses", `{"model":"via-anthropic","stream":true,"input":[{"role":"user","content":"x"},{"type":"compaction_trigger"}]}`, oa)
	beats := strings.Count(out, "event: response.in_progress") - 1 // the first starts the answer
	if resp.StatusCode != 200 || !strings.Contains(out, `"type":"compaction"`) || beats < 2 || strings.Contains(out, ": keep-alive") {
		t.Fatalf("%d, %d heartbeats:\n%s", resp.StatusCode, beats, out)
	}
	if err := llmapitest.CheckResponses(llmapitest.Events(t, []byte(out))); err != nil {
		t.Fatalf("%v in\n%s", err, out)
	}
	r.settled()
}

// TestSilentStreamHeartbeat: a stream silent for the keep-alive interval
// is sent an event of the client's format where it has one, so that a
// client that gives up on a stream without events keeps it (Codex's idle
// timeout counts no comment; Claude Code's stall watchdog looks for
// events): an Anthropic client a ping, relayed untranslated or
// translated; a Responses client a response.in_progress, in a translated
// answer the response started by the first where the provider had not
// started its answer (a Chat Completions provider says nothing before its
// first token), in one relayed untranslated once the provider created
// the response, its later events renumbered to follow. Each stream holds
// to its grammar (sequence numbers 0, 1, 2...). Chat Completions has no
// such event: its clients get comments (TestSilentStreamKeepAlive).
func TestSilentStreamHeartbeat(t *testing.T) {
	r := newRig(t, rigOpts{keepAlive: 20 * time.Millisecond, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		sc.TTFT = 200 * time.Millisecond
		return sc
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	for _, c := range []struct {
		path, model string
		header      map[string]string
		beat        string // the heartbeat's event type
		check       func([]sse.Event) error
	}{
		{"/v1/messages", "via-anthropic", an, "ping", nil}, // the provider's own stream
		{"/v1/messages", "via-chat", an, "ping", llmapitest.CheckAnthropic},
		{"/v1/responses", "via-chat", oa, "response.in_progress", llmapitest.CheckResponses},
		{"/v1/responses", "via-anthropic", oa, "response.in_progress", llmapitest.CheckResponses},
		{"/v1/responses", "via-responses", oa, "response.in_progress", llmapitest.CheckResponses}, // the provider's own stream
	} {
		body := `{"model":"` + c.model + `","stream":true,"input":"wait"}`
		if c.path == "/v1/messages" {
			body = `{"model":"` + c.model + `","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"wait"}]}`
		}
		resp, out := r.do(t, "POST", c.path, body, c.header)
		name := c.path + " from " + c.model
		evs := llmapitest.Events(t, []byte(out))
		beats := 0
		for _, ev := range evs {
			if ev.Type == c.beat {
				beats++
			}
		}
		comments := strings.Count(out, ": keep-alive")
		if resp.StatusCode != 200 || !strings.Contains(out, "wait") || beats < 3 || comments > 0 {
			t.Fatalf("%s: %d, %d %s events, %d comments:\n%s", name, resp.StatusCode, beats, c.beat, comments, out)
		}
		if c.check != nil {
			if err := c.check(evs); err != nil {
				t.Fatalf("%s: %v in\n%s", name, err, out)
			}
		}
	}
	r.settled()
}

// TestNamespaceToolsThroughTheEdge: Codex's namespace tools (its MCP
// servers') reach Anthropic and a Chat Completions server as flat
// functions, and the model's call comes back to Codex under the
// namespace and the tool's own name, streamed.
func TestNamespaceToolsThroughTheEdge(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{ToolCalls: []upstreamtest.ToolCall{{ID: "call_1", Name: "mcp__github__list_issues", Arguments: `{"repo":"iop"}`}}}
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	const body = `{"model":"%s","stream":true,"input":[{"role":"user","content":"list my issues"},` +
		`{"type":"function_call","call_id":"c1","namespace":"mcp__github","name":"get_me","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"octocat"}],` +
		`"tools":[{"type":"namespace","name":"mcp__github","description":"GitHub.","tools":[{"type":"function","name":"get_me","parameters":{"type":"object"}},` +
		`{"type":"function","name":"list_issues","parameters":{"type":"object"}}]}]}`
	for _, model := range []string{"via-anthropic", "via-chat"} {
		before := len(r.upstream.Requests())
		resp, out := r.do(t, "POST", "/v1/responses", fmt.Sprintf(body, model), oa)
		evs := llmapitest.Events(t, []byte(out))
		if err := llmapitest.CheckResponses(evs); resp.StatusCode != 200 || err != nil {
			t.Fatalf("%s: %d %v\n%s", model, resp.StatusCode, err, out)
		}
		var call struct{ Type, Namespace, Name, Arguments string }
		for _, ev := range evs {
			if ev.Type == "response.output_item.done" {
				var o struct{ Item json.RawMessage }
				json.Unmarshal(ev.Data, &o)
				json.Unmarshal(o.Item, &call)
			}
		}
		if call.Type != "function_call" || call.Namespace != "mcp__github" || call.Name != "list_issues" || call.Arguments != `{"repo":"iop"}` {
			t.Fatalf("%s: call %+v in %s", model, call, out)
		}
		if sent := string(r.upstream.Requests()[before].Body); strings.Count(sent, `"mcp__github__get_me"`) != 2 || !strings.Contains(sent, `"mcp__github__list_issues"`) {
			t.Fatalf("%s: the provider was sent %s", model, sent)
		}
	}
	r.settled()
}

// TestToolSearchThroughTheEdge: Codex's own tool search on a translated
// route: the model's search reaches Codex as a tool_search_call, and the
// tools the search loaded are offered to the model in the next turn.
func TestToolSearchThroughTheEdge(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{ToolCalls: []upstreamtest.ToolCall{{ID: "call_1", Name: "tool_search", Arguments: `{"query":"issues"}`}}}
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	const search = `{"type":"tool_search","execution":"client","description":"Search deferred tools.","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}`
	resp, out := r.do(t, "POST", "/v1/responses", `{"model":"via-anthropic","stream":true,"input":[{"role":"user","content":"list my issues"}],"tools":[`+search+`]}`, oa)
	evs := llmapitest.Events(t, []byte(out))
	if err := llmapitest.CheckResponses(evs); resp.StatusCode != 200 || err != nil || !strings.Contains(out, `"type":"tool_search_call"`) ||
		!strings.Contains(out, `"arguments":{"query":"issues"}`) {
		t.Fatalf("%d %v\n%s", resp.StatusCode, err, out)
	}
	before := len(r.upstream.Requests())
	next := `{"model":"via-anthropic","input":[{"role":"user","content":"list my issues"},` +
		`{"type":"tool_search_call","call_id":"call_1","execution":"client","arguments":{"query":"issues"}},` +
		`{"type":"tool_search_output","call_id":"call_1","execution":"client","tools":[{"type":"namespace","name":"mcp__github","tools":[{"type":"function","name":"list_issues","parameters":{"type":"object"}}]}]}],` +
		`"tools":[` + search + `]}`
	if resp, out := r.do(t, "POST", "/v1/responses", next, oa); resp.StatusCode != 200 {
		t.Fatalf("next turn: %d %s", resp.StatusCode, out)
	}
	if sent := string(r.upstream.Requests()[before].Body); strings.Count(sent, `mcp__github__list_issues`) != 2 || llmapitest.CheckAnthropicRequest([]byte(sent)) != nil {
		t.Fatalf("the provider was sent %s", sent)
	}
	r.settled()
}

// TestPromptCacheThroughTheEdge: a request translated for Anthropic marks
// its prefix for Anthropic's prompt cache, as OpenAI's clients expect of
// a repeated prefix; a target with NoPromptCache sends it unmarked. A
// weighted route over both keeps one encoding for each.
func TestPromptCacheThroughTheEdge(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		allowModels(c, "claude", []string{"up-model", "cached", "uncached"})
		c.Routes = append(c.Routes, edge.Route{Model: "claude-both", Strategy: edge.Weighted, Targets: []edge.Target{
			{ProviderID: "claude", Model: "cached", Weight: 1}, {ProviderID: "claude", Model: "uncached", Weight: 1, NoPromptCache: true},
		}})
	}, nodeModels: []string{"up-model", "cached", "uncached"}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	const body = `{"model":"claude-both","messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`
	r.eachTargetServes(t, []string{"cached", "uncached"}, func() {
		resp, out := r.do(t, "POST", "/v1/chat/completions", body, oa)
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	}, func(q *upstreamtest.Request, _ map[string]any) {
		want := 0
		if q.Model == "cached" {
			want = 3 // the tool, the system prompt, the one message
		}
		if n := strings.Count(string(q.Body), `"cache_control"`); n != want || llmapitest.CheckAnthropicRequest(q.Body) != nil {
			t.Fatalf("%s was sent %d marks: %s", q.Model, n, q.Body)
		}
	})
	r.settled()
}

// TestOpenAIReasoningThroughTheEdge: Claude Code on one of OpenAI's
// reasoning models, behind a provider of both OpenAI formats, is spoken
// to in Responses and given the model's reasoning state as its thinking
// block's signature, streamed and whole; its next turn in the tool loop
// sends the block back, and the model gets its reasoning item back
// before its call.
func TestOpenAIReasoningThroughTheEdge(t *testing.T) {
	r := newRig(t, rigOpts{nodeModels: []string{"up-model", "gpt-5-mini"}, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Reasoning: []string{"Read ", "it."}, ToolCalls: []upstreamtest.ToolCall{{ID: "call_1", Name: "Read", Arguments: `{"p":"a"}`}}}
	}, mutate: func(c *edge.Config) {
		allowModels(c, "local", []string{"up-model", "gpt-5-mini"})
		c.Routes = append(c.Routes, edge.Route{Model: "reasoner", Targets: []edge.Target{{ProviderID: "local", Model: "gpt-5-mini"}}})
	}})
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	const tools = `"tools":[{"name":"Read","input_schema":{"type":"object"}}]`
	resp, out := r.do(t, "POST", "/v1/messages", `{"model":"reasoner","max_tokens":4000,"stream":true,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"read a"}],`+tools+`}`, an)
	if resp.StatusCode != 200 || !strings.Contains(out, `"signature":"~openai-reasoning:`) {
		t.Fatalf("streamed: %d %s", resp.StatusCode, out)
	}
	resp, out = r.do(t, "POST", "/v1/messages", `{"model":"reasoner","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"read a"}],`+tools+`}`, an)
	var msg struct{ Content []json.RawMessage }
	if err := json.Unmarshal([]byte(out), &msg); resp.StatusCode != 200 || err != nil || len(msg.Content) != 2 {
		t.Fatalf("whole: %d %s", resp.StatusCode, out)
	}
	var thinking struct{ Signature string }
	json.Unmarshal(msg.Content[0], &thinking)
	enc, ok := strings.CutPrefix(thinking.Signature, "~openai-reasoning:")
	if !ok || enc == "" {
		t.Fatalf("thinking block %s", msg.Content[0])
	}
	before := len(r.upstream.Requests())
	next := `{"model":"reasoner","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"read a"},` +
		`{"role":"assistant","content":[` + string(msg.Content[0]) + `,` + string(msg.Content[1]) + `]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"package a"}]}],` + tools + `}`
	if resp, out := r.do(t, "POST", "/v1/messages", next, an); resp.StatusCode != 200 {
		t.Fatalf("next turn: %d %s", resp.StatusCode, out)
	}
	q := r.upstream.Requests()[before]
	var body struct {
		Input []struct {
			Type             string
			EncryptedContent string `json:"encrypted_content"`
		}
	}
	json.Unmarshal(q.Body, &body)
	if q.API != "responses" || len(body.Input) != 4 || body.Input[1].Type != "reasoning" || body.Input[1].EncryptedContent != enc || body.Input[2].Type != "function_call" {
		t.Fatalf("the model was sent %s %s", q.API, q.Body)
	}
	r.settled()
}

// TestForeignThinkingToAnthropic: Claude Code's conversation answered by
// an OpenAI reasoning model, then served by Anthropic untranslated (a
// route's next provider), reaches Anthropic without the thinking blocks
// that hold OpenAI's state, which Anthropic would refuse, and with
// thinking off where that leaves a tool loop without its thinking.
func TestForeignThinkingToAnthropic(t *testing.T) {
	r := newRig(t, rigOpts{})
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	body := `{"model":"via-anthropic","max_tokens":4000,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":"read a"},` +
		`{"role":"assistant","content":[{"type":"thinking","thinking":"Reading.","signature":"~openai-reasoning:gAAAAB"},{"type":"tool_use","id":"call_1","name":"Read","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"package a"}]}],"tools":[{"name":"Read","input_schema":{"type":"object"}}]}`
	before := len(r.upstream.Requests())
	if resp, out := r.do(t, "POST", "/v1/messages", body, an); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	q := r.upstream.Requests()[before]
	if q.API != "messages" || strings.Contains(string(q.Body), "openai-reasoning") || !strings.Contains(string(q.Body), `"thinking":{"type":"disabled"}`) ||
		!strings.Contains(string(q.Body), `"tool_use_id":"call_1"`) {
		t.Fatalf("Anthropic was sent %s", q.Body)
	}
	r.settled()
}

// TestBillingHeaderLeftOut: Claude Code's billing header, which changes
// with every request and would make a prefix-caching server prefill the
// whole conversation again each turn, reaches neither a translated
// request nor, by default, one relayed untranslated to a provider not of
// category api; a hosted API's request keeps it (it may be Anthropic,
// which reads it). A provider's BillingHeader says otherwise: drop for a
// hosted API that is not Anthropic's, keep for a local one in front of
// Anthropic.
func TestBillingHeaderLeftOut(t *testing.T) {
	const header = "x-anthropic-billing-header: cc_version=2.1.337.a23; cc_entrypoint=cli; cch=1f0e2;"
	const rest = `{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}`
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	for _, setting := range []struct{ hosted, local string }{{"", ""}, {"drop", "keep"}} {
		localUp := upstreamtest.New(upstreamtest.Config{Models: []string{"up-model"}})
		localURL := localUp.Start()
		t.Cleanup(localUp.Close)
		local, err := anadapter.New(anadapter.Config{ID: "claude-local", BaseURL: localURL, Models: []string{"up-model"}, Category: execution.CategoryLocal})
		if err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOpts{hosted: []node.Hosted{{Provider: local}}, mutate: func(cfg *edge.Config) {
			cfg.Nodes[0].Providers[1].BillingHeader = setting.hosted
			cfg.Nodes[0].Providers = append(cfg.Nodes[0].Providers, nodes.ProviderSpec{ID: "claude-local", Adapter: "anthropic", Category: execution.CategoryLocal,
				Models: []string{"up-model"}, Capacity: 8, BillingHeader: setting.local})
			cfg.Routes = append(cfg.Routes, edge.Route{Model: "via-local-anthropic", Targets: []edge.Target{{ProviderID: "claude-local", Model: "up-model"}}})
		}})
		switched := setting.hosted != ""
		for _, c := range []struct {
			model string
			up    *upstreamtest.Server
			kept  bool
		}{
			{"via-anthropic", r.upstream, !switched},
			{"via-local-anthropic", localUp, switched},
			{"via-chat", r.upstream, false},
		} {
			before := len(c.up.Requests())
			body := `{"model":"` + c.model + `","max_tokens":9,"system":[{"type":"text","text":"` + header + `"},` + rest + `],"messages":[{"role":"user","content":"hi"}]}`
			if resp, out := r.do(t, "POST", "/v1/messages", body, an); resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", c.model, resp.StatusCode, out)
			}
			var sent string
			for _, q := range c.up.Requests()[before:] {
				if q.API != "models" {
					sent = string(q.Body)
				}
			}
			// Relayed, the rest of the system prompt keeps its bytes.
			want := `"system":[` + rest + `]`
			switch {
			case c.kept:
				want = `"system":[{"type":"text","text":"` + header + `"},` + rest + `]`
			case c.model == "via-chat":
				want = `"content":"You are Claude Code."`
			}
			if strings.Contains(sent, "x-anthropic-billing-header") != c.kept || !strings.Contains(sent, want) {
				t.Errorf("%s, billing_header %q/%q: the provider was sent %s", c.model, setting.hosted, setting.local, sent)
			}
		}
		r.settled()
	}
}

// TestContextOverflowTold: a provider's refusal of a prompt past its
// model's context window, in any server's words and shape, reaches a
// client of another format as that format's own: an Anthropic client's
// message says the prompt is too long (Claude Code compacts its
// conversation on it), an OpenAI-format client's error has the code
// context_length_exceeded (Codex tells its user so). Any other refusal
// keeps the provider's message, from vLLM's older shape too.
func TestContextOverflowTold(t *testing.T) {
	bodies := map[string]string{
		// vLLM before 0.10, SGLang.
		"vllm":      `{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 40000 tokens (39000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`,
		"llamacpp":  `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":40000,"n_ctx":32768}}`,
		"anthropic": `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215692 tokens > 200000 maximum"}}`,
		"openai":    `{"error":{"message":"Your input exceeds the context window of this model. Please adjust your input and try again.","type":"invalid_request_error","param":"input","code":"context_length_exceeded"}}`,
		"fastapi":   `{"detail":"Prompt too long: 32799 tokens exceeds max context window of 32768 tokens"}`,
		"other":     `{"object":"error","message":"max_tokens must be at least 1, got 0.","type":"BadRequestError","param":null,"code":400}`,
	}
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Status: http.StatusBadRequest, ErrorBody: bodies[strings.TrimPrefix(q.Prompt, "overflow ")]}
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	for _, c := range []struct {
		server, path, model string
		header              map[string]string
		overflow            bool
	}{
		{"vllm", "/v1/messages", "via-chat", an, true},
		{"llamacpp", "/v1/responses", "via-chat", oa, true},
		{"fastapi", "/v1/messages", "via-responses", an, true},
		{"anthropic", "/v1/chat/completions", "via-anthropic", oa, true},
		{"openai", "/v1/chat/completions", "via-responses", oa, true},
		{"other", "/v1/messages", "via-chat", an, false},
		{"other", "/v1/responses", "via-chat", oa, false},
	} {
		var body string
		switch c.path {
		case "/v1/messages":
			body = `{"model":"` + c.model + `","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"overflow ` + c.server + `"}]}`
		case "/v1/responses":
			body = `{"model":"` + c.model + `","stream":true,"input":"overflow ` + c.server + `"}`
		default:
			body = chatJSON(c.model, "overflow "+c.server)
		}
		resp, out := r.do(t, "POST", c.path, body, c.header)
		var e struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
				Code    any    `json:"code"`
			} `json:"error"`
		}
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal([]byte(out), &e) != nil || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s to %s %s: %d %s", c.server, c.path, c.model, resp.StatusCode, out)
			continue
		}
		told := strings.Contains(strings.ToLower(e.Error.Message), "prompt is too long")
		if c.path != "/v1/messages" {
			told = e.Error.Code == "context_length_exceeded"
		}
		if told != c.overflow {
			t.Errorf("%s to %s %s: told as an overflow %v, want %v: %s", c.server, c.path, c.model, told, c.overflow, out)
		}
		if c.server == "other" && !strings.Contains(e.Error.Message, "max_tokens must be at least 1") {
			t.Errorf("%s to %s: the provider's message was lost: %s", c.server, c.path, out)
		}
	}
	r.settled()
}

// TestSlowHeadKeptAlive: a provider that sends no head for a while
// (Ollama sends none until its first token: after a model load and the
// prompt's prefill) does not leave a stream's client without a byte:
// once the keep-alive interval has passed, the client's stream begins and
// keep-alives follow until the provider answers. A translated stream
// begins with its format's start (message_start, response.created) and
// heartbeats; one relayed untranslated with keep-alives that fit anywhere
// before the provider's own start (Anthropic's ping, a comment), but a
// relayed Responses stream waits for the provider's head. The
// answer then comes as usual, and each stream holds to its grammar (a
// relayed Anthropic stream's leading pings aside). A failure the late
// head brings (here a 429) ends the begun stream with the format's error
// event; the provider still cools. A whole answer just waits.
func TestSlowHeadKeptAlive(t *testing.T) {
	var status atomic.Int32
	chatGrammar := func(evs []sse.Event) error { return llmapitest.CheckChat(evs, false) }
	// afterPings checks a relayed Anthropic stream past the pings the
	// Edge sent before the provider's own message_start.
	afterPings := func(evs []sse.Event) error {
		for len(evs) > 0 && evs[0].Type == "ping" {
			evs = evs[1:]
		}
		return llmapitest.CheckAnthropic(evs)
	}
	r := newRig(t, rigOpts{keepAlive: 40 * time.Millisecond, mutate: func(c *edge.Config) { c.Metrics = prometheus.NewRegistry() }, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		sc.HeadDelay = 300 * time.Millisecond
		sc.Status = int(status.Load())
		return sc
	}})
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	cases := []struct {
		path, model string
		header      map[string]string
		first       string // the stream's first event
		beat        string // a keep-alive
		check       func([]sse.Event) error
	}{
		// Translated.
		{"/v1/messages", "via-chat", an, "message_start", "event: ping", llmapitest.CheckAnthropic},
		{"/v1/responses", "via-chat", oa, "response.created", "event: response.in_progress", llmapitest.CheckResponses},
		{"/v1/responses", "via-anthropic", oa, "response.created", "event: response.in_progress", llmapitest.CheckResponses},
		{"/v1/chat/completions", "via-anthropic", oa, "", ": keep-alive", chatGrammar},
		// Relayed untranslated.
		{"/v1/messages", "via-anthropic", an, "ping", "event: ping", afterPings},
		{"/v1/chat/completions", "gpt-local", oa, "", ": keep-alive", chatGrammar},
	}
	body := func(path, model string, stream bool) string {
		switch path {
		case "/v1/messages":
			return fmt.Sprintf(`{"model":%q,"max_tokens":50,"stream":%t,"messages":[{"role":"user","content":"slow start"}]}`, model, stream)
		case "/v1/responses":
			return fmt.Sprintf(`{"model":%q,"stream":%t,"input":"slow start"}`, model, stream)
		}
		return fmt.Sprintf(`{"model":%q,"stream":%t,"messages":[{"role":"user","content":"slow start"}]}`, model, stream)
	}
	for _, c := range cases {
		name := c.path + " from " + c.model
		resp, out := r.do(t, "POST", c.path, body(c.path, c.model, true), c.header)
		evs := llmapitest.Events(t, []byte(out))
		content := strings.Index(out, "echo:") // the answer's first words
		if resp.StatusCode != 200 || content < 0 || !strings.Contains(out, " start") || len(evs) == 0 {
			t.Fatalf("%s: %d\n%s", name, resp.StatusCode, out)
		}
		// Before the answer's content: keep-alives, in the format's
		// events where it has them.
		if beats := strings.Count(out[:content], c.beat); beats < 3 || (c.first != "" && evs[0].Type != c.first) {
			t.Fatalf("%s: the stream opens with %q, %d keep-alives before the content:\n%s", name, evs[0].Type, beats, out)
		}
		if err := c.check(evs); err != nil {
			t.Fatalf("%s: %v in\n%s", name, err, out)
		}
	}

	// A whole answer waits for the head, and is the answer; so does a
	// Responses stream relayed untranslated (nothing of the format may
	// precede the provider's response.created, and Codex waits for a head
	// but counts no comment once it has one), and a failure that head
	// brings keeps its status.
	resp, out := r.do(t, "POST", "/v1/responses", body("/v1/responses", "via-responses", true), oa)
	if evs := llmapitest.Events(t, []byte(out)); resp.StatusCode != 200 || !strings.HasPrefix(out, "event: response.created") || llmapitest.CheckResponses(evs) != nil {
		t.Fatalf("relayed Responses stream: %d %s", resp.StatusCode, out)
	}
	resp, out = r.do(t, "POST", "/v1/messages", body("/v1/messages", "via-chat", false), an)
	if resp.StatusCode != 200 || !strings.Contains(out, `"text":"echo: slow start"`) || strings.Contains(out, "keep-alive") {
		t.Fatalf("whole: %d %s", resp.StatusCode, out)
	}

	// A late failure ends the begun stream with its error event: a 500,
	// which cools nothing, on every path; then a 429, whose provider still
	// cools (its model, for a second), as for a refusal made in time.
	status.Store(http.StatusInternalServerError)
	refused := func(c int, want string) {
		t.Helper()
		name := cases[c].path + " from " + cases[c].model + " refused"
		resp, out := r.do(t, "POST", cases[c].path, body(cases[c].path, cases[c].model, true), cases[c].header)
		evs := llmapitest.Events(t, []byte(out))
		if resp.StatusCode != 200 || len(evs) == 0 {
			t.Fatalf("%s: %d\n%s", name, resp.StatusCode, out)
		}
		last := evs[len(evs)-1]
		if !strings.Contains(string(last.Data), want) || (last.Type != "error" && last.Type != "response.failed" && last.Type != "") {
			t.Fatalf("%s: the stream ends with %s %s:\n%s", name, last.Type, last.Data, out)
		}
		if err := cases[c].check(evs); err != nil {
			t.Fatalf("%s: %v in\n%s", name, err, out)
		}
	}
	for c := range cases {
		refused(c, "answered 500")
	}
	if resp, out := r.do(t, "POST", "/v1/responses", body("/v1/responses", "via-responses", true), oa); resp.StatusCode != 500 {
		t.Fatalf("relayed Responses stream refused late: %d %s", resp.StatusCode, out)
	}
	status.Store(http.StatusTooManyRequests)
	refused(0, "rate_limit")
	for _, p := range r.srv.Status().Nodes[0].Providers {
		if p.ID == "chat-only" && len(p.CoolingModels) != 1 {
			t.Fatalf("chat-only cools %d models after a late 429", len(p.CoolingModels))
		}
	}
	// The metrics name each late failure as its status would have: not
	// ok, though it was answered 200.
	_, text := r.get(t, "/metrics", nil)
	for _, line := range []string{
		`iop_edge_requests_total{api="messages",outcome="upstream_error",route="via-chat"} 1`,
		`iop_edge_requests_total{api="messages",outcome="rate_limited",route="via-chat"} 1`,
		`iop_edge_requests_total{api="chat",outcome="upstream_error",route="gpt-local"} 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
	r.settled()
}

// TestSlowHeadNodeLost: a stream begun while its provider's head was
// awaited ends with its format's error event as soon as the Node's link
// is lost, relayed untranslated or translated; it does not keep the
// client waiting with keep-alives until the request's deadline.
func TestSlowHeadNodeLost(t *testing.T) {
	r := newRig(t, rigOpts{keepAlive: 30 * time.Millisecond, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		sc.HeadDelay = time.Minute
		return sc
	}})
	an := map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	cases := []struct {
		path, body string
		header     map[string]string
		end        string // the stream's error event
	}{
		{"/v1/messages", `{"model":"via-chat","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"x"}]}`, an, "event: error"},
		{"/v1/messages", `{"model":"via-anthropic","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"x"}]}`, an, "event: error"},
		{"/v1/chat/completions", `{"model":"gpt-local","stream":true,"messages":[{"role":"user","content":"x"}]}`, oa, `data: {"error"`},
	}
	outs := make([]string, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", r.url+c.path, strings.NewReader(c.body))
			for k, v := range c.header {
				req.Header.Set(k, v)
			}
			client := &http.Client{Timeout: 20 * time.Second}
			resp, err := client.Do(req)
			if err != nil {
				outs[i] = err.Error()
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			outs[i] = fmt.Sprintf("%d %s %v", resp.StatusCode, b, err)
		})
	}
	for n := 0; n < len(cases); time.Sleep(10 * time.Millisecond) {
		n = len(r.upstream.Requests())
	}
	time.Sleep(200 * time.Millisecond) // the streams begun, keep-alives going
	r.stopNode()
	wg.Wait()
	for i, c := range cases {
		if !strings.HasPrefix(outs[i], "200 ") || !strings.Contains(outs[i], c.end) || !strings.Contains(outs[i], "unavailable") {
			t.Errorf("%s %s: %s", c.path, c.body[:25], outs[i])
		}
	}
}
