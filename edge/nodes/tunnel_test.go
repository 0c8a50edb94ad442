package nodes_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/ollama"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/sse"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire/iopv1"
)

// upstreamNode starts a fake upstream, a Node hosting an openai adapter for
// it, and an Edge registry.
func upstreamNode(t *testing.T, reply func(*upstreamtest.Request) upstreamtest.Script, mutate ...func(*node.Config)) (*edge, *upstreamtest.Server, uint64) {
	t.Helper()
	t.Setenv("IOP_TEST_NODE_KEY", "node-secret")
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"m1"}, Reply: reply})
	url := srv.Start()
	t.Cleanup(srv.Close)
	a, err := openai.New(openai.Config{ID: "llm", BaseURL: url, Credential: execution.EnvCredential("IOP_TEST_NODE_KEY"), Models: []string{"m1"}})
	if err != nil {
		t.Fatal(err)
	}
	ecfg := nodes.Config{Store: store(t, record("n1", nodes.ProviderSpec{ID: "llm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m1"}, Capacity: 200}))}
	probe := &node.Config{}
	for _, m := range mutate {
		m(probe)
	}
	ecfg.Wire = probe.Wire // the Edge uses the same test heartbeat profile
	e := startEdge(t, "", 1, ecfg)
	runNode(t, e.addr, "n1", []node.Hosted{{Provider: a}}, mutate...)
	return e, srv, waitReady(t, e, "n1", 0)
}

// calls returns the upstream requests other than the Node's health checks.
func calls(srv *upstreamtest.Server) []*upstreamtest.Request {
	var out []*upstreamtest.Request
	for _, r := range srv.Requests() {
		if r.API != "models" {
			out = append(out, r)
		}
	}
	return out
}

func chatBody(prompt string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{"model": "m1", "stream": stream, "messages": []any{map[string]any{"role": "user", "content": prompt}}})
	return b
}

func chatTunnel(prompt string, stream bool) *nodes.TunnelRequest {
	return &nodes.TunnelRequest{ProviderID: "llm", Method: "POST", Path: "/v1/chat/completions", Target: "m1",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: bytes.NewReader(chatBody(prompt, stream))}
}

// streamedText reads a Chat Completions SSE body and returns the content
// and whether it ended with [DONE].
func streamedText(t *testing.T, body io.Reader) (string, bool, error) {
	r := sse.NewReader(body, 0)
	var text strings.Builder
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return text.String(), false, nil
		}
		if err != nil {
			return text.String(), false, err
		}
		if string(ev.Data) == "[DONE]" {
			_, err := r.Next()
			if err != io.EOF {
				return text.String(), true, fmt.Errorf("data after [DONE]: %v", err)
			}
			return text.String(), true, nil
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(ev.Data, &c); err != nil {
			return "", false, err
		}
		for _, ch := range c.Choices {
			text.WriteString(ch.Delta.Content)
		}
	}
}

func TestTunnelConcurrentOrdering(t *testing.T) {
	e, srv, gen := upstreamNode(t, func(r *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(r)
		sc.ChunkDelay = time.Millisecond
		return sc
	})
	const n = 100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			prompt := fmt.Sprintf("stream %d says %s", i, strings.Repeat(fmt.Sprintf("w%d ", i), 20))
			tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel(prompt, true))
			if err != nil {
				t.Error(err)
				return
			}
			defer tn.Close()
			status, h, err := tn.Response(ctx(t))
			if err != nil || status != 200 || h.Get("Content-Type") != "text/event-stream" {
				t.Errorf("head %d %v %v", status, h, err)
				return
			}
			text, done, err := streamedText(t, tn)
			want := strings.Join(strings.Fields("echo: "+prompt), " ")
			if err != nil || !done || text != want {
				t.Errorf("tunnel %d: done=%v err=%v\n got %q\nwant %q", i, done, err, text, want)
			}
			if _, err := tn.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("after the end: %v", err)
			}
		})
	}
	wg.Wait()
	if got := len(calls(srv)); got != n {
		t.Fatalf("upstream saw %d requests, want %d", got, n)
	}
	eventually(t, "slots released", func() bool {
		n1, _ := e.reg.Node("n1")
		return n1.Providers[0].InFlight == 0
	})
}

