package edge_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"go.uber.org/goleak"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/anthropic"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/testpki"
	"github.com/iop-dev/iop/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	nodeToken = "node-token-0123456789abcdef0123"
	apiKey    = "sk-test-0123456789abcdef0123456789abcdef"
)

// rig is an Edge, one Node and a fake upstream, all real, on loopback.
type rig struct {
	cfg      edge.Config
	t        testing.TB
	srv      *edge.Server
	url      string
	nodeAddr string // the Edge's Node listener
	upstream *upstreamtest.Server
	client   openai.Client
	// stopNode stops the Node and returns when its Run has.
	stopNode func()
	// drainNode shuts the Node down gracefully (Runtime.Shutdown, the
	// work in flight given grace) and starts a new Runtime in its place,
	// as a restart of the node daemon does.
	drainNode func(grace time.Duration)
}

type rigOpts struct {
	reply        func(*upstreamtest.Request) upstreamtest.Script
	capacity     int
	queueTimeout time.Duration
	keepAlive    time.Duration
	maxBody      int64
	mutate       func(*edge.Config)
	// nodeModels are the models the Node allows on providers "local",
	// "claude", "resp-only" and "chat-only" and the upstream serves; nil
	// means just "up-model".
	nodeModels []string
	// hosted are more providers for the Node to host (mutate adds their
	// specs and routes).
	hosted []node.Hosted
	// prepare, when set, is called with the Server before it serves.
	prepare func(*edge.Server)
}

func newRig(t testing.TB, o rigOpts) *rig {
	t.Helper()
	if o.capacity == 0 {
		o.capacity = 8
	}
	if o.nodeModels == nil {
		o.nodeModels = []string{"up-model"}
	}
	up := upstreamtest.New(upstreamtest.Config{Models: o.nodeModels, Reply: o.reply})
	upURL := up.Start()
	t.Cleanup(up.Close)
	oa, _ := oaadapter.New(oaadapter.Config{ID: "local", BaseURL: upURL, Models: o.nodeModels})
	an, _ := anthropic.New(anthropic.Config{ID: "claude", BaseURL: upURL, Models: o.nodeModels})
	// Two more views of the same upstream: one that speaks only Responses
	// and one that speaks only Chat Completions (ProviderSpec.APIs).
	ro, _ := oaadapter.New(oaadapter.Config{ID: "resp-only", BaseURL: upURL, Models: o.nodeModels})
	co, _ := oaadapter.New(oaadapter.Config{ID: "chat-only", BaseURL: upURL, Models: o.nodeModels})

	cfg := edge.Config{
		Epoch: 1,
		Nodes: []nodes.Record{{ID: "box", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "local", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: o.capacity},
			{ID: "claude", Adapter: "anthropic", Category: execution.CategoryAPI, Models: []string{"up-model"}, Capacity: o.capacity},
			{ID: "resp-only", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: o.capacity, APIs: []string{"responses"}},
			{ID: "chat-only", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: o.capacity, APIs: []string{"chat", "embeddings"}},
		}}},
		APIKeys: []edge.APIKey{
			{Name: "alice", Hash: edge.HashKey(apiKey), Models: []string{"*"}},
			{Name: "bob", Hash: edge.HashKey(apiKey + "-bob"), Models: []string{"via-anthropic"}},
		},
		Routes: []edge.Route{
			{Model: "gpt-local", Targets: []edge.Target{{ProviderID: "local", Model: "up-model"}}},
			{Model: "via-anthropic", Targets: []edge.Target{{ProviderID: "claude", Model: "up-model"}}},
			{Model: "via-responses", Targets: []edge.Target{{ProviderID: "resp-only", Model: "up-model"}}},
			{Model: "via-chat", Targets: []edge.Target{{ProviderID: "chat-only", Model: "up-model"}}},
		},
		QueueTimeout: o.queueTimeout,
		KeepAlive:    o.keepAlive,
		MaxBodyBytes: o.maxBody,
	}
	if o.mutate != nil {
		o.mutate(&cfg)
	}
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.prepare != nil {
		o.prepare(srv)
	}
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	nodeCfg := node.Config{EdgeAddr: nodeLn.Addr().String(), NodeID: "box", Token: nodeToken,
		Providers: append([]node.Hosted{{Provider: oa}, {Provider: an}, {Provider: ro}, {Provider: co}}, o.hosted...), Backoff: node.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	// The Node's Runtime, replaced by drainNode.
	var nodeMu sync.Mutex
	var rt *node.Runtime
	var nodeDone chan struct{}
	startNode := func() {
		next, err := node.New(nodeCfg)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		nodeMu.Lock()
		rt, nodeDone = next, done
		nodeMu.Unlock()
		wg.Go(func() { next.Run(ctx); close(done) })
	}
	current := func() (*node.Runtime, chan struct{}) {
		nodeMu.Lock()
		defer nodeMu.Unlock()
		return rt, nodeDone
	}
	startNode()
	t.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
	})
	for {
		if _, ok := srv.Registry().Current("box"); ok {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	url := "http://" + apiLn.Addr().String()
	return &rig{cfg: cfg, t: t, srv: srv, url: url, nodeAddr: nodeLn.Addr().String(), upstream: up,
		stopNode: func() { cancel(); _, done := current(); <-done },
		drainNode: func(grace time.Duration) {
			cur, done := current()
			gctx, gcancel := context.WithTimeout(context.Background(), grace)
			cur.Shutdown(gctx)
			gcancel()
			<-done
			startNode()
		},
		client: openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey(apiKey), option.WithMaxRetries(0))}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// calls returns the upstream requests other than health checks.
func (r *rig) calls() []*upstreamtest.Request {
	var out []*upstreamtest.Request
	for _, q := range r.upstream.Requests() {
		if q.API != "models" {
			out = append(out, q)
		}
	}
	return out
}

// oneCallCanceled checks that the upstream saw exactly one call and waits
// for its cancellation.
func (r *rig) oneCallCanceled(t *testing.T) {
	t.Helper()
	calls := r.calls()
	if len(calls) != 1 {
		t.Fatalf("%d upstream calls", len(calls))
	}
	select {
	case <-calls[0].Canceled:
	case <-ctx(t).Done():
		t.Fatal("the upstream request was not cancelled")
	}
}

// settled waits until every lease was released and nothing is in flight.
func (r *rig) settled() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := r.srv.PoolStats()
		inflight := 0
		for _, n := range r.srv.Nodes() {
			for _, p := range n.Providers {
				inflight += p.InFlight + p.Queued
			}
		}
		if st.Granted == st.Released && inflight == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("leases not settled: %+v, %d in flight or queued", st, inflight)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func chatParams(model, prompt string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
}

func TestChat(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		sc.Usage = upstreamtest.Usage{InputTokens: 12, OutputTokens: 3}
		return sc
	}})
	for _, model := range []string{"gpt-local", "via-anthropic"} {
		t.Run(model+"/buffered", func(t *testing.T) {
			c, err := r.client.Chat.Completions.New(ctx(t), chatParams(model, "hello there"))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Choices[0].Message.Content; got != "echo: hello there" || c.Choices[0].FinishReason != "stop" || c.Usage.PromptTokens != 12 {
				t.Fatalf("answer %q finish %q usage %+v", got, c.Choices[0].FinishReason, c.Usage)
			}
		})
		t.Run(model+"/streamed", func(t *testing.T) {
			for _, includeUsage := range []bool{false, true} {
				p := chatParams(model, "stream me")
				if includeUsage {
					p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
				}
				s := r.client.Chat.Completions.NewStreaming(ctx(t), p)
				acc := openai.ChatCompletionAccumulator{}
				sawUsageChunk := false
				for s.Next() {
					ch := s.Current()
					acc.AddChunk(ch)
					if len(ch.Choices) == 0 && ch.Usage.TotalTokens > 0 {
						sawUsageChunk = true
					}
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				if got := acc.Choices[0].Message.Content; got != "echo: stream me" || acc.Choices[0].FinishReason != "stop" {
					t.Fatalf("accumulated %q finish %q", got, acc.Choices[0].FinishReason)
				}
				if sawUsageChunk != includeUsage {
					t.Fatalf("include_usage=%v but usage chunk seen=%v", includeUsage, sawUsageChunk)
				}
			}
		})
	}
	// The tunnel path always asked the upstream for usage and rewrote only
	// the model.
	for _, q := range r.calls() {
		if q.API == "chat" && (q.Model != "up-model" || (q.Stream && !q.IncludeUsage)) {
			t.Errorf("upstream saw model %q stream %v include_usage %v", q.Model, q.Stream, q.IncludeUsage)
		}
	}
	r.settled()
	if alice := r.usageOf("alice"); alice.Requests != 6 || alice.InputTokens != 6*12 || alice.OutputTokens != 6*3 {
		t.Fatalf("usage %+v", alice)
	}
}

