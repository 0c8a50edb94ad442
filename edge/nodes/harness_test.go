package nodes_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const token = "test-token-0123456789abcdef"

func record(id string, providers ...nodes.ProviderSpec) nodes.Record {
	return nodes.Record{ID: id, TokenHash: nodes.HashToken(token), Providers: providers}
}

func spec(id, model string, capacity int) nodes.ProviderSpec {
	return nodes.ProviderSpec{ID: id, Adapter: "openai", Category: execution.CategoryLocal, Models: []string{model}, Capacity: capacity}
}

type edge struct {
	t     testing.TB
	reg   *nodes.Registry
	ln    net.Listener
	addr  string
	epoch uint32
	done  chan error
}

func store(t testing.TB, records ...nodes.Record) *nodes.StaticStore {
	t.Helper()
	s, err := nodes.NewStaticStore(records)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startEdge runs a registry on addr ("" for a fresh port).
func startEdge(t testing.TB, addr string, epoch uint32, cfg nodes.Config) *edge {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return startEdgeOn(t, ln, epoch, cfg)
}

// startEdgeOn runs a registry on ln.
func startEdgeOn(t testing.TB, ln net.Listener, epoch uint32, cfg nodes.Config) *edge {
	t.Helper()
	cfg.Epoch = epoch
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = 300 * time.Millisecond
	}
	reg, err := nodes.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &edge{t: t, reg: reg, ln: ln, addr: ln.Addr().String(), epoch: epoch, done: make(chan error, 1)}
	go func() { e.done <- reg.Serve(ln) }()
	t.Cleanup(e.stop)
	return e
}

func (e *edge) stop() {
	e.reg.Close()
	if err := <-e.done; err != nil && !errors.Is(err, nodes.ErrClosed) {
		e.t.Errorf("Serve: %v", err)
	}
	e.done <- nodes.ErrClosed // later stops return at once
}

// runNode runs a node.Runtime until the test ends (or the returned stop).
func runNode(t *testing.T, addr, id string, hosted []node.Hosted, mutate ...func(*node.Config)) (*node.Runtime, func()) {
	t.Helper()
	cfg := node.Config{
		EdgeAddr:  addr,
		NodeID:    id,
		Token:     token,
		Providers: hosted,
		Backoff:   node.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
	}
	for _, m := range mutate {
		m(&cfg)
	}
	rt, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { rt.Run(ctx) })
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return rt, stop
}

func host(ps ...*executiontest.Provider) []node.Hosted {
	var out []node.Hosted
	for _, p := range ps {
		out = append(out, node.Hosted{Provider: p})
	}
	return out
}

// eventually polls cond; the bound only turns a hang into a failure.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitReady(t *testing.T, e *edge, id string, notGen uint64) uint64 {
	t.Helper()
	var gen uint64
	eventually(t, id+" ready", func() bool {
		g, ok := e.reg.Current(id)
		gen = g
		return ok && g != notGen
	})
	return gen
}

// waitNodeReady waits for the Node's own status to say ready on gen. The
// Edge counts a Node ready when it answers NodeReady; the Node records it
// only once it has read that answer, so the two can be seen out of step.
func waitNodeReady(t *testing.T, rt *node.Runtime, gen uint64) {
	t.Helper()
	eventually(t, "node status ready", func() bool {
		st := rt.Status()
		return st.State == node.StateReady && st.Generation == gen
	})
}

func nextEvent(t *testing.T, sub *nodes.Subscription) nodes.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next event: %v", err)
	}
	return ev
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func shortHeartbeat() *wire.Config {
	return &wire.Config{TestHeartbeat: &wire.HeartbeatProfile{Interval: 30 * time.Millisecond, Timeout: 150 * time.Millisecond}, CloseLinger: 50 * time.Millisecond}
}

// collect drains a run and returns its events.
func collect(t *testing.T, run *nodes.Run) []execution.Event {
	t.Helper()
	var out []execution.Event
	for {
		ev, err := run.Next(ctx(t))
		if err != nil {
			t.Fatalf("run.Next: %v (after %d events)", err, len(out))
		}
		out = append(out, ev)
		if ev.Kind.Terminal() {
			if _, err := run.Next(ctx(t)); err == nil {
				t.Fatal("run.Next after the terminal returned an event")
			}
			return out
		}
	}
}