func TestTunnelNeverForwardsClientCredentials(t *testing.T) {
	e, srv, gen := upstreamNode(t, upstreamtest.Echo)
	req := chatTunnel("hi", false)
	req.Header.Set("Authorization", "Bearer client-key")
	req.Header.Set("X-Api-Key", "client-key")
	req.Header.Set("Cookie", "session=client")
	req.Header.Set("Connection", "close")
	tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, req)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	if status, _, err := tn.Response(ctx(t)); err != nil || status != 200 {
		t.Fatalf("head %d %v", status, err)
	}
	io.Copy(io.Discard, tn)
	h := calls(srv)[0].Header
	if h.Get("Authorization") != "Bearer node-secret" || h.Get("X-Api-Key") != "" || h.Get("Cookie") != "" {
		t.Fatalf("upstream saw Authorization %q X-Api-Key %q Cookie %q", h.Get("Authorization"), h.Get("X-Api-Key"), h.Get("Cookie"))
	}
}

func TestTunnelRefusesOtherRoutes(t *testing.T) {
	e, srv, gen := upstreamNode(t, upstreamtest.Echo)
	for _, path := range []string{"/v1/files", "/v1/chat/completions?x=1", "/v1/../admin", "/api/pull"} {
		tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, &nodes.TunnelRequest{ProviderID: "llm", Method: "POST", Path: path})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = tn.Response(ctx(t))
		var te *nodes.TunnelError
		if !errors.As(err, &te) || te.Code != nodes.TunnelRefused {
			t.Errorf("%s: %v, want refused", path, err)
		}
		tn.Close()
	}
	if c := calls(srv); len(c) != 0 {
		t.Fatalf("a refused route reached the upstream: %s %s", c[0].Method, c[0].Path)
	}
}

func TestTunnelCancelReachesUpstream(t *testing.T) {
	for _, sc := range []upstreamtest.Script{{HangBeforeHeaders: true}, {Text: []string{"a", "b"}, ChunkDelay: time.Hour}} {
		e, srv, gen := upstreamNode(t, func(*upstreamtest.Request) upstreamtest.Script { return sc })
		tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel("x", true))
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, "upstream request", func() bool { return len(calls(srv)) == 1 })
		if !sc.HangBeforeHeaders {
			if _, _, err := tn.Response(ctx(t)); err != nil {
				t.Fatal(err)
			}
			tn.Read(make([]byte, 64))
		}
		tn.Close() // the client went away
		select {
		case <-calls(srv)[0].Canceled:
		case <-ctx(t).Done():
			t.Fatal("the upstream request was not cancelled")
		}
		var te *nodes.TunnelError
		if _, err := tn.Read(make([]byte, 1)); !errors.As(err, &te) || te.Code != nodes.TunnelCanceled {
			t.Fatalf("Read after Close = %v", err)
		}
		eventually(t, "slot released", func() bool {
			n1, _ := e.reg.Node("n1")
			return n1.Providers[0].InFlight == 0
		})
	}
}

// TestLongPrefill: a time to first token far beyond the heartbeat wait is
// normal traffic: the Node stays connected and healthy, the answers end
// with their normal terminal, and no heartbeat_timeout occurs.
func TestLongPrefill(t *testing.T) {
	hb := shortHeartbeat() // 30 ms interval, 150 ms wait
	e, _, gen := upstreamNode(t, func(r *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(r)
		sc.TTFT = 800 * time.Millisecond
		return sc
	}, func(c *node.Config) { c.Wire = hb })
	sub := e.reg.Subscribe()
	defer sub.Close()

	var wg sync.WaitGroup
	wg.Go(func() {
		tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel("slow prefill", true))
		if err != nil {
			t.Error(err)
			return
		}
		defer tn.Close()
		if _, _, err := tn.Response(ctx(t)); err != nil {
			t.Error(err)
			return
		}
		if text, done, err := streamedText(t, tn); err != nil || !done || text != "echo: slow prefill" {
			t.Errorf("tunnel: %q %v %v", text, done, err)
		}
	})
	wg.Go(func() {
		run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "slow", ProviderID: "llm", Target: "m1", Options: execution.Options{Stream: true},
			Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "slow run"}}}})
		if err != nil {
			t.Error(err)
			return
		}
		evs := collect(t, run)
		if last := evs[len(evs)-1]; last.Kind != execution.EventCompleted {
			t.Errorf("run ended %+v", last)
		}
	})
	wg.Wait()
	if cur, ok := e.reg.Current("n1"); !ok || cur != gen {
		t.Fatalf("node reconnected during the prefill: %d/%v", cur, ok)
	}
	n1, _ := e.reg.Node("n1")
	if n1.Providers[0].Health != nodes.HealthHealthy {
		t.Fatalf("provider %+v", n1.Providers[0])
	}
	if ev, err := sub.Poll(); !errors.Is(err, nodes.ErrNoEvent) {
		t.Fatalf("lifecycle event during a long prefill: %+v %v", ev, err)
	}
}