func TestResponses(t *testing.T) {
	r := newRig(t, rigOpts{reply: upstreamtest.Echo})
	for _, model := range []string{"gpt-local", "via-anthropic"} {
		t.Run(model+"/buffered", func(t *testing.T) {
			resp, err := r.client.Responses.New(ctx(t), responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi responses")}})
			if err != nil {
				t.Fatal(err)
			}
			if resp.OutputText() != "echo: hi responses" || resp.Status != "completed" {
				t.Fatalf("output %q status %q", resp.OutputText(), resp.Status)
			}
		})
		t.Run(model+"/streamed", func(t *testing.T) {
			var text string
			completed := r.streamResponses(t, responses.ResponseNewParams{Model: model, Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stream responses")}},
				func(ev responses.ResponseStreamEventUnion) {
					if ev.Type == "response.output_text.delta" {
						text += ev.Delta
					}
				})
			if text != "echo: stream responses" || completed.OutputText() != text {
				t.Fatalf("streamed %q completed %v", text, completed)
			}
		})
	}
	r.settled()
}

// streamResponses streams a Responses request through the official SDK and
// returns the response its response.completed event carries, failing the
// test without one; each, when not nil, sees every event.
func (r *rig) streamResponses(t *testing.T, params responses.ResponseNewParams, each func(responses.ResponseStreamEventUnion)) *responses.Response {
	t.Helper()
	s := r.client.Responses.NewStreaming(ctx(t), params)
	var final *responses.Response
	for s.Next() {
		ev := s.Current()
		if each != nil {
			each(ev)
		}
		if ev.Type == "response.completed" {
			c := ev.Response
			final = &c
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if final == nil {
		t.Fatal("no response.completed")
	}
	return final
}

func TestEmbeddingsAndModels(t *testing.T) {
	r := newRig(t, rigOpts{})
	e, err := r.client.Embeddings.New(ctx(t), openai.EmbeddingNewParams{Model: "gpt-local", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Data) != 2 || len(e.Data[0].Embedding) != 16 {
		t.Fatalf("embeddings %+v", e.Data)
	}
	// Embeddings on a route whose provider cannot embed: refused, not sent.
	_, err = r.client.Embeddings.New(ctx(t), openai.EmbeddingNewParams{Model: "via-anthropic", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("a")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Fatalf("embeddings on an anthropic route: %v", err)
	}
	page, err := r.client.Models.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "gpt-local,via-anthropic,via-chat,via-responses" {
		t.Fatalf("models %v", ids)
	}
	bob := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(apiKey+"-bob"), option.WithMaxRetries(0))
	page, _ = bob.Models.List(ctx(t))
	if len(page.Data) != 1 || page.Data[0].ID != "via-anthropic" {
		t.Fatalf("bob sees %+v", page.Data)
	}
	if _, err := bob.Chat.Completions.New(ctx(t), chatParams("gpt-local", "x")); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("bob on a model he may not use: %v", err)
	}
}

func TestErrors(t *testing.T) {
	r := newRig(t, rigOpts{maxBody: 1 << 10})
	for _, tc := range []struct {
		name, key, body string
		status          int
		typ             string
	}{
		{"missing key", "", `{"model":"gpt-local","messages":[]}`, 401, "invalid_request_error"},
		{"wrong key", "sk-wrong", `{"model":"gpt-local","messages":[]}`, 401, "invalid_request_error"},
		{"unknown model", apiKey, `{"model":"nope","messages":[{"role":"user","content":"x"}]}`, 404, "invalid_request_error"},
		{"not json", apiKey, `{"model":`, 400, "invalid_request_error"},
		{"case-smuggled model", apiKey, `{"model":"gpt-local","Model":"other","messages":[]}`, 400, "invalid_request_error"},
		{"too large", apiKey, `{"model":"gpt-local","messages":[{"role":"user","content":"` + strings.Repeat("x", 2048) + `"}]}`, 413, "invalid_request_error"},
		{"a negative limit to a provider of another format", apiKey, `{"model":"via-anthropic","max_tokens":-1,"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
		{"an untranslatable tool to a provider of another format", apiKey, `{"model":"via-anthropic","tools":[{"type":"web_search_preview"}],"messages":[{"role":"user","content":"x"}]}`, 400, "invalid_request_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions", strings.NewReader(tc.body))
			if tc.key != "" {
				req.Header.Set("Authorization", "Bearer "+tc.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), `"type":"`+tc.typ+`"`) || resp.Header.Get("X-Request-Id") == "" {
				t.Fatalf("status %d body %s request id %q", resp.StatusCode, body, resp.Header.Get("X-Request-Id"))
			}
		})
	}
	if len(r.calls()) != 0 {
		t.Fatalf("a refused request reached the upstream")
	}
}

// TestAuthorizationSchemes: the Bearer scheme's name is matched in any
// case (RFC 9110; clients send "bearer"), an Authorization header of
// another scheme presents no key even beside a valid x-api-key, and
// x-api-key alone is read.
func TestAuthorizationSchemes(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, tc := range []struct {
		name          string
		auth, xAPIKey string
		status        int
	}{
		{"Bearer", "Bearer " + apiKey, "", 200},
		{"bearer", "bearer " + apiKey, "", 200},
		{"BEARER, padded", "BEARER  " + apiKey + " ", "", 200},
		{"x-api-key", "", apiKey, 200},
		{"no space", "Bearer" + apiKey, "", 401},
		{"empty token", "Bearer ", "", 401},
		{"another scheme", "Basic " + apiKey, "", 401},
		{"another scheme beside x-api-key", "Basic YWxpY2U6eA==", apiKey, 401},
		{"a wrong bearer beside x-api-key", "Bearer sk-wrong", apiKey, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header := map[string]string{}
			if tc.auth != "" {
				header["Authorization"] = tc.auth
			}
			if tc.xAPIKey != "" {
				header["X-Api-Key"] = tc.xAPIKey
			}
			status, body := r.get(t, "/v1/models", header)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if tc.status == 200 && !strings.Contains(body, `"gpt-local"`) {
				t.Fatalf("models: %s", body)
			}
		})
	}
	// A credential header sent twice presents no key, even when both
	// values are the key: which one a proxy on the way reads may differ.
	for _, name := range []string{"Authorization", "X-Api-Key"} {
		value := apiKey
		if name == "Authorization" {
			value = "Bearer " + apiKey
		}
		req, _ := http.NewRequest("GET", r.url+"/v1/models", nil)
		req.Header.Add(name, value)
		req.Header.Add(name, value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s twice: %d, want 401", name, resp.StatusCode)
		}
	}
}

func TestQueueTimeout(t *testing.T) {
	release := make(chan struct{})
	r := newRig(t, rigOpts{capacity: 1, queueTimeout: 50 * time.Millisecond, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		if strings.Contains(q.Prompt, "hold") {
			<-release
		}
		return sc
	}})
	held := make(chan error, 1)
	go func() {
		_, err := r.client.Chat.Completions.New(context.Background(), chatParams("gpt-local", "hold the slot"))
		held <- err
	}()
	for len(r.calls()) == 0 {
		time.Sleep(time.Millisecond)
	}
	req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-local","messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "queue timeout") {
		t.Fatalf("status %d retry-after %q body %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	r.settled()
}

func TestClientDisconnectMidStream(t *testing.T) {
	for _, model := range []string{"gpt-local", "via-anthropic"} {
		t.Run(model, func(t *testing.T) {
			r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
				return upstreamtest.Script{Text: []string{"first", " second", " third"}, ChunkDelay: time.Hour}
			}})
			c, cancel := context.WithCancel(ctx(t))
			s := r.client.Chat.Completions.NewStreaming(c, chatParams(model, "long"))
			got := ""
			for s.Next() {
				for _, ch := range s.Current().Choices {
					got += ch.Delta.Content
				}
				if got == "first" {
					break
				}
			}
			cancel() // the client goes away mid-stream
			s.Close()
			r.oneCallCanceled(t)
			r.settled()
		})
	}
}

// TestNodeLinkLossCancelsUpstream: when the Edge-Node connection ends
// mid-answer, the Node cancels the upstream call it was relaying; nothing
// but the connection's end tells it to.
func TestNodeLinkLossCancelsUpstream(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"first", " second"}, ChunkDelay: time.Hour}
	}})
	s := r.client.Chat.Completions.NewStreaming(ctx(t), chatParams("gpt-local", "long"))
	defer s.Close()
	if !s.Next() {
		t.Fatalf("no first chunk: %v", s.Err())
	}
	gen, ok := r.srv.Registry().Current("box")
	if !ok {
		t.Fatal("node not connected")
	}
	if err := r.srv.Registry().Disconnect("box", gen, "test: link lost"); err != nil {
		t.Fatal(err)
	}
	r.oneCallCanceled(t)
	for s.Next() {
	}
	if s.Err() == nil {
		t.Fatal("the stream ended cleanly after its node's link was lost")
	}
	r.settled()
}

func TestSilentStreamKeepAlive(t *testing.T) {
	r := newRig(t, rigOpts{keepAlive: 20 * time.Millisecond, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		sc.TTFT = 200 * time.Millisecond
		return sc
	}})
	for _, model := range []string{"gpt-local", "via-anthropic"} {
		req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"wait"}]}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), ": keep-alive") || !strings.Contains(string(body), "data: [DONE]") {
			t.Fatalf("%s: stream without keep-alive comments or [DONE]:\n%s", model, body)
		}
	}
	r.settled()
}

// TestStreamHeadBeforeSlowFirstEvent: the Edge and the Node hold a
// stream's head briefly for its first event, so that the two leave
// together; a provider slow to its first event still has its head reach
// the client before that event, on the raw and on the translated path.
func TestStreamHeadBeforeSlowFirstEvent(t *testing.T) {
	gates := make(chan chan struct{}, 1)
	// No keep-alive comment comes before the test's deadline, so only the
	// head's own timers can start the answer.
	r := newRig(t, rigOpts{keepAlive: time.Minute, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		sc.Gate = <-gates
		return sc
	}})
	for _, model := range []string{"gpt-local", "via-anthropic"} {
		gate := make(chan struct{})
		gates <- gate
		req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions", strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"slow"}]}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx(t))) // returns on the head, while the gate holds the first event
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("%s: head %d %q", model, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		close(gate)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(body), "data: [DONE]") {
			t.Fatalf("%s: stream %v:\n%s", model, err, body)
		}
	}
	r.settled()
}

// TestEventAheadOfCommentLeavesAtOnce: an event that arrives with a
// comment behind it (a provider's keep-alive) reaches the client while
// the provider is silent after them. A relay that took the buffered
// comment for another event would hold the event back for a burst that
// never comes, until the provider's next bytes.
func TestEventAheadOfCommentLeavesAtOnce(t *testing.T) {
	holds := make(chan chan struct{}, 1)
	// No keep-alive comment of the Edge's own comes before the test's
	// deadline to flush the event out.
	r := newRig(t, rigOpts{keepAlive: time.Minute, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"first", "second"}, Comment: "PROCESSING", Hold: <-holds}
	}})
	for _, c := range []struct {
		path, first, second, end string
		open                     func() *http.Response
	}{
		{"raw", `"content":"first"`, `"content":"second"`, "data: [DONE]", func() *http.Response { return r.openChatStream(t, "gpt-local") }},
		{"translated", `"text":"first"`, `"text":"second"`, "event: message_stop", func() *http.Response { return r.openMessagesStream(t, "gpt-local") }},
	} {
		hold := make(chan struct{})
		holds <- hold
		resp := c.open()
		lines := bufio.NewScanner(resp.Body)
		seen := make(chan error, 1)
		go func() {
			for lines.Scan() {
				if strings.Contains(lines.Text(), c.first) {
					seen <- nil
					return
				}
			}
			seen <- fmt.Errorf("%s: stream ended before the first content event: %v", c.path, lines.Err())
		}()
		select {
		case err := <-seen:
			if err != nil {
				close(hold)
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			close(hold)
			t.Fatalf("%s: the first content event did not reach the client while the provider was silent", c.path)
		}
		close(hold)
		var rest strings.Builder
		for lines.Scan() {
			rest.WriteString(lines.Text() + "\n")
		}
		resp.Body.Close()
		if !strings.Contains(rest.String(), c.second) || !strings.Contains(rest.String(), c.end) {
			t.Fatalf("%s: the rest of the stream:\n%s", c.path, rest.String())
		}
	}
	r.settled()
}

// TestMalformedEventEndsStream: events that arrive in one burst with a
// malformed one behind them reach the client, in order, and then the
// API's error event ends the stream; the malformed event is not passed on.
func TestMalformedEventEndsStream(t *testing.T) {
	good := func(s string) string {
		return `data: {"choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
	}
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Raw: good("one") + good("two") + "data: {broken\n\n" + good("three")}
	}})
	body := r.streamChat(t, "gpt-local")
	var got []string
	for _, ev := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		got = append(got, strings.TrimPrefix(ev, "data: "))
	}
	if len(got) != 3 || !strings.Contains(got[0], `"one"`) || !strings.Contains(got[1], `"two"`) || !strings.Contains(got[2], `"error"`) {
		t.Fatalf("stream:\n%s", body)
	}
	r.settled()
}

// TestResponsesStreamBrokenOff: a Responses stream passed through that
// the provider breaks off, or spoils with a malformed event, after its
// response was created ends with that response's failure (its id, the
// next sequence number, the error), the terminal Codex reads; one spoiled
// before any response was created ends with the error event.
func TestResponsesStreamBrokenOff(t *testing.T) {
	created := "event: response.created\n" + `data: {"type":"response.created","sequence_number":0,"response":{"id":"resp_up","object":"response","status":"in_progress"}}` + "\n\n"
	added := "event: response.output_item.added\n" + `data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message","id":"m1"}}` + "\n\n"
	for _, tc := range []struct {
		name, raw string
		want      []string // the event types the client sees
	}{
		{"ended", created + added, []string{"response.created", "response.output_item.added", "response.failed"}},
		{"malformed", created + added + "event: x\ndata: {broken\n\n", []string{"response.created", "response.output_item.added", "response.failed"}},
		{"malformed first", "event: x\ndata: {broken\n\n", []string{"error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: tc.raw} }})
			resp, body := r.do(t, "POST", "/v1/responses", `{"model":"gpt-local","stream":true,"input":"x"}`, map[string]string{"Authorization": "Bearer " + apiKey})
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var types []string
			var last map[string]any
			for _, ev := range strings.Split(strings.TrimSpace(body), "\n\n") {
				typ, data, _ := strings.Cut(ev, "\n")
				types = append(types, strings.TrimPrefix(typ, "event: "))
				last = nil
				if err := json.Unmarshal([]byte(strings.TrimPrefix(data, "data: ")), &last); err != nil {
					t.Fatalf("event %q: %v", ev, err)
				}
			}
			if !slices.Equal(types, tc.want) {
				t.Fatalf("events %v, want %v:\n%s", types, tc.want, body)
			}
			if tc.want[len(tc.want)-1] == "response.failed" {
				resp, _ := last["response"].(map[string]any)
				e, _ := resp["error"].(map[string]any)
				if last["sequence_number"] != 2.0 || resp["id"] != "resp_up" || resp["status"] != "failed" || e["message"] == nil {
					t.Fatalf("terminal %v", last)
				}
			}
			r.settled()
		})
	}
}

// TestHeaderNotUTF8: an Anthropic header the Edge passes to the provider
// whose value is not UTF-8 (Latin-1 here, legal in HTTP) is refused with
// 400, not sent on as a request that fails on the way (it was answered
// 503, "could not be reached", as if the provider were down); the
// provider is not called and serves the next request.
func TestHeaderNotUTF8(t *testing.T) {
	r := newRig(t, rigOpts{})
	body := `{"model":"via-anthropic","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`
	resp, out := r.do(t, "POST", "/v1/messages", body, map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01", "Anthropic-Beta": "caf\xe9"})
	if resp.StatusCode != 400 || !strings.Contains(out, `"type":"invalid_request_error"`) || !strings.Contains(out, "Anthropic-Beta") {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	if n := len(r.calls()); n != 0 {
		t.Fatalf("the provider was called %d times", n)
	}
	if resp, out := r.do(t, "POST", "/v1/messages", body, map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}); resp.StatusCode != 200 {
		t.Fatalf("next request: %d %s", resp.StatusCode, out)
	}
	r.settled()
}

// TestStreamUsageWithWhitespace: a provider that writes its usage chunk
// with whitespace in it (`"usage": {`) is booked all the same, and the
// chunk the client did not ask for is not passed on.
func TestStreamUsageWithWhitespace(t *testing.T) {
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Raw: `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
			`data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}` + "\n\n" +
			"data: [DONE]\n\n"}
	}})
	body := r.streamChat(t, "gpt-local")
	if strings.Contains(string(body), "usage") || !strings.Contains(string(body), `"hi"`) || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("stream:\n%s", body)
	}
	r.settled()
	if alice := r.usageOf("alice"); alice.InputTokens != 7 || alice.OutputTokens != 3 {
		t.Fatalf("usage %+v", alice)
	}
}

// openChatStream sends a streamed Chat Completions request for model with
// raw HTTP (so the test sees the bytes the Edge writes) and returns the
// answer once its head is in.
func (r *rig) openChatStream(t *testing.T, model string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx(t), "POST", r.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// openMessagesStream is openChatStream for an Anthropic Messages
// request.
func (r *rig) openMessagesStream(t *testing.T, model string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx(t), "POST", r.url+"/v1/messages",
		strings.NewReader(`{"model":"`+model+`","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("x-api-key", apiKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// streamChat is openChatStream read to its end.
func (r *rig) streamChat(t *testing.T, model string) []byte {
	t.Helper()
	resp := r.openChatStream(t, model)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// usageOf returns the Edge's usage of key (zero if it has none).
func (r *rig) usageOf(key string) edge.Usage {
	for _, u := range r.srv.Usage() {
		if u.Key == key {
			return u
		}
	}
	return edge.Usage{}
}

// flushRecorder is a ResponseWriter that notes what had been written at
// each Flush.
type flushRecorder struct {
	mu      sync.Mutex
	header  http.Header
	status  int
	body    strings.Builder
	flushes []string
}

func (f *flushRecorder) Header() http.Header { return f.header }
func (f *flushRecorder) WriteHeader(code int) {
	if f.status == 0 {
		f.status = code
	}
}

func (f *flushRecorder) Write(p []byte) (int, error) {
	f.WriteHeader(http.StatusOK)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.body.Write(p)
}

func (f *flushRecorder) Flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.flushes = append(f.flushes, f.body.String())
}

// unwrapOnly is a middleware's writer that offers Flush only through
// Unwrap, as http.ResponseController expects of wrappers.
type unwrapOnly struct{ w http.ResponseWriter }

func (u unwrapOnly) Header() http.Header         { return u.w.Header() }
func (u unwrapOnly) WriteHeader(code int)        { u.w.WriteHeader(code) }
func (u unwrapOnly) Write(p []byte) (int, error) { return u.w.Write(p) }
func (u unwrapOnly) Unwrap() http.ResponseWriter { return u.w }

// TestStreamFlushesThroughUnwrap: the Handler mounted behind a
// middleware whose writer has no Flush of its own, only Unwrap, still
// flushes a stream's events as they come.
func TestStreamFlushesThroughUnwrap(t *testing.T) {
	r := newRig(t, rigOpts{})
	req, _ := http.NewRequestWithContext(ctx(t), "POST", "/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-local","stream":true,"messages":[{"role":"user","content":"one two three"}]}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	w := &flushRecorder{header: http.Header{}}
	r.srv.Handler().ServeHTTP(unwrapOnly{w}, req)
	if w.status != http.StatusOK || !strings.Contains(w.body.String(), "data: [DONE]") {
		t.Fatalf("status %d, body:\n%s", w.status, w.body.String())
	}
	if len(w.flushes) == 0 || !strings.Contains(w.flushes[len(w.flushes)-1], "data: ") {
		t.Fatalf("%d flushes through Unwrap: %q", len(w.flushes), w.flushes)
	}
	r.settled()
}

// TestFirstEventLeavesAlone: on the raw stream path the Edge coalesces a
// burst of events into one write, but never the first: it leaves at once,
// however many events are already behind it.
func TestFirstEventLeavesAlone(t *testing.T) {
	const tokens = 200
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		text := make([]string, tokens)
		for i := range text {
			text[i] = "tok "
		}
		return upstreamtest.Script{Text: text}
	}})
	for range 5 {
		req, _ := http.NewRequestWithContext(ctx(t), "POST", "/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-local","stream":true,"messages":[{"role":"user","content":"burst"}]}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		w := &flushRecorder{header: http.Header{}}
		r.srv.Handler().ServeHTTP(w, req)
		if w.status != http.StatusOK || len(w.flushes) == 0 || !strings.Contains(w.body.String(), "data: [DONE]") {
			t.Fatalf("status %d, %d flushes, body:\n%s", w.status, len(w.flushes), w.body.String())
		}
		// A slow first event lets the head leave alone first (headHold):
		// the flush that counts is the first with an event in it.
		first := -1
		for _, f := range w.flushes {
			if first = strings.Count(f, "data: "); first > 0 {
				break
			}
		}
		if first != 1 {
			t.Fatalf("first flush with events carried %d, want 1", first)
		}
	}
	r.settled()
}

