package edge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/cli"
	"github.com/iop-dev/iop/node"
)

// cliRig is a rig whose Node also hosts command-line providers, which
// serve normalized runs (no tunnel): every client format is rendered from
// the run's events. Models: "via-cat" (cat: the answer is the prompt),
// "via-fail" (exits 7 before any output), "via-slowfail" (the same after
// 100 ms), "via-sleep" (silent for a minute), "via-late" (silent for wait,
// then cat), "via-broken" (an executable the kernel cannot start: the Node
// cannot run it), "via-latin1" (prints "café ok" in Latin-1: not UTF-8).
func cliRig(t *testing.T, wait time.Duration, mutate func(*edge.Config)) *rig {
	t.Helper()
	return newRig(t, withCLI(t, wait, rigOpts{mutate: mutate}))
}

// unixTool returns the path of a Unix command a command-line provider
// runs, or skips the test where there is none.
func unixTool(t *testing.T, name string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("cli providers need a Unix host")
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skip("no " + name)
	}
	return p
}

// withCLI adds cliRig's providers and routes to o.
func withCLI(t *testing.T, wait time.Duration, o rigOpts) rigOpts {
	t.Helper()
	sh, cat := unixTool(t, "sh"), unixTool(t, "cat")
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, []byte("#!/nonexistent/iop-test-interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var specs []nodes.ProviderSpec
	var routes []edge.Route
	for _, c := range []struct {
		id   string
		argv []string
	}{
		{"cat", []string{cat}},
		{"fail", []string{sh, "-c", "exit 7"}},
		{"slowfail", []string{sh, "-c", "sleep 0.1; exit 7"}},
		{"sleep", []string{sh, "-c", "exec sleep 60"}},
		{"late", []string{sh, "-c", "sleep " + seconds(wait) + "; exec cat"}},
		{"broken", []string{broken}},
		{"latin1", []string{sh, "-c", `printf 'caf\351 ok'`}},
	} {
		a, err := cli.New(cli.Config{ID: "cli-" + c.id, Argv: c.argv, Models: []string{"cli-model"}})
		if err != nil {
			t.Fatal(err)
		}
		o.hosted = append(o.hosted, node.Hosted{Provider: a})
		specs = append(specs, nodes.ProviderSpec{ID: "cli-" + c.id, Adapter: "cli", Category: execution.CategoryCLI, Models: []string{"cli-model"}, Capacity: 2})
		routes = append(routes, edge.Route{Model: "via-" + c.id, Targets: []edge.Target{{ProviderID: "cli-" + c.id, Model: "cli-model"}}})
	}
	mutate := o.mutate
	o.mutate = func(cfg *edge.Config) {
		cfg.Nodes[0].Providers = append(cfg.Nodes[0].Providers, specs...)
		cfg.Routes = append(cfg.Routes, routes...)
		if mutate != nil {
			mutate(cfg)
		}
	}
	return o
}

// seconds is d as sleep(1) takes it.
func seconds(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }

// TestRunOutputNotUTF8: a command whose output is not UTF-8 (Latin-1
// here) is answered, its stray bytes replaced by U+FFFD, as JSON encoding
// replaces them; the run's events carry text as protobuf strings, which
// must be UTF-8, and the run failed ("run stream closed") before.
func TestRunOutputNotUTF8(t *testing.T) {
	r := cliRig(t, 0, nil)
	res, err := r.client.Chat.Completions.New(ctx(t), chatParams("via-latin1", "x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Choices[0].Message.Content; got != "caf\uFFFD ok" || res.Choices[0].FinishReason != "stop" {
		t.Fatalf("answer %q, finish %q", got, res.Choices[0].FinishReason)
	}
	r.settled()
}

// TestRunEveryClientFormat: a run's output reaches each client format,
// buffered and streamed, through the official SDKs; the conversation the
// command reads is the one the client sent.
func TestRunEveryClientFormat(t *testing.T) {
	r := cliRig(t, 0, nil)

	t.Run("chat", func(t *testing.T) {
		res, err := r.client.Chat.Completions.New(ctx(t), chatParams("via-cat", "hello from chat"))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Choices) != 1 || res.Choices[0].Message.Content != "hello from chat" || res.Choices[0].FinishReason != "stop" || res.Model != "via-cat" {
			t.Fatalf("answer %s", res.RawJSON())
		}
	})
	t.Run("chat streamed", func(t *testing.T) {
		params := chatParams("via-cat", "hello from a stream")
		params.Messages = append([]openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief")}, params.Messages...)
		s := r.client.Chat.Completions.NewStreaming(ctx(t), params)
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		want := "[system]\nbe brief\n\n[user]\nhello from a stream"
		if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want || acc.Choices[0].FinishReason != "stop" {
			t.Fatalf("accumulated %+v, want content %q", acc.Choices, want)
		}
	})
	t.Run("responses", func(t *testing.T) {
		res, err := r.client.Responses.New(ctx(t), responses.ResponseNewParams{Model: "via-cat",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello from responses")}})
		if err != nil {
			t.Fatal(err)
		}
		if res.OutputText() != "hello from responses" || res.Status != "completed" {
			t.Fatalf("answer %s", res.RawJSON())
		}
	})
	ac := anthropic.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey(apiKey), aoption.WithMaxRetries(0))
	params := anthropic.MessageNewParams{Model: "via-cat", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hello from messages"))}}
	t.Run("messages", func(t *testing.T) {
		m, err := ac.Messages.New(ctx(t), params)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Content) != 1 || m.Content[0].Text != "hello from messages" || m.StopReason != anthropic.StopReasonEndTurn {
			t.Fatalf("answer %s", m.RawJSON())
		}
	})
	t.Run("messages streamed", func(t *testing.T) {
		s := ac.Messages.NewStreaming(ctx(t), params)
		var acc anthropic.Message
		for s.Next() {
			if err := acc.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Content) != 1 || acc.Content[0].Text != "hello from messages" || acc.StopReason != anthropic.StopReasonEndTurn {
			t.Fatalf("accumulated %+v", acc)
		}
	})
	r.settled()
	if u := r.usageOf("alice"); u.Requests != 5 {
		t.Fatalf("usage %+v, want 5 requests", u)
	}
}

// TestRunFailure: a run that fails before any output is answered with
// its failure's HTTP status in the client's format, streamed or not (no
// 200 stream with an error inside, which clients would not retry), also
// when the command takes a while to fail, with nothing of the command's
// own output or exit status in it; a run the Node cannot start is 503
// with Retry-After (Anthropic: 529 overloaded_error).
func TestRunFailure(t *testing.T) {
	r := cliRig(t, 0, nil)
	for _, tc := range []struct {
		model  string
		status int
		// anthropicStatus and anthropicType are the Messages API's.
		anthropicStatus int
		anthropicType   string
		retryAfter      string
	}{
		{"via-fail", http.StatusBadGateway, http.StatusBadGateway, "api_error", ""},
		{"via-slowfail", http.StatusBadGateway, http.StatusBadGateway, "api_error", ""},
		{"via-broken", http.StatusServiceUnavailable, 529, "overloaded_error", "1"},
	} {
		for _, stream := range []bool{false, true} {
			name := fmt.Sprintf("%s stream=%v", tc.model, stream)
			body := fmt.Sprintf(`{"model":%q,"stream":%v,"max_tokens":10,"messages":[{"role":"user","content":"x"}]}`, tc.model, stream)
			for _, api := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages"} {
				b := body
				if api == "/v1/responses" {
					b = fmt.Sprintf(`{"model":%q,"stream":%v,"input":"x"}`, tc.model, stream)
				}
				req, _ := http.NewRequestWithContext(ctx(t), "POST", r.url+api, strings.NewReader(b))
				req.Header.Set("Authorization", "Bearer "+apiKey)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status, typ := tc.status, `"error":{`
				if api == "/v1/messages" {
					status, typ = tc.anthropicStatus, `"type":"`+tc.anthropicType+`"`
				}
				if resp.StatusCode != status || !strings.Contains(string(got), typ) || resp.Header.Get("Content-Type") != "application/json" ||
					resp.Header.Get("Retry-After") != tc.retryAfter || strings.Contains(string(got), "status 7") {
					t.Errorf("%s %s: %d %q Retry-After %q\n%s", name, api, resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After"), got)
				}
			}
		}
	}
	_, err := r.client.Chat.Completions.New(ctx(t), chatParams("via-fail", "x"))
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusBadGateway {
		t.Fatalf("SDK: %v", err)
	}
	r.settled()
}

// TestRunClientCancel: a client that leaves ends the run (the command is
// killed) and its lease is released.
func TestRunClientCancel(t *testing.T) {
	r := cliRig(t, 0, nil)
	for _, stream := range []bool{false, true} {
		c, cancel := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() {
			params := chatParams("via-sleep", "x")
			if stream {
				s := r.client.Chat.Completions.NewStreaming(c, params)
				for s.Next() {
				}
				done <- s.Err()
				s.Close()
				return
			}
			_, err := r.client.Chat.Completions.New(c, params)
			done <- err
		}()
		waitInFlight(t, r, "cli-sleep", 1)
		cancel()
		if err := <-done; err == nil {
			t.Fatalf("stream %v: a cancelled request succeeded", stream)
		}
		r.settled()
	}
}

// TestRunDeadline: the request's hard deadline ends a silent run with
// 504 (buffered) or the format's timeout error (streamed).
func TestRunDeadline(t *testing.T) {
	r := cliRig(t, 0, func(c *edge.Config) { c.RequestTimeout = 300 * time.Millisecond })
	_, err := r.client.Chat.Completions.New(ctx(t), chatParams("via-sleep", "x"))
	var oerr *openai.Error
	if !errors.As(err, &oerr) || oerr.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("buffered: %v", err)
	}
	resp := r.openChatStream(t, "via-sleep")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "exceeded its deadline") || strings.Contains(string(body), "[DONE]") {
		t.Fatalf("streamed: %d\n%s", resp.StatusCode, body)
	}
	r.settled()
}

// TestRunSilenceKeepsStreamAlive: a run silent longer than KeepAlive
// keeps its stream open with comments, then delivers its output; silence
// never ends a run.
func TestRunSilenceKeepsStreamAlive(t *testing.T) {
	r := cliRig(t, 300*time.Millisecond, func(c *edge.Config) { c.KeepAlive = 20 * time.Millisecond })
	body := string(r.streamChat(t, "via-late"))
	i := strings.Index(body, ": keep-alive")
	j := strings.Index(body, `"content":"x"`)
	if i < 0 || j < 0 || i > j || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		t.Fatalf("want keep-alive comments, then the output, then [DONE]:\n%s", body)
	}
	r.settled()
}

