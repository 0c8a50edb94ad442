package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

// sink collects a run's events.
type sink struct{ events []execution.Event }

func (s *sink) WriteEvent(e execution.Event) error {
	s.events = append(s.events, e)
	return nil
}

func (s *sink) text(reasoning bool) string {
	out := ""
	for _, e := range s.events {
		if e.Kind == execution.EventDelta && e.Reasoning == reasoning {
			out += e.Text
		}
	}
	return out
}

func (s *sink) calls() []execution.ToolCall {
	var out []execution.ToolCall
	for _, e := range s.events {
		if e.Kind == execution.EventToolCall {
			out = append(out, *e.ToolCall)
		}
	}
	return out
}

func (s *sink) usage() *execution.Usage {
	for _, e := range s.events {
		if e.Kind == execution.EventUsage {
			return e.Usage
		}
	}
	return nil
}

func start(t *testing.T, sc upstreamtest.Script) (*upstreamtest.Server, *openai.Adapter) {
	t.Helper()
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"m1", "m2"}, Reply: func(*upstreamtest.Request) upstreamtest.Script { return sc }})
	url := srv.Start()
	t.Cleanup(srv.Close)
	a, err := openai.New(openai.Config{ID: "p", BaseURL: url, Credential: execution.EnvCredential("IOP_TEST_OPENAI_KEY")})
	if err != nil {
		t.Fatal(err)
	}
	return srv, a
}

func req(stream bool) *execution.RunRequest {
	return &execution.RunRequest{RunID: "r", ProviderID: "p", Target: "m1", Options: execution.Options{Stream: stream},
		Input: execution.Input{System: "be brief", Messages: []execution.Message{{Role: "user", Content: "hi"}}}}
}

func TestRun(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	sc := upstreamtest.Script{
		Reasoning: []string{"think", "ing"},
		Text:      []string{"Hel", "lo"},
		ToolCalls: []upstreamtest.ToolCall{{ID: "c1", Name: "get", Arguments: `{"city":"Paris"}`}, {ID: "c2", Name: "put", Arguments: `{"n":2}`}},
		Usage:     upstreamtest.Usage{InputTokens: 11, OutputTokens: 7, CachedTokens: 3, ReasoningTokens: 2},
	}
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "buffered", true: "streamed"}[stream], func(t *testing.T) {
			srv, a := start(t, sc)
			var s sink
			res, err := a.Run(context.Background(), req(stream), &s)
			if err != nil {
				t.Fatal(err)
			}
			if res.StopReason != "tool_calls" || s.text(false) != "Hello" || s.text(true) != "thinking" {
				t.Fatalf("result %+v text %q reasoning %q", res, s.text(false), s.text(true))
			}
			want := []execution.ToolCall{{ID: "c1", Name: "get", Arguments: `{"city":"Paris"}`}, {ID: "c2", Name: "put", Arguments: `{"n":2}`}}
			if d := cmp.Diff(want, s.calls()); d != "" {
				t.Errorf("tool calls (-want +got):\n%s", d)
			}
			if d := cmp.Diff(&execution.Usage{InputTokens: 11, OutputTokens: 7, CachedInputTokens: 3, ReasoningTokens: 2}, s.usage()); d != "" {
				t.Errorf("usage (-want +got):\n%s", d)
			}
			r := srv.Requests()[0]
			if r.Header.Get("Authorization") != "Bearer node-key" || r.Model != "m1" || r.Stream != stream || r.IncludeUsage != stream {
				t.Errorf("upstream saw auth %q model %q stream %v include_usage %v", r.Header.Get("Authorization"), r.Model, r.Stream, r.IncludeUsage)
			}
		})
	}
}

func TestRunFailures(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	cases := []struct {
		name  string
		sc    upstreamtest.Script
		class execution.FailureClass
	}{
		{"rate limited", upstreamtest.Script{Status: 429}, execution.FailureRateLimited},
		{"server error", upstreamtest.Script{Status: 500}, execution.FailureProvider},
		{"error mid-stream", upstreamtest.Script{Text: []string{"a", "b", "c"}, ErrorAfter: 2}, execution.FailureProvider},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, a := start(t, tc.sc)
			_, err := a.Run(context.Background(), req(true), &sink{})
			var f *execution.Failure
			if !errors.As(err, &f) || f.Class != tc.class {
				t.Fatalf("err %v, want class %v", err, tc.class)
			}
		})
	}
	t.Run("no credential", func(t *testing.T) {
		t.Setenv("IOP_TEST_OPENAI_KEY", "")
		srv, a := start(t, upstreamtest.Script{Text: []string{"x"}})
		_, err := a.Run(context.Background(), req(false), &sink{})
		var f *execution.Failure
		if !errors.As(err, &f) || f.Class != execution.FailureUnavailable || len(srv.Requests()) != 0 {
			t.Fatalf("err %v, %d upstream requests; want unavailable before any request", err, len(srv.Requests()))
		}
	})
}