// TestTranslatedBurstLeavesTogether: on the translated path too, events
// the Edge already holds leave in one flush, the answer's first content
// alone (with the start held for it, message_start: two events). The
// provider's whole stream is written at once (a raw script), so all but
// the first content are one burst.
func TestTranslatedBurstLeavesTogether(t *testing.T) {
	const tokens = 20
	var raw strings.Builder
	raw.WriteString(`data: {"id":"c","model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	for i := range tokens {
		fmt.Fprintf(&raw, `data: {"id":"c","model":"up-model","choices":[{"index":0,"delta":{"content":"t%d "}}]}`+"\n\n", i)
	}
	raw.WriteString(`data: {"id":"c","model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: raw.String()} }})
	req, _ := http.NewRequestWithContext(ctx(t), "POST", "/v1/messages",
		strings.NewReader(`{"model":"gpt-local","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"burst"}]}`))
	req.Header.Set("x-api-key", apiKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	w := &flushRecorder{header: http.Header{}}
	r.srv.Handler().ServeHTTP(w, req)
	body := w.body.String()
	if w.status != http.StatusOK || strings.Count(body, "text_delta") != tokens || !strings.Contains(body, "message_stop") {
		t.Fatalf("status %d, body:\n%s", w.status, body)
	}
	events := strings.Count(body, "\nevent: ") + 1
	first := -1
	for _, f := range w.flushes {
		if first = strings.Count(f, "event: "); first > 0 {
			break
		}
	}
	if first != 2 || len(w.flushes) > events/4 {
		t.Fatalf("%d flushes for %d events, the first with events carried %d; want the start and first content alone, and few flushes", len(w.flushes), events, first)
	}
	r.settled()
}

func TestReload(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if strings.Contains(q.Prompt, "slow") {
			<-release
		}
		return upstreamtest.Echo(q)
	}})
	defer once.Do(func() { close(release) })
	inflight := make(chan error, 1)
	go func() {
		_, err := r.client.Chat.Completions.New(context.Background(), chatParams("gpt-local", "slow request"))
		inflight <- err
	}()
	for len(r.calls()) == 0 {
		time.Sleep(time.Millisecond)
	}
	// Reload without the gpt-local route and with a new key.
	newKey := apiKey + "-rotated"
	err := r.srv.Reload(edge.Config{
		Epoch: 1,
		Nodes: []nodes.Record{{ID: "box", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "local", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: 8},
			{ID: "claude", Adapter: "anthropic", Category: execution.CategoryAPI, Models: []string{"up-model"}, Capacity: 8},
		}}},
		APIKeys: []edge.APIKey{{Name: "alice", Hash: edge.HashKey(newKey), Models: []string{"*"}}},
		Routes:  []edge.Route{{Model: "via-anthropic", Targets: []edge.Target{{ProviderID: "claude", Model: "up-model"}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *openai.Error
	if _, err := r.client.Chat.Completions.New(ctx(t), chatParams("via-anthropic", "x")); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("old key after reload: %v", err)
	}
	rotated := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(newKey), option.WithMaxRetries(0))
	if _, err := rotated.Chat.Completions.New(ctx(t), chatParams("gpt-local", "x")); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("removed route after reload: %v", err)
	}
	if _, err := rotated.Chat.Completions.New(ctx(t), chatParams("via-anthropic", "x")); err != nil {
		t.Fatalf("kept route after reload: %v", err)
	}
	once.Do(func() { close(release) })
	if err := <-inflight; err != nil {
		t.Fatalf("the request admitted before the reload: %v", err)
	}
	// An invalid configuration is refused and changes nothing.
	if err := r.srv.Reload(edge.Config{Epoch: 1, Routes: []edge.Route{{Model: "x"}}}); err == nil {
		t.Fatal("invalid reload accepted")
	}
	if _, err := rotated.Chat.Completions.New(ctx(t), chatParams("via-anthropic", "still")); err != nil {
		t.Fatalf("after a refused reload: %v", err)
	}
	r.settled()
}

