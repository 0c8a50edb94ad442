package faulttest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/testproxy"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire"
)

var (
	reportMu sync.Mutex
	report   []Row
	// cleanupBinaries removes the daemons the process scenarios built
	// (Linux only; a no-op elsewhere).
	cleanupBinaries = func() {}
)

func record(t *testing.T, r Row) {
	t.Helper()
	reportMu.Lock()
	report = append(report, r)
	reportMu.Unlock()
	t.Logf("%+v", r)
}

func TestMain(m *testing.M) {
	code := 0
	func() {
		defer cleanupBinaries()
		code = goleakRun(m)
	}()
	if len(report) > 0 {
		fmt.Println()
		Print(os.Stdout, report)
		if p := os.Getenv("IOP_FAULT_REPORT"); p != "" {
			f, err := os.Create(p)
			if err == nil {
				Print(f, report)
				f.Close()
			}
		}
	}
	os.Exit(code)
}

// goleakRun runs the tests and then checks for leaked goroutines (the
// in-process scenarios' Edges, Nodes and proxies must stop everything).
func goleakRun(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

const (
	apiKey     = "sk-fault-0123456789abcdef0123456789abcd"
	limitedKey = "sk-fault-limited-0123456789abcdef012345"
	nodeToken  = "node-token-fault-0123456789abcdef"
)

// rig is an in-process Edge and Node with a fake upstream; the Node dials
// the Edge through a fault proxy.
type rig struct {
	t        *testing.T
	srv      *edge.Server
	url      string
	nodeAddr string
	proxy    *testproxy.Proxy
	up       *upstreamtest.Server
	client   *http.Client
	hb       *wire.HeartbeatProfile

	mu    sync.Mutex
	nodes []func()
}

type rigOpts struct {
	capacity       int
	queueTimeout   time.Duration
	requestTimeout time.Duration
	reply          func(*upstreamtest.Request) upstreamtest.Script
	heartbeat      *wire.HeartbeatProfile
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	if o.capacity == 0 {
		o.capacity = 500
	}
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"up-model"}, Reply: o.reply})
	up.Start()
	var nodeWire *wire.Config
	if o.heartbeat != nil {
		nodeWire = &wire.Config{TestHeartbeat: o.heartbeat}
	}
	srv, err := edge.New(edge.Config{Epoch: 1,
		Nodes: []nodes.Record{{ID: "n1", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "up", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: o.capacity}}}},
		APIKeys: []edge.APIKey{
			{Name: "load", Hash: edge.HashKey(apiKey), Models: []string{"*"}},
			{Name: "limited", Hash: edge.HashKey(limitedKey), Models: []string{"*"}, MaxConcurrent: 2},
		},
		Routes:       []edge.Route{{Model: "m", Targets: []edge.Target{{ProviderID: "up", Model: "up-model"}}}},
		QueueTimeout: o.queueTimeout, RequestTimeout: o.requestTimeout, NodeWire: nodeWire,
	})
	if err != nil {
		t.Fatal(err)
	}
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	p := testproxy.New(t, nodeLn.Addr().String())
	r := &rig{t: t, srv: srv, url: "http://" + apiLn.Addr().String(), nodeAddr: nodeLn.Addr().String(), proxy: p, up: up, hb: o.heartbeat,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}}}
	t.Cleanup(func() {
		r.mu.Lock()
		stops := r.nodes
		r.mu.Unlock()
		for _, s := range stops {
			s()
		}
		srv.Close()
		p.Close()
		wg.Wait()
		up.Close()
		r.client.CloseIdleConnections()
	})
	return r
}

// startNode runs a Node through the proxy until stop (or cleanup).
func (r *rig) startNode() (rt *node.Runtime, stop func()) {
	r.t.Helper()
	pr, _ := oaadapter.New(oaadapter.Config{ID: "up", BaseURL: r.up.URL(), Models: []string{"up-model"}})
	var w *wire.Config
	if r.hb != nil {
		w = &wire.Config{TestHeartbeat: r.hb}
	}
	rt, err := node.New(node.Config{EdgeAddr: r.proxy.Addr(), NodeID: "n1", Token: nodeToken, Providers: []node.Hosted{{Provider: pr}},
		Wire: w, Backoff: node.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond}})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rt.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	r.mu.Lock()
	r.nodes = append(r.nodes, stop)
	r.mu.Unlock()
	r.waitAvailable()
	return rt, stop
}

func (r *rig) waitAvailable() {
	r.t.Helper()
	waitUntil(r.t, "the provider available", func() bool { _, ok := r.srv.Registry().Available("n1", "up"); return ok })
}

// inFlight is the leases the Edge holds on the provider.
func (r *rig) inFlight() int {
	n, ok := r.srv.Registry().Node("n1")
	if !ok || len(n.Providers) == 0 {
		return 0
	}
	return n.Providers[0].InFlight + n.Providers[0].LongContextInFlight
}

// settled waits until no lease is held and nothing is queued, and returns
// the leases still held if that never happens.
func (r *rig) settled() int {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if r.inFlight() == 0 && r.srv.PoolStats().Queued == 0 {
			return 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r.inFlight() + r.srv.PoolStats().Queued
}

// load runs n concurrent requests and tallies them.
func (r *rig) load(n int, stream bool, key string, prompt func(i int) string) *Tally {
	var tally Tally
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			tally.Add(Chat(ctx, r.client, r.url, key, "m", prompt(i), stream, 0))
		})
	}
	wg.Wait()
	return &tally
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// heapInuse is this process's in-use heap after a GC.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func checkTally(t *testing.T, name string, tally *Tally) {
	t.Helper()
	if tally.Lost() != 0 || tally.Terminals() != tally.Requests {
		t.Errorf("%s: %d requests, %d terminals, %d lost: %v", name, tally.Requests, tally.Terminals(), tally.Lost(), tally.Details)
	}
}

func prompt(s string) func(int) string {
	return func(i int) string { return fmt.Sprintf("%s %d %s", s, i, strings.Repeat("w", 8)) }
}