// waitInFlight waits until the provider has n runs in flight.
func waitInFlight(t *testing.T, r *rig, provider string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, nd := range r.srv.Nodes() {
			for _, p := range nd.Providers {
				if p.ID == provider && p.InFlight == n {
					return
				}
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s never had %d runs in flight", provider, n)
}

// TestRunCompaction: a command-line provider compacts a conversation as
// any provider without compaction of its own does, by answering the
// request for a summary (cat answers with the conversation and the
// request); one with tools it cannot carry is refused before it runs.
func TestRunCompaction(t *testing.T) {
	r := cliRig(t, 0, nil)
	oa := map[string]string{"Authorization": "Bearer " + apiKey}
	const user = `{"type":"message","role":"user","content":[{"type":"input_text","text":"sum it up"}]}`
	resp, out := r.do(t, "POST", "/v1/responses/compact", `{"model":"via-cat","input":[`+user+`,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]}]}`, oa)
	var got struct {
		Object string
		Output []json.RawMessage
	}
	if err := json.Unmarshal([]byte(out), &got); resp.StatusCode != 200 || err != nil || got.Object != "response.compaction" || len(got.Output) != 2 ||
		string(got.Output[0]) != user || !strings.Contains(string(got.Output[1]), "context window is nearly full") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	resp, out = r.do(t, "POST", "/v1/responses/compact", `{"model":"via-cat","input":[`+user+`],"tools":[{"type":"function","name":"shell"}]}`, oa)
	if resp.StatusCode != 400 || !strings.Contains(out, "tools") {
		t.Fatalf("with tools: %d %s", resp.StatusCode, out)
	}
	r.settled()
}