func TestHTTPS(t *testing.T) {
	ca := testpki.NewCA(t, "api")
	srv, err := edge.New(edge.Config{Epoch: 1, APIKeys: []edge.APIKey{{Name: "a", Hash: edge.HashKey(apiKey), Models: []string{"*"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	done := make(chan error, 1)
	go func() {
		done <- srv.ServeTLS(ln, &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testpki.Leaf{})}})
	}()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Fatalf("status %d tls %v", resp.StatusCode, resp.TLS != nil)
	}
	srv.Close()
	if err := <-done; !errors.Is(err, edge.ErrServerClosed) {
		t.Fatalf("ServeTLS after Close = %v", err)
	}
}

// config returns the rig's configuration with every provider's capacity
// set to c.
func (r *rig) config(c int) edge.Config {
	cfg := r.cfg
	cfg.Nodes = append([]nodes.Record(nil), r.cfg.Nodes...)
	for i := range cfg.Nodes {
		cfg.Nodes[i].Providers = append([]nodes.ProviderSpec(nil), cfg.Nodes[i].Providers...)
		for j := range cfg.Nodes[i].Providers {
			cfg.Nodes[i].Providers[j].Capacity = c
		}
	}
	return cfg
}

// TestDeclaredLengthIsNotReservedAhead: a client that declares a large
// body and sends a few bytes of it gets no buffer of the declared size.
// Memory follows the bytes that came, so that slow or stalled uploads
// cannot make the Edge hold a maximum body each.
func TestDeclaredLengthIsNotReservedAhead(t *testing.T) {
	const declared, conns = 48 << 20, 8
	r := newRig(t, rigOpts{maxBody: declared})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	idle := serving()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
		waitServed(idle)
	}()
	for range conns {
		c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"model\":", apiKey, declared)
	}
	// Each upload is stalled inside the Edge's body read once its
	// handler ran: wait until the Edge holds at least a little for each.
	var now runtime.MemStats
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.ReadMemStats(&now)
		if now.HeapAlloc > before.HeapAlloc+conns<<10 {
			break
		}
	}
	time.Sleep(50 * time.Millisecond)
	runtime.ReadMemStats(&now)
	if grew := int64(now.HeapAlloc) - int64(before.HeapAlloc); grew > conns*4<<20 {
		t.Fatalf("heap grew %d MiB for %d stalled uploads of a few bytes (declared %d MiB each)", grew>>20, conns, declared>>20)
	}
}

