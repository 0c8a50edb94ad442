package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// rawEdge is the Edge's end of one registered connection, driven by hand
// so that a test can send what a correct Edge never would.
type rawEdge struct {
	t    *testing.T
	sess *wire.Session
	gen  uint64
	rev  uint64
}

// newRawEdge starts a Node hosting providers and registers it with a
// hand-driven Edge that configures cfg, generation 5.
func newRawEdge(t *testing.T, cfg *iopv1.NodeConfig, providers ...Hosted) *rawEdge {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	rt, err := New(Config{EdgeAddr: ln.Addr().String(), NodeID: "n1", Token: "node-token-0123456789abcdef",
		Providers: providers, Backoff: Backoff{Base: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { rt.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second)) // a Node that never dials fails the test
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sess, err := wire.Server(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	rctx := testCtx(t)
	ctl, err := sess.AcceptStream(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := ctl.ReadMessage(rctx); err != nil || m.GetRegisterRequest().GetNodeId() != "n1" {
		t.Fatalf("register request %v %v", m, err)
	}
	e := &rawEdge{t: t, sess: sess, gen: 5, rev: cfg.GetRevision()}
	if err := ctl.WriteMessage(nodewire.Msg(&iopv1.RegisterResponse{Accepted: true, Generation: e.gen, Config: cfg})); err != nil {
		t.Fatal(err)
	}
	if m, err := ctl.ReadMessage(rctx); err != nil || m.GetNodeReadyRequest().GetGeneration() != e.gen {
		t.Fatalf("ready request %v %v", m, err)
	}
	if err := ctl.WriteMessage(nodewire.Msg(&iopv1.NodeReadyResponse{Accepted: true})); err != nil {
		t.Fatal(err)
	}
	return e
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// start sends a run request on a stream of its own, for generation gen.
func (e *rawEdge) start(req *execution.RunRequest, gen uint64) *wire.Stream {
	e.t.Helper()
	st, err := e.sess.OpenStream(testCtx(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := st.WriteMessage(nodewire.Msg(nodewire.RunRequest(req, gen, e.rev))); err != nil {
		e.t.Fatal(err)
	}
	return st
}

// events reads a run's events through its terminal.
func (e *rawEdge) events(st *wire.Stream) []execution.Event {
	e.t.Helper()
	var out []execution.Event
	for {
		m, err := st.ReadMessage(testCtx(e.t))
		if err != nil {
			e.t.Fatalf("after %d events: %v", len(out), err)
		}
		ev, ok := nodewire.EventFrom(m.GetRunEvent())
		if !ok {
			e.t.Fatalf("not a run event: %v", m)
		}
		out = append(out, ev)
		if ev.Kind.Terminal() {
			return out
		}
	}
}

// failure runs req to its end and returns its failure (nil for a
// completed run).
func (e *rawEdge) failure(req *execution.RunRequest, gen uint64) *execution.Failure {
	e.t.Helper()
	evs := e.events(e.start(req, gen))
	return evs[len(evs)-1].Failure
}

func cfgOf(providers ...*iopv1.ProviderConfig) *iopv1.NodeConfig {
	return &iopv1.NodeConfig{Revision: 3, Providers: providers}
}

func local(id string, capacity uint32, models ...string) *iopv1.ProviderConfig {
	return &iopv1.ProviderConfig{Id: id, Adapter: "openai", Category: iopv1.ProviderCategory_PROVIDER_CATEGORY_LOCAL, Models: models, Capacity: capacity}
}

// TestRunAdmission: the Node runs what its current plan allows and refuses
// the rest with a classified failure of its own, whatever the Edge sends:
// a provider it does not host, another adapter, a model not offered, an
// unhealthy provider, a full one, a stale generation, a malformed request,
// a run id already running. A refusal costs no capacity.
func TestRunAdmission(t *testing.T) {
	ok := executiontest.New("ok", "m")
	ok.Reply = []string{"a", "b"}
	full := executiontest.New("full", "m")
	full.Block = true
	sick := executiontest.New("sick", "m")
	sick.SetHealthy(false)
	outside := executiontest.New("outside", "m")
	e := newRawEdge(t, cfgOf(local("ok", 4, "m"), local("full", 1, "m"), local("sick", 1, "m")),
		Hosted{Provider: ok}, Hosted{Provider: full}, Hosted{Provider: sick}, Hosted{Provider: outside})
	req := func(provider, runID string) *execution.RunRequest {
		return &execution.RunRequest{RunID: runID, ProviderID: provider, Adapter: "openai", Target: "m",
			Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "x"}}}}
	}

	evs := e.events(e.start(req("ok", "r1"), e.gen))
	var text string
	for _, ev := range evs {
		text += ev.Text
	}
	if evs[0].Kind != execution.EventStarted || evs[len(evs)-1].Kind != execution.EventCompleted || text != "ab" {
		t.Fatalf("a good run: %+v", evs)
	}

	for _, c := range []struct {
		name  string
		req   *execution.RunRequest
		gen   uint64
		class execution.FailureClass
	}{
		{"a provider the plan does not host", req("outside", "r2"), e.gen, execution.FailureUnavailable},
		{"a provider the Node does not have", req("nope", "r3"), e.gen, execution.FailureUnavailable},
		{"another adapter", func() *execution.RunRequest { r := req("ok", "r4"); r.Adapter = "ollama"; return r }(), e.gen, execution.FailureInvalidRequest},
		{"a model not offered", func() *execution.RunRequest { r := req("ok", "r5"); r.Target = "other"; return r }(), e.gen, execution.FailureInvalidRequest},
		{"an unhealthy provider", req("sick", "r6"), e.gen, execution.FailureUnavailable},
		{"a stale generation", req("ok", "r7"), e.gen - 1, execution.FailureTransport},
		{"a malformed request", req("ok", ""), e.gen, execution.FailureInvalidRequest},
	} {
		f := e.failure(c.req, c.gen)
		if f == nil || f.Class != c.class {
			t.Errorf("%s: %v, want %v", c.name, f, c.class)
		}
	}
	if n := outside.Runs() + sick.Runs(); n != 0 {
		t.Fatalf("%d refused runs reached a provider", n)
	}

	// Capacity: the one slot of "full" is taken; a second run is refused;
	// the slot comes back when the first ends.
	first := e.start(req("full", "f1"), e.gen)
	select {
	case <-full.Started():
	case <-testCtx(t).Done():
		t.Fatal("the first run did not start")
	}
	if f := e.failure(req("full", "f2"), e.gen); f == nil || f.Class != execution.FailureUnavailable {
		t.Fatalf("a run over capacity: %v", f)
	}
	// The same run id again, on a provider with room: refused, and it
	// does not cancel or replace the run that holds the id.
	if f := e.failure(req("ok", "f1"), e.gen); f == nil || f.Class != execution.FailureInvalidRequest {
		t.Fatalf("a run id already running: %v", f)
	}
	full.Release()
	if evs := e.events(first); evs[len(evs)-1].Kind != execution.EventCompleted {
		t.Fatalf("the first run: %+v", evs)
	}
	if f := e.failure(req("full", "f3"), e.gen); f != nil {
		t.Fatalf("capacity did not come back: %v", f)
	}
	if f := e.failure(req("ok", "f1"), e.gen); f != nil {
		t.Fatalf("a run id that ended could not be used again: %v", f)
	}
}

// TestCancelRun: a CancelRun for the run's id ends it as cancelled; one
// for another id on its stream is ignored.
func TestCancelRun(t *testing.T) {
	p := executiontest.New("p", "m")
	p.Block = true
	e := newRawEdge(t, cfgOf(local("p", 2, "m")), Hosted{Provider: p})
	st := e.start(&execution.RunRequest{RunID: "r1", ProviderID: "p", Target: "m"}, e.gen)
	select {
	case <-p.Started():
	case <-testCtx(t).Done():
		t.Fatal("the run did not start")
	}
	if err := st.WriteMessage(nodewire.Msg(&iopv1.CancelRun{RunId: "someone-else"})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.Ended():
		t.Fatalf("a CancelRun for another id ended the run: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := st.WriteMessage(nodewire.Msg(&iopv1.CancelRun{RunId: "r1"})); err != nil {
		t.Fatal(err)
	}
	evs := e.events(st)
	if f := evs[len(evs)-1].Failure; f == nil || f.Class != execution.FailureCanceled {
		t.Fatalf("after CancelRun: %+v", evs)
	}
}
