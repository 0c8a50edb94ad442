package edge_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/cli"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
)

// drainRig is an Edge with two Nodes, n1 and n2, each hosting one
// provider (p1, p2) in front of its own fake upstream; route "m" prefers
// p1 and falls back to p2.
type drainRig struct {
	t        *testing.T
	srv      *edge.Server
	cfg      edge.Config // what srv was started with
	url      string
	up       map[string]*upstreamtest.Server
	rt       map[string]*node.Runtime
	runErr   map[string]*runResult
	nodeAddr string
	// cat, when set, is cat(1): each Node hosts it as a command-line
	// provider instead, which serves normalized runs, not tunnels.
	cat string
}

// runResult is what a Node's Run returned, read once by whoever asks
// first (the test or the cleanup).
type runResult struct {
	once sync.Once
	ch   chan error
	err  error
}

func (x *runResult) get() error {
	x.once.Do(func() { x.err = <-x.ch })
	return x.err
}

func newDrainRig(t *testing.T, reply func(*upstreamtest.Request) upstreamtest.Script, nodeIDs ...string) *drainRig {
	t.Helper()
	return newDrainRigOf(t, "", reply, nodeIDs...)
}

// newRunDrainRig is a drainRig whose Nodes host cat(1) as their
// command-line provider: every request is a normalized run.
func newRunDrainRig(t *testing.T, nodeIDs ...string) *drainRig {
	t.Helper()
	return newDrainRigOf(t, unixTool(t, "cat"), func(*upstreamtest.Request) upstreamtest.Script { return upstreamtest.Script{} }, nodeIDs...)
}

func newDrainRigOf(t *testing.T, cat string, reply func(*upstreamtest.Request) upstreamtest.Script, nodeIDs ...string) *drainRig {
	t.Helper()
	r := &drainRig{t: t, up: map[string]*upstreamtest.Server{}, rt: map[string]*node.Runtime{}, runErr: map[string]*runResult{}, cat: cat}
	adapter, category := "openai", execution.CategoryLocal
	if cat != "" {
		adapter, category = "cli", execution.CategoryCLI
	}
	cfg := edge.Config{Epoch: 1, QueueTimeout: 10 * time.Second,
		APIKeys: []edge.APIKey{{Name: "alice", Hash: edge.HashKey(apiKey), Models: []string{"*"}}}}
	route := edge.Route{Model: "m"}
	for i, id := range nodeIDs {
		p := fmt.Sprintf("p%d", i+1)
		cfg.Nodes = append(cfg.Nodes, nodes.Record{ID: id, TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: p, Adapter: adapter, Category: category, Models: []string{"up-model"}, Capacity: 8}}})
		route.Targets = append(route.Targets, edge.Target{ProviderID: p, Model: "up-model"})
		up := upstreamtest.New(upstreamtest.Config{Models: []string{"up-model"}, Reply: reply})
		up.Start()
		t.Cleanup(up.Close)
		r.up[id] = up
	}
	cfg.Routes = []edge.Route{route}
	r.cfg = cfg
	r.srv, r.url, r.nodeAddr = serveEdge(t, cfg)
	for i, id := range nodeIDs {
		r.startNode(id, fmt.Sprintf("p%d", i+1))
	}
	return r
}

// startNode runs the Node id until cleanup (or its Shutdown).
func (r *drainRig) startNode(id, provider string) {
	r.t.Helper()
	var p execution.Provider
	var err error
	if r.cat != "" {
		p, err = cli.New(cli.Config{ID: provider, Argv: []string{r.cat}, Models: []string{"up-model"}})
	} else {
		p, err = oaadapter.New(oaadapter.Config{ID: provider, BaseURL: r.up[id].URL(), Models: []string{"up-model"}})
	}
	if err != nil {
		r.t.Fatal(err)
	}
	rt, err := node.New(node.Config{EdgeAddr: r.nodeAddr, NodeID: id, Token: nodeToken, Providers: []node.Hosted{{Provider: p}},
		Backoff: node.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := &runResult{ch: make(chan error, 1)}
	go func() { res.ch <- rt.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); res.get() })
	r.rt[id], r.runErr[id] = rt, res
	waitUntil(r.t, id+" connected", func() bool { n, _ := r.srv.Registry().Node(id); return n.Connected })
}