func TestOllamaCommand(t *testing.T) {
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"llama3:latest"}})
	url := srv.Start()
	defer srv.Close()
	a, _ := ollama.New(ollama.Config{ID: "ollama", BaseURL: url})
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", nodes.ProviderSpec{ID: "ollama", Adapter: "ollama", Category: execution.CategoryLocal, Capacity: 1}))})
	runNode(t, e.addr, "n1", []node.Hosted{{Provider: a}})
	gen := waitReady(t, e, "n1", 0)
	res, err := e.reg.Command(ctx(t), "n1", gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_OLLAMA_API, ProviderId: "ollama", Argument: "tags"})
	if err != nil || !res.GetOk() || !bytes.Contains(res.GetProviderResponse(), []byte("llama3:latest")) {
		t.Fatalf("tags: %v %v", res, err)
	}
	for _, arg := range []string{"pull", "delete", "show:../x", "create"} {
		res, err := e.reg.Command(ctx(t), "n1", gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_OLLAMA_API, ProviderId: "ollama", Argument: arg})
		if err != nil || res.GetOk() {
			t.Errorf("%s: %v %v, want a refusal", arg, res, err)
		}
	}
	caps, _ := e.reg.Command(ctx(t), "n1", gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_CAPABILITIES})
	if len(caps.GetCapabilities().GetCommands()) != 3 {
		t.Errorf("commands %v", caps.GetCapabilities().GetCommands())
	}
}

// TestTunnelSlotFreeBeforeEnd: on a provider of capacity 1, a tunnel
// opened the moment the previous one ended is never refused: the Node frees
// its slot before the terminal that lets the Edge free its own.
func TestTunnelSlotFreeBeforeEnd(t *testing.T) {
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"m1"}})
	url := srv.Start()
	t.Cleanup(srv.Close)
	a, err := openai.New(openai.Config{ID: "llm", BaseURL: url, Models: []string{"m1"}})
	if err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", nodes.ProviderSpec{ID: "llm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m1"}, Capacity: 1}))})
	runNode(t, e.addr, "n1", []node.Hosted{{Provider: a}})
	gen := waitReady(t, e, "n1", 0)
	const n = 300
	refused := 0
	for i := range n {
		tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel(fmt.Sprint("turn ", i), false))
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		_, _, err = tn.Response(ctx(t))
		if err == nil {
			_, err = io.Copy(io.Discard, tn)
		}
		tn.Close()
		var te *nodes.TunnelError
		if errors.As(err, &te) && te.Code == nodes.TunnelRefused {
			refused++
		} else if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
	}
	if refused != 0 {
		t.Fatalf("%d of %d back-to-back tunnels refused by the node", refused, n)
	}
}

