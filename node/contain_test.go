package node

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// panicky is a provider whose runs, tunnels and health checks panic while
// their switch is on, as a provider with a bug would.
type panicky struct {
	*executiontest.Provider
	runs, checks atomic.Bool
}

func (p *panicky) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	if p.runs.Load() {
		w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: "half an answer"})
		panic("provider bug: index out of range")
	}
	return p.Provider.Run(ctx, req, w)
}

func (p *panicky) CheckHealth(ctx context.Context) error {
	if p.checks.Load() {
		panic("provider bug in its health check")
	}
	return p.Provider.CheckHealth(ctx)
}

func (p *panicky) Tunnel(context.Context, *execution.TunnelRequest, execution.TunnelWriter) error {
	panic("provider bug in its tunnel")
}

// TestProviderPanicIsContained: a provider that panics in a run, a tunnel
// or a health check fails that call (an internal failure, a tunnel's
// INTERNAL end, unhealthy), and the Node goes on serving: its slot comes
// back, and the other providers' runs are served. Before, the panic ended
// the Node's process with every call on it.
func TestProviderPanicIsContained(t *testing.T) {
	ok := executiontest.New("ok", "m")
	ok.Reply = []string{"fine"}
	buggy := &panicky{Provider: executiontest.New("buggy", "m")}
	buggy.runs.Store(true)
	sick := &panicky{Provider: executiontest.New("sick", "m")}
	sick.checks.Store(true)
	e := newRawEdge(t, cfgOf(local("ok", 1, "m"), local("buggy", 1, "m"), local("sick", 1, "m")),
		Hosted{Provider: ok}, Hosted{Provider: buggy}, Hosted{Provider: sick})
	req := func(provider, runID string) *execution.RunRequest {
		return &execution.RunRequest{RunID: runID, ProviderID: provider, Adapter: "openai", Target: "m",
			Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "x"}}}}
	}

	if f := e.failure(req("buggy", "r1"), e.gen); f == nil || f.Class != execution.FailureInternal {
		t.Fatalf("a run whose provider panicked: %v, want an internal failure", f)
	}
	// Its one slot came back: the next run is admitted (and, the bug
	// gone, served).
	buggy.runs.Store(false)
	if f := e.failure(req("buggy", "r2"), e.gen); f != nil {
		t.Fatalf("the slot of the run that panicked: %v", f)
	}
	if f := e.failure(req("ok", "r3"), e.gen); f != nil {
		t.Fatalf("another provider's run after the panic: %v", f)
	}
	// A health check that panics counts as failed: the provider is
	// unhealthy, and its runs are refused.
	if f := e.failure(req("sick", "r4"), e.gen); f == nil || f.Class != execution.FailureUnavailable {
		t.Fatalf("a run on the provider whose health check panicked: %v, want unavailable", f)
	}

	st, err := e.sess.OpenStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteMessage(nodewire.Msg(&iopv1.ProviderTunnelRequest{Generation: e.gen, ProviderId: "buggy", Method: "POST",
		Path: "/v1/chat/completions", Target: "m", Body: []byte(`{"model":"m"}`), InlineBody: true})); err != nil {
		t.Fatal(err)
	}
	m, err := st.ReadMessage(testCtx(t))
	if end := m.GetProviderTunnelEnd(); err != nil || end == nil || end.GetOk() || end.GetError() != iopv1.TunnelError_TUNNEL_ERROR_INTERNAL {
		t.Fatalf("a tunnel whose provider panicked: %v %v, want an INTERNAL end", m, err)
	}
	if f := e.failure(req("buggy", "r5"), e.gen); f != nil {
		t.Fatalf("the slot of the tunnel that panicked: %v", f)
	}
}