func TestCancelReachesUpstream(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	for _, sc := range []upstreamtest.Script{{HangBeforeHeaders: true}, {Text: []string{"a", "b"}, ChunkDelay: time.Hour}} {
		srv, a := start(t, sc)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := a.Run(ctx, req(true), &sink{})
			done <- err
		}()
		for len(srv.Requests()) == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		var f *execution.Failure
		if err := <-done; !errors.As(err, &f) || f.Class != execution.FailureCanceled {
			t.Fatalf("Run = %v, want canceled", err)
		}
		<-srv.Requests()[0].Canceled // the upstream saw the request go away
	}
}

func TestListModelsAndHealth(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	srv, a := start(t, upstreamtest.Script{})
	ids, err := a.ListModels(context.Background())
	if err != nil || !cmp.Equal(ids, []string{"m1", "m2"}) {
		t.Fatalf("ListModels = %v, %v", ids, err)
	}
	if err := a.CheckHealth(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	if err := a.CheckHealth(context.Background()); err == nil {
		t.Fatal("health passed with the server down")
	}
}

func TestConfig(t *testing.T) {
	for _, base := range []string{"", "ftp://x", "http://user:pw@host", "http://host/?q=1"} {
		if _, err := openai.New(openai.Config{ID: "p", BaseURL: base}); err == nil {
			t.Errorf("base %q accepted", base)
		}
	}
}

// TestRunOutputLimitField: a run's output limit reaches an OpenAI
// reasoning model as max_completion_tokens (it refuses max_tokens) and any
// other model as max_tokens.
func TestRunOutputLimitField(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	for model, want := range map[string]string{"gpt-5-mini": "max_completion_tokens", "o3": "max_completion_tokens", "m1": "max_tokens", "gpt-4o": "max_tokens"} {
		srv, a := start(t, upstreamtest.Script{Text: []string{"ok"}})
		r := req(false)
		r.Target, r.Options.MaxOutputTokens = model, 77
		if _, err := a.Run(context.Background(), r, &sink{}); err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		json.Unmarshal(srv.Requests()[0].Body, &body)
		other := map[string]string{"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}[want]
		if body[want] != float64(77) || body[other] != nil {
			t.Errorf("%s: upstream got %s, want only %s", model, srv.Requests()[0].Body, want)
		}
	}
}

// TestAPIPath: a server whose OpenAI API lives under another path than
// /v1 (Gemini's, under /v1beta/openai) gets runs, model discovery and
// tunnelled requests there; without APIPath the same server is not found.
func TestAPIPath(t *testing.T) {
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"gemini-x"}, Reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"hi"}}
	}})
	t.Cleanup(up.Close)
	var paths []string
	var mu sync.Mutex
	gem := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.RequestURI())
		mu.Unlock()
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1beta/openai/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		r.URL.Path = "/v1/" + rest
		up.ServeHTTP(w, r)
	}))
	t.Cleanup(gem.Close)

	a, err := openai.New(openai.Config{ID: "gemini", BaseURL: gem.URL, APIPath: "/v1beta/openai"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.CloseIdleConnections)
	if ids, err := a.ListModels(context.Background()); err != nil || !cmp.Equal(ids, []string{"gemini-x"}) {
		t.Fatalf("ListModels = %v, %v", ids, err)
	}
	var s sink
	if _, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "gemini", Target: "gemini-x", Options: execution.Options{Stream: true},
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "hi"}}}}, &s); err != nil || s.text(false) != "hi" {
		t.Fatalf("run: %q, %v", s.text(false), err)
	}
	rec := &tunnelRecorder{}
	if err := a.Tunnel(context.Background(), &execution.TunnelRequest{ProviderID: "gemini", Method: "POST", Path: "/v1/chat/completions",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: strings.NewReader(`{"model":"gemini-x","messages":[{"role":"user","content":"x"}]}`)}, rec); err != nil || rec.status != 200 {
		t.Fatalf("tunnel: %d, %v", rec.status, err)
	}
	want := []string{"/v1beta/openai/models", "/v1beta/openai/chat/completions", "/v1beta/openai/chat/completions"}
	if d := cmp.Diff(want, paths); d != "" {
		t.Errorf("paths at the server (-want +got):\n%s", d)
	}

	plain, err := openai.New(openai.Config{ID: "gemini", BaseURL: gem.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.CloseIdleConnections)
	if err := plain.CheckHealth(context.Background()); err == nil {
		t.Fatal("healthy without APIPath, at /v1/models")
	}
	if _, err := openai.New(openai.Config{ID: "gemini", BaseURL: gem.URL, APIPath: "/../admin"}); err == nil {
		t.Fatal("a dot segment in APIPath accepted")
	}
}

// tunnelRecorder keeps a tunnelled answer's status.
type tunnelRecorder struct{ status int }

func (r *tunnelRecorder) WriteHead(status int, _ http.Header) error { r.status = status; return nil }
func (r *tunnelRecorder) Write(p []byte) (int, error)               { return len(p), nil }