// TestTunnelAtCapacityIsTyped: when the Edge lets go of a tunnel (a client
// that left) its slot frees at once, while the Node may still be ending
// that call; a tunnel sent in that moment is refused as at_capacity (a
// 503 with Retry-After at the Edge), never as a generic refusal.
func TestTunnelAtCapacityIsTyped(t *testing.T) {
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"m1"}, Reply: func(r *upstreamtest.Request) upstreamtest.Script {
		if strings.Contains(r.Prompt, "hang") {
			return upstreamtest.Script{HangBeforeHeaders: true}
		}
		return upstreamtest.Echo(r)
	}})
	url := srv.Start()
	t.Cleanup(srv.Close)
	a, _ := openai.New(openai.Config{ID: "llm", BaseURL: url, Models: []string{"m1"}})
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", nodes.ProviderSpec{ID: "llm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m1"}, Capacity: 1}))})
	runNode(t, e.addr, "n1", []node.Hosted{{Provider: a}})
	gen := waitReady(t, e, "n1", 0)
	atCapacity, reached := 0, 0
	for i := range 50 {
		hung, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel(fmt.Sprint("hang ", i), false))
		if err != nil {
			t.Fatal(err)
		}
		reached++
		eventually(t, "the upstream holding the call", func() bool { return len(calls(srv)) >= reached })
		hung.Close() // the Edge lets go: its slot is free now
		next, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel(fmt.Sprint("next ", i), false))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = next.Response(ctx(t))
		if err == nil {
			_, err = io.Copy(io.Discard, next)
			reached++
		}
		next.Close()
		var te *nodes.TunnelError
		switch {
		case err == nil:
		case errors.As(err, &te) && te.Code == nodes.TunnelAtCapacity:
			atCapacity++
		default:
			t.Fatalf("turn %d: %v", i, err)
		}
		// The next turn starts with the slot free on both sides: a call
		// goes through once the Node has finished the one let go of.
		for j := 0; ; j++ {
			probe, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel(fmt.Sprint("probe ", i, j), false))
			if err != nil {
				time.Sleep(time.Millisecond)
				continue
			}
			_, _, err = probe.Response(ctx(t))
			if err == nil {
				_, err = io.Copy(io.Discard, probe)
			}
			probe.Close()
			if err == nil {
				reached++
				break
			}
			if j > 1000 {
				t.Fatalf("the node never freed its slot: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("%d of 50 tunnels sent right after a release were refused at capacity", atCapacity)
}

// TestTunnelRelaysOnlyAllowedResponseHeaders: whatever an upstream sends,
// only the allow-listed response headers come back through the Node, and
// the Edge's copy holds nothing else either.
func TestTunnelRelaysOnlyAllowedResponseHeaders(t *testing.T) {
	t.Setenv("IOP_TEST_NODE_KEY", "node-secret")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object":"list","data":[{"id":"m1","object":"model"}]}`)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Set-Cookie", "upstream-session=secret")
		h.Set("X-Internal-Trace", "10.0.0.7")
		h.Set("Server", "upstream/1.0")
		h.Set("X-Ratelimit-Remaining-Tokens", "99")
		h.Set("Anthropic-Ratelimit-Requests-Remaining", "5")
		h["x-request-id"] = []string{"req-1"} // not canonical as sent
		io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[]}`)
	}))
	t.Cleanup(up.Close)
	a, err := openai.New(openai.Config{ID: "llm", BaseURL: up.URL, Credential: execution.EnvCredential("IOP_TEST_NODE_KEY"), Models: []string{"m1"}})
	if err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", nodes.ProviderSpec{ID: "llm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m1"}, Capacity: 4}))})
	runNode(t, e.addr, "n1", []node.Hosted{{Provider: a}})
	gen := waitReady(t, e, "n1", 0)
	tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel("hi", false))
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	status, h, err := tn.Response(ctx(t))
	if err != nil || status != 200 {
		t.Fatalf("head %d %v", status, err)
	}
	io.Copy(io.Discard, tn)
	want := http.Header{
		"Content-Type":                           {"application/json"},
		"X-Ratelimit-Remaining-Tokens":           {"99"},
		"Anthropic-Ratelimit-Requests-Remaining": {"5"},
		"X-Request-Id":                           {"req-1"},
	}
	if len(h) != len(want) {
		t.Errorf("relayed headers %v, want exactly %v", h, want)
	}
	for k, v := range want {
		if got := h.Values(k); len(got) != 1 || got[0] != v[0] {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
}

// TestTunnelEnforcesTheNodesModels: a provider the Node limits to some
// models serves a tunnel only for one of them, named once as the body's
// top-level model and as the tunnel's target, as it does a run. An Edge
// that asks for another model, or smuggles one past the target, reaches
// no upstream. A body too large to travel inline is read whole and
// checked the same way.
func TestTunnelEnforcesTheNodesModels(t *testing.T) {
	e, srv, gen := upstreamNode(t, upstreamtest.Echo)
	long := strings.Repeat("x", 64<<10) // above the inline bound: the body streams
	open := func(target, body string) (int, error) {
		tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, &nodes.TunnelRequest{ProviderID: "llm", Method: "POST", Path: "/v1/chat/completions",
			Target: target, Header: http.Header{"Content-Type": {"application/json"}}, Body: strings.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
		defer tn.Close()
		status, _, err := tn.Response(ctx(t))
		if err == nil {
			io.Copy(io.Discard, tn)
		}
		return status, err
	}
	msg := func(model, prompt string) string {
		return `{"model":` + model + `,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	}
	for name, c := range map[string]struct{ target, body string }{
		"a model not offered":            {"m2", msg(`"m2"`, "a")},
		"another model than the target":  {"m1", msg(`"m2"`, "b")},
		"the model twice":                {"m1", `{"model":"m1","model":"m2","messages":[]}`},
		"the model in another case":      {"m1", `{"model":"m1","Model":"m2","messages":[]}`},
		"no model":                       {"m1", `{"messages":[]}`},
		"a model that is no string":      {"m1", msg(`["m1"]`, "c")},
		"no JSON object":                 {"m1", `model=m1`},
		"no target":                      {"", msg(`"m1"`, "d")},
		"a streamed body, another model": {"m1", msg(`"m2"`, long)},
	} {
		_, err := open(c.target, c.body)
		var te *nodes.TunnelError
		if !errors.As(err, &te) || te.Code != nodes.TunnelRefused {
			t.Errorf("%s: %v, want refused", name, err)
		}
	}
	if c := calls(srv); len(c) != 0 {
		t.Fatalf("a refused model reached the upstream: %s %q", c[0].Path, c[0].Body)
	}
	for _, prompt := range []string{"short", long} {
		if status, err := open("m1", msg(`"m1"`, prompt)); err != nil || status != 200 {
			t.Fatalf("the offered model: %d %v", status, err)
		}
	}
	c := calls(srv)
	if len(c) != 2 || c[1].Prompt != long {
		t.Fatalf("upstream saw %d calls (the long prompt whole: %v)", len(c), len(c) == 2 && c[1].Prompt == long)
	}
}