// serving counts the connections this process's HTTP servers are serving.
func serving() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "net/http.(*conn).serve(")
}

// waitServed waits until no more than idle connections are served. An
// upload cut short ends in net/http's half a second of linger; waiting it
// out leaves nothing running after a test.
func waitServed(idle int) {
	for deadline := time.Now().Add(5 * time.Second); serving() > idle && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSlowUploadTimesOut: the request timeout bounds the upload too. A
// client that sends part of its body and stalls gets 408 once the
// timeout passes, instead of holding the Edge's handler for as long as it
// keeps the connection open; no slot was taken for it.
func TestSlowUploadTimesOut(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) { c.RequestTimeout = 200 * time.Millisecond }})
	if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "before")); status != 200 {
		t.Fatalf("before: %d %s", status, body)
	}
	idle := serving() // with the client's kept-alive connection
	defer waitServed(idle)
	for _, path := range []string{"/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(r.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second)) // a guard against a hang, not a measure
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nAnthropic-Version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\":", path, apiKey)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "request timeout") {
			t.Fatalf("%s, stalled upload: %d %s", path, resp.StatusCode, b)
		}
		if want := `"type":"timeout"`; strings.HasPrefix(path, "/v1/messages") && !strings.Contains(string(b), `"timeout_error"`) || !strings.HasPrefix(path, "/v1/messages") && !strings.Contains(string(b), want) {
			t.Fatalf("%s, stalled upload: error type in %s", path, b)
		}
		c.Close()
	}
	if st := r.srv.PoolStats(); st.Granted != st.Released || st.Queued != 0 {
		t.Fatalf("pool %+v after a stalled upload", st)
	}
	// The Edge serves on as before.
	if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "after")); status != 200 {
		t.Fatalf("after: %d %s", status, body)
	}
}