// chat sends one Chat Completions request and returns the status and
// the whole body.
func (r *drainRig) chat(stream bool) (int, string, error) {
	body := fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
	req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (r *drainRig) served(id string, stream bool) int {
	n := 0
	for _, q := range r.up[id].Requests() {
		if q.API == "chat" && q.Stream == stream {
			n++
		}
	}
	return n
}

// TestNodeShutdownDrains: a Node shut down gracefully tells the Edge to
// send it nothing new; requests go to the other Node at once (none fails,
// also the ones racing the shutdown), the streams it holds run to their
// end, and then it disconnects.
func TestNodeShutdownDrains(t *testing.T) {
	hold := make(chan struct{})
	r := newDrainRig(t, func(q *upstreamtest.Request) upstreamtest.Script {
		if q.Stream {
			return upstreamtest.Script{Text: []string{"held ", "to ", "the end"}, Hold: hold}
		}
		return upstreamtest.Script{Text: []string{"quick"}}
	}, "n1", "n2")

	type answer struct {
		status int
		body   string
		err    error
	}
	streams := make(chan answer, 3)
	for range 3 {
		go func() {
			s, b, err := r.chat(true)
			streams <- answer{s, b, err}
		}()
	}
	waitUntil(t, "3 streams held at n1's upstream", func() bool { return r.served("n1", true) == 3 })

	// Requests keep coming while n1 shuts down: every one is served.
	shutdownErr := r.shutdownUnderLoad("n1")
	if st := r.rt["n1"].Status().State; st != node.StateDraining {
		t.Fatalf("n1's state while draining: %s", st)
	}

	// Nothing new reaches n1; n2 serves.
	before1, before2 := r.served("n1", false), r.served("n2", false)
	for range 5 {
		if s, b, err := r.chat(false); err != nil || s != 200 {
			t.Fatalf("during the drain: %d %v %s", s, err, b)
		}
	}
	if got := r.served("n1", false); got != before1 {
		t.Fatalf("a draining node got %d new requests", got-before1)
	}
	if got := r.served("n2", false); got != before2+5 {
		t.Fatalf("n2 served %d of 5", got-before2)
	}
	select {
	case err := <-shutdownErr:
		t.Fatalf("Shutdown returned (%v) with streams still in flight", err)
	default:
	}

	// The streams n1 holds end normally, and then it goes.
	close(hold)
	for range 3 {
		a := <-streams
		if a.err != nil || a.status != 200 || !strings.Contains(a.body, "the end") || !strings.HasSuffix(strings.TrimSpace(a.body), "data: [DONE]") {
			t.Fatalf("a stream in flight at the shutdown: %d %v\n%s", a.status, a.err, a.body)
		}
	}
	if err := <-shutdownErr; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := r.runErr["n1"].get(); !errors.Is(err, node.ErrShutdown) {
		t.Fatalf("Run after Shutdown: %v", err)
	}
	waitUntil(t, "n1 disconnected", func() bool { n, _ := r.srv.Registry().Node("n1"); return !n.Connected })
}

// shutdownUnderLoad shuts Node id down while four clients send
// non-streamed requests without pause, and fails the test if any of
// them is not served. It returns once the Edge saw the Node draining
// (or gone, if it held no work) and 50 ms more of load went by;
// Shutdown's result arrives on the channel.
func (r *drainRig) shutdownUnderLoad(id string) <-chan error {
	r.t.Helper()
	var failed atomic.Int64
	var failures sync.Map
	stop := make(chan struct{})
	var load sync.WaitGroup
	for range 4 {
		load.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if s, b, err := r.chat(false); err != nil || s != 200 {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%d %v %s", s, err, b), true)
				}
			}
		})
	}
	shutdownErr := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shutdownErr <- r.rt[id].Shutdown(ctx)
	}()
	waitUntil(r.t, id+" draining or gone at the Edge", func() bool { n, _ := r.srv.Registry().Node(id); return n.Draining || !n.Connected })
	time.Sleep(50 * time.Millisecond) // more load across the shutdown
	close(stop)
	load.Wait()
	if n := failed.Load(); n > 0 {
		var list []string
		failures.Range(func(k, _ any) bool { list = append(list, k.(string)); return true })
		r.t.Fatalf("%d requests failed while %s shut down: %v", n, id, list)
	}
	return shutdownErr
}

// TestNodeShutdownDrainsRuns: as TestNodeShutdownDrains for normalized
// runs (command-line providers): no request racing a Node's shutdown
// fails, also not one whose run's stream the Node's GOAWAY crossed
// (which is admitted again, as a tunnel's is), and the Node goes.
func TestNodeShutdownDrainsRuns(t *testing.T) {
	r := newRunDrainRig(t, "n1", "n2")
	if err := <-r.shutdownUnderLoad("n1"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := r.runErr["n1"].get(); !errors.Is(err, node.ErrShutdown) {
		t.Fatalf("Run after Shutdown: %v", err)
	}
	for range 3 {
		if s, b, err := r.chat(false); err != nil || s != 200 || !strings.Contains(b, "hi") {
			t.Fatalf("after n1 went: %d %v %s", s, err, b)
		}
	}
}

// TestNodeShutdownGraceEnds: work still running when the grace ends is
// cancelled; its client gets an error terminal, not a hang.
func TestNodeShutdownGraceEnds(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	r := newDrainRig(t, func(q *upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"never ", "ends"}, Hold: hold}
	}, "n1")
	type answer struct {
		status int
		body   string
	}
	got := make(chan answer, 1)
	go func() { s, b, _ := r.chat(true); got <- answer{s, b} }()
	waitUntil(t, "the stream at the upstream", func() bool { return r.served("n1", true) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := r.rt["n1"].Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with work past the grace: %v", err)
	}
	a := <-got
	if a.status != 200 || !strings.Contains(a.body, `"error"`) || strings.Contains(a.body, "ends") {
		t.Fatalf("the cut stream: %d\n%s", a.status, a.body)
	}
	if err := r.runErr["n1"].get(); !errors.Is(err, node.ErrShutdown) {
		t.Fatalf("Run after Shutdown: %v", err)
	}
	// A Runtime shut down stays down.
	if err := r.rt["n1"].Run(context.Background()); !errors.Is(err, node.ErrShutdown) {
		t.Fatalf("Run again: %v", err)
	}
}