// TestUnreachableUpstreamCheckedAtOnce: the upstream process dies (its
// port refuses connections). The next tunnel fails as upstream_unreachable
// and has its provider checked at once, not at the next round (an hour
// here): the Edge hears it is unhealthy and admits nothing more to it. When
// the upstream is back on its address, the shorter recheck of an unhealthy
// provider finds it, and tunnels flow again.
func TestUnreachableUpstreamCheckedAtOnce(t *testing.T) {
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"m1"}})
	url := up.Start()
	t.Cleanup(up.Close)
	a, err := openai.New(openai.Config{ID: "llm", BaseURL: url, Models: []string{"m1"}})
	if err != nil {
		t.Fatal(err)
	}
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", nodes.ProviderSpec{ID: "llm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m1"}, Capacity: 2}))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	runNode(t, e.addr, "n1", []node.Hosted{{Provider: a}}, func(c *node.Config) {
		c.HealthInterval = time.Hour
		c.UnhealthyInterval = 20 * time.Millisecond
	})
	gen := waitReady(t, e, "n1", 0)
	nextEvent(t, sub) // ready
	exchange := func() error {
		t.Helper()
		tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, chatTunnel("hi", false))
		if err != nil {
			t.Fatal(err)
		}
		defer tn.Close()
		if _, _, err = tn.Response(ctx(t)); err == nil {
			_, err = io.Copy(io.Discard, tn)
		}
		return err
	}
	if err := exchange(); err != nil {
		t.Fatalf("before the upstream died: %v", err)
	}

	up.Close()
	a.CloseIdleConnections() // no pooled connection to find dead: the next call dials
	var te *nodes.TunnelError
	if err := exchange(); !errors.As(err, &te) || te.Code != nodes.TunnelUpstreamUnreachable {
		t.Fatalf("tunnel to a dead upstream = %v, want upstream_unreachable", err)
	}
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventProviderHealth || ev.Provider.ID != "llm" || ev.Provider.Health != nodes.HealthUnhealthy {
		t.Fatalf("event %+v (%+v), want llm unhealthy", ev, ev.Provider)
	}
	if _, _, ok := e.reg.Admission("n1", "llm", "m1"); ok {
		t.Fatal("a provider whose upstream is gone is still admitted")
	}

	ln, err := net.Listen("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatalf("the upstream's address cannot be served again: %v", err)
	}
	back := &http.Server{Handler: up}
	go back.Serve(ln)
	t.Cleanup(func() { back.Close() })
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventProviderHealth || ev.Provider.ID != "llm" || ev.Provider.Health != nodes.HealthHealthy {
		t.Fatalf("event %+v (%+v), want llm healthy again", ev, ev.Provider)
	}
	if err := exchange(); err != nil {
		t.Fatalf("after the upstream came back: %v", err)
	}
}