// TestStreamOptionsPassThrough: the Edge asks the upstream for stream
// usage by setting stream_options.include_usage, and leaves every other
// member of the client's stream_options exactly as the client wrote it.
// The client, which did not ask for usage, gets none: the usage chunk is
// not passed on. (The upstream's "usage": null on the other chunks is, as
// it comes: rewriting every chunk to take it out would cost each one a
// copy, and clients read the key as absent.)
func TestStreamOptionsPassThrough(t *testing.T) {
	r := newRig(t, rigOpts{})
	status, _, body := r.post(t, apiKey, `{"model":"gpt-local","stream":true,"stream_options":{"include_usage":false,"big":12345678901234567890,"nested":{"a":[1,2]}},"messages":[{"role":"user","content":"x"}]}`)
	if status != 200 || strings.Count(body, `"usage"`) != strings.Count(body, `"usage":null`) || strings.Contains(body, `"choices":[]`) {
		t.Fatalf("answer %d:\n%s", status, body)
	}
	calls := r.calls()
	if len(calls) != 1 {
		t.Fatalf("%d upstream calls", len(calls))
	}
	var up struct {
		StreamOptions map[string]json.RawMessage `json:"stream_options"`
	}
	if err := json.Unmarshal(calls[0].Body, &up); err != nil {
		t.Fatal(err)
	}
	so := up.StreamOptions
	if string(so["include_usage"]) != "true" || string(so["big"]) != "12345678901234567890" || string(so["nested"]) != `{"a":[1,2]}` {
		t.Fatalf("upstream stream_options %s", calls[0].Body)
	}
}