// TestAnswerFailures: an answer the adapter cannot use ends the run with
// a classified failure and no usage; an error a stream reports with the
// HTTP status it stands for is classed by that status.
func TestAnswerFailures(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	const chunk = `data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"
	for _, tc := range []struct {
		name   string
		stream bool
		raw    string
		class  execution.FailureClass
		note   string
	}{
		{"whole answer null", false, `null`, execution.FailureProvider, "malformed answer"},
		{"whole answer truncated", false, `{"choices":[{"message":`, execution.FailureProvider, "malformed answer"},
		{"whole answer with trailing bytes", false, `{"choices":[{"message":{"content":"a"}}]} {"x":1}`, execution.FailureProvider, "malformed answer"},
		{"whole answer without choices", false, `{"choices":[]}`, execution.FailureProvider, "malformed answer"},
		{"stream without its end", true, chunk, execution.FailureProvider, "the provider's stream ended without a terminal"},
		{"malformed chunk", true, chunk + "data: {\"choices\":\n\n", execution.FailureProvider, "malformed stream chunk"},
		{"tool call index out of range", true, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":5000,"function":{"name":"f"}}]}}]}` + "\n\n", execution.FailureProvider, "tool call index out of range"},
		{"error with status 429", true, chunk + `data: {"error":{"message":"slow","type":"RateLimitError","code":429}}` + "\n\n", execution.FailureRateLimited, "the provider failed mid-stream (rate_limit)"},
		{"error with status 503", true, `data: {"error":{"message":"busy","code":503}}` + "\n\n", execution.FailureUnavailable, "the provider failed mid-stream (overloaded)"},
		{"error with status 400", true, `data: {"error":{"message":"bad","type":"BadRequestError","code":400}}` + "\n\n", execution.FailureInvalidRequest, "the provider failed mid-stream (invalid_request)"},
		{"error with a string code", true, chunk + `data: {"error":{"message":"x","code":"rate_limit_exceeded"}}` + "\n\n", execution.FailureProvider, "the provider failed mid-stream"},
		{"error with a code beyond statuses", true, `data: {"error":{"code":200}}` + "\n\n", execution.FailureProvider, "the provider failed mid-stream"},
		// What the Edge's decoders check, the run path now checks too.
		{"tool arguments not an object", true, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"[1]"}}]},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n", execution.FailureProvider, `the provider returned arguments for tool "f" that are not a JSON object`},
		{"whole answer's tool arguments not an object", false, `{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":"x"}}]},"finish_reason":"tool_calls"}]}`, execution.FailureProvider, `the provider returned arguments for tool "f" that are not a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a := start(t, upstreamtest.Script{Raw: tc.raw})
			var s sink
			_, err := a.Run(context.Background(), req(tc.stream), &s)
			var f *execution.Failure
			if !errors.As(err, &f) || f.Class != tc.class || f.Message != tc.note {
				t.Fatalf("err %v, want %v: %s", err, tc.class, tc.note)
			}
			if u := s.usage(); u != nil {
				t.Fatalf("usage written for a failed run: %+v", u)
			}
		})
	}
}

// TestAnswerOfTheOtherKind: a server that ignores the stream flag is read
// as what it sent (by its Content-Type), not as what was asked.
func TestAnswerOfTheOtherKind(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	whole := `{"choices":[{"index":0,"message":{"role":"assistant","content":"hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}`
	stream := `data: {"choices":[{"index":0,"delta":{"content":"hi there"}}]}` + "\n\n" +
		`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}` + "\n\n" + "data: [DONE]\n\n"
	for _, tc := range []struct {
		asked bool
		raw   string
	}{{false, stream}, {true, whole}} {
		_, a := start(t, upstreamtest.Script{Raw: tc.raw})
		var s sink
		res, err := a.Run(context.Background(), req(tc.asked), &s)
		if err != nil || s.text(false) != "hi there" || res.StopReason != "stop" || s.usage() == nil || s.usage().OutputTokens != 2 {
			t.Fatalf("stream asked %v: %v, %q %q %+v", tc.asked, err, s.text(false), res.StopReason, s.usage())
		}
	}
}

// TestRefusal: a refusal in place of content (structured outputs) is the
// run's text, and the run stops as content_filter, streamed or whole.
func TestRefusal(t *testing.T) {
	t.Setenv("IOP_TEST_OPENAI_KEY", "node-key")
	for name, tc := range map[string]struct {
		stream bool
		raw    string
	}{
		"stream": {true, `data: {"choices":[{"index":0,"delta":{"refusal":"I can't"}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{"refusal":" help."},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n"},
		"whole": {false, `{"choices":[{"message":{"content":null,"refusal":"I can't help."},"finish_reason":"stop"}]}`},
	} {
		t.Run(name, func(t *testing.T) {
			_, a := start(t, upstreamtest.Script{Raw: tc.raw})
			var s sink
			res, err := a.Run(context.Background(), req(tc.stream), &s)
			if err != nil || res.StopReason != "content_filter" || s.text(false) != "I can't help." {
				t.Fatalf("%v %+v %q", err, res, s.text(false))
			}
		})
	}
}