// TestStoppedNodeClosesUpstreamConnections: once a Node's Run returns,
// the upstream holds no connection from it. The adapters' own transport
// keeps connections idle between requests; a stopped runtime closes them
// instead of leaving them to the idle timeout (90 s), during which a
// connection the upstream had closed stayed open on the Node's side.
func TestStoppedNodeClosesUpstreamConnections(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, body := range []string{chatJSON("gpt-local", "one"), `{"model":"gpt-local","stream":true,"messages":[{"role":"user","content":"two"}]}`} {
		if status, _, b := r.post(t, apiKey, body); status != 200 {
			t.Fatalf("%d %s", status, b)
		}
	}
	if n := r.upstream.OpenConns(); n < 1 {
		t.Fatalf("upstream connections open before the stop: %d, want the Node's idle ones", n)
	}
	r.stopNode()
	deadline := time.Now().Add(10 * time.Second)
	for r.upstream.OpenConns() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := r.upstream.OpenConns(); n != 0 {
		t.Fatalf("upstream connections open after the Node stopped: %d", n)
	}
}

// TestAnswerOfTheOtherKind: a provider of the client's own format that
// ignores the stream flag (an event stream for a whole answer, a whole
// answer for a stream) is not passed on in a shape the client cannot
// read: its answer is decoded and rendered as asked, and its usage
// booked for the key.
func TestAnswerOfTheOtherKind(t *testing.T) {
	for _, tc := range []struct {
		name, path, model, raw string
		stream                 bool
		want                   string // in the client's answer
		in, out                int64
		id                     string // the provider's answer id, which the client's answer keeps
	}{
		{"whole chat answer from a stream", "/v1/chat/completions", "gpt-local",
			`data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
				`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
				`data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}` + "\n\n" +
				"data: [DONE]\n\n", false, `"object":"chat.completion","usage"`, 7, 3, ""},
		{"whole messages answer from a stream", "/v1/messages", "via-anthropic",
			"event: message_start\n" + `data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"up-model","usage":{"input_tokens":11,"cache_read_input_tokens":4,"output_tokens":1}}}` + "\n\n" +
				"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
				"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}` + "\n\n" +
				"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
				"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":5}}` + "\n\n" +
				"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n", false, `"text":"hi"`, 15, 5, "msg_1"},
		{"whole responses answer from a stream", "/v1/responses", "via-responses",
			"event: response.created\n" + `data: {"type":"response.created","response":{"id":"resp_sse1","status":"in_progress"}}` + "\n\n" +
				"event: response.output_item.added\n" + `data: {"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"m1","role":"assistant","content":[]}}` + "\n\n" +
				"event: response.output_text.delta\n" + `data: {"type":"response.output_text.delta","item_id":"m1","output_index":0,"content_index":0,"delta":"hi"}` + "\n\n" +
				"event: response.output_item.done\n" + `data: {"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"m1","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}` + "\n\n" +
				"event: response.completed\n" + `data: {"type":"response.completed","response":{"id":"resp_sse1","status":"completed","usage":{"input_tokens":9,"output_tokens":2,"total_tokens":11}}}` + "\n\n", false, `"text":"hi"`, 9, 2, "resp_sse1"},
		{"chat stream from a whole answer", "/v1/chat/completions", "gpt-local",
			`{"id":"c1","object":"chat.completion","model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`,
			true, `"content":"hi"`, 7, 3, "c1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{reply: func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{Raw: tc.raw} }})
			body := fmt.Sprintf(`{"model":%q,"max_tokens":100,"stream":%t,"messages":[{"role":"user","content":"x"}]}`, tc.model, tc.stream)
			if strings.HasPrefix(tc.path, "/v1/responses") {
				body = fmt.Sprintf(`{"model":%q,"stream":%t,"input":"x"}`, tc.model, tc.stream)
			}
			resp, got := r.do(t, "POST", tc.path, body, map[string]string{
				"Authorization": "Bearer " + apiKey, "x-api-key": apiKey, "anthropic-version": "2023-06-01"})
			ct := resp.Header.Get("Content-Type")
			if resp.StatusCode != http.StatusOK || !strings.Contains(got, tc.want) || strings.HasPrefix(ct, "text/event-stream") != tc.stream ||
				(!tc.stream && !json.Valid([]byte(got))) || (tc.stream && !strings.HasSuffix(got, "data: [DONE]\n\n")) {
				t.Fatalf("%d %q:\n%s", resp.StatusCode, ct, got)
			}
			if tc.id != "" && !strings.Contains(got, `"id":"`+tc.id+`"`) {
				t.Fatalf("the answer does not keep the provider's id %s:\n%s", tc.id, got)
			}
			r.settled()
			if u := r.usageOf("alice"); u.InputTokens != tc.in || u.OutputTokens != tc.out {
				t.Fatalf("usage %+v, want %d in, %d out", u, tc.in, tc.out)
			}
			if strings.HasPrefix(tc.id, "resp_") {
				// Remembered as a tunnelled answer's id is: a GET for it
				// goes to the provider that holds it.
				before := len(r.upstream.Requests())
				r.do(t, "GET", "/v1/responses/"+tc.id, "", map[string]string{"Authorization": "Bearer " + apiKey})
				if reqs := r.upstream.Requests(); len(reqs) != before+1 || reqs[len(reqs)-1].Path != "/v1/responses/"+tc.id {
					t.Fatalf("the GET for %s did not reach the provider", tc.id)
				}
			}
		})
	}
}
