package nodes_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/internal/syncbuf"
	"github.com/iop-dev/iop/internal/testpki"
	"github.com/iop-dev/iop/internal/testproxy"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire/iopv1"
)

func kinds(evs []execution.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Kind.String())
	}
	return out
}

func TestRegisterReadyDispatch(t *testing.T) {
	e := startEdge(t, "", 7, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 2)), record("n2", spec("p2", "m2", 1)))})

	// Configured nodes are in the snapshot before they ever connect.
	snap := e.reg.Snapshot()
	if len(snap) != 2 || snap[0].Connected || snap[0].Providers[0].Status != nodes.StatusUnavailable || snap[0].Providers[0].Health != nodes.HealthOffline {
		t.Fatalf("snapshot before connect: %+v", snap)
	}

	sub := e.reg.Subscribe()
	defer sub.Close()
	p := executiontest.New("p1", "m1")
	p.Reply = []string{"hel", "lo"}
	p.Usage = &execution.Usage{InputTokens: 5, OutputTokens: 2}
	p.ToolCalls = []execution.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}}
	rt, _ := runNode(t, e.addr, "n1", host(p))
	gen := waitReady(t, e, "n1", 0)
	if gen>>32 != 7 {
		t.Errorf("generation %#x does not carry boot epoch 7", gen)
	}
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventReady || ev.NodeID != "n1" || ev.Generation != gen {
		t.Fatalf("first event %+v, want ready n1/%d", ev, gen)
	}
	waitNodeReady(t, rt, gen)
	n1, _ := e.reg.Node("n1")
	if !n1.Connected || n1.Providers[0].Status != nodes.StatusAvailable || n1.Providers[0].Health != nodes.HealthHealthy || n1.Providers[0].Capacity != 2 {
		t.Fatalf("n1 after ready: %+v", n1)
	}

	run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r1", ProviderID: "p1", Adapter: "openai", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, run)
	want := []string{"started", "delta", "delta", "tool_call", "usage", "completed"}
	if d := cmp.Diff(want, kinds(evs)); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
	if evs[1].Text+evs[2].Text != "hello" || evs[3].ToolCall.Arguments != `{"a":1}` || evs[4].Usage.InputTokens != 5 || evs[5].StopReason != "stop" {
		t.Errorf("event contents: %+v", evs)
	}
	n1, _ = e.reg.Node("n1")
	if n1.Providers[0].InFlight != 0 {
		t.Errorf("in flight after the terminal: %d", n1.Providers[0].InFlight)
	}

	// The other configured node is still there, not connected.
	if n2, _ := e.reg.Node("n2"); n2.Connected {
		t.Errorf("n2 connected without a Node: %+v", n2)
	}
	if _, err := e.reg.StartRun(ctx(t), "n2", 0, &execution.RunRequest{RunID: "r2", ProviderID: "p2", Target: "m2"}); !errors.Is(err, nodes.ErrNotReady) {
		t.Errorf("StartRun on a node never connected = %v, want ErrNotReady", err)
	}
}

// TestServeOutlastsDescriptorExhaustion: a Node listener whose Accept runs
// out of descriptors (the process's, EMFILE, or the system's, ENFILE) or
// buffers keeps serving, and the Node that dialled meanwhile registers
// once they are back.
func TestServeOutlastsDescriptorExhaustion(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := testproxy.FailAccept(ln, syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS)
	e := startEdgeOn(t, fl, 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")))
	waitReady(t, e, "n1", 0)
}

func TestCommands(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")), func(c *node.Config) { c.Version = "1.2.3" })
	gen := waitReady(t, e, "n1", 0)
	res, err := e.reg.Command(ctx(t), "n1", gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_CAPABILITIES})
	if err != nil {
		t.Fatal(err)
	}
	caps := res.GetCapabilities()
	if !res.GetOk() || caps.GetNodeId() != "n1" || caps.GetVersion() != "1.2.3" || caps.GetGeneration() != gen || len(caps.GetProviders()) != 1 {
		t.Fatalf("capabilities: %v", res)
	}
	res, err = e.reg.Command(ctx(t), "n1", gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_TRANSPORT_STATUS})
	if err != nil || !res.GetOk() || res.GetTransportStatus().GetGeneration() != gen || res.GetTransportStatus().GetBytesReceived() == 0 {
		t.Fatalf("transport status: %v %v", res, err)
	}
	res, err = e.reg.Command(ctx(t), "n1", gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand(99)})
	if err != nil || res.GetOk() {
		t.Fatalf("unknown command: %v %v", res, err)
	}
	if _, err := e.reg.Command(ctx(t), "n1", gen+1, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_CAPABILITIES}); !errors.Is(err, nodes.ErrStaleGeneration) {
		t.Fatalf("command on another generation = %v", err)
	}
}

func TestUnauthenticatedRejected(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	for _, tc := range []struct{ id, token string }{{"n1", "wrong-token"}, {"unknown", token}} {
		rt, stop := runNode(t, e.addr, tc.id, host(executiontest.New("p1", "m1")), func(c *node.Config) { c.Token = tc.token })
		eventually(t, "rejection", func() bool {
			var re *node.RegistrationError
			return errors.As(rt.Status().LastError, &re) && re.Rejection == iopv1.RegisterRejection_REGISTER_REJECTION_UNAUTHENTICATED
		})
		stop()
	}
	if n1, _ := e.reg.Node("n1"); n1.Connected {
		t.Fatal("a wrong token connected n1")
	}
	if ev, err := sub.Poll(); !errors.Is(err, nodes.ErrNoEvent) {
		t.Fatalf("a rejected registration produced an event: %+v %v", ev, err)
	}
}

func TestDuplicateRejectedWhileOldAnswers(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	a, _ := runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")))
	gen := waitReady(t, e, "n1", 0)
	waitNodeReady(t, a, gen)
	nextEvent(t, sub) // ready

	b, stopB := runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")))
	eventually(t, "duplicate rejection", func() bool {
		var re *node.RegistrationError
		return errors.As(b.Status().LastError, &re) && re.Rejection == iopv1.RegisterRejection_REGISTER_REJECTION_DUPLICATE
	})
	stopB()
	if got, ok := e.reg.Current("n1"); !ok || got != gen {
		t.Fatalf("live connection disturbed: current %d/%v, want %d", got, ok, gen)
	}
	if st := a.Status(); st.State != node.StateReady || st.Generation != gen || st.Connects != 1 {
		t.Fatalf("first node disturbed: %+v", st)
	}
	// Barrier: the next event must be the one this test causes now, so no
	// event for the duplicate is waiting or late.
	e.reg.Disconnect("n1", gen, "barrier")
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventDisconnected || ev.Generation != gen || ev.Reason != "disconnected: barrier" {
		t.Fatalf("event %+v, want only the barrier's disconnect", ev)
	}
}

// TestDrainingConnectionDefersRegistration: a Node started while the
// process it replaces is draining (that one sent GOAWAY and finishes a
// run) is refused as DRAINING, not DUPLICATE, and the old connection is
// left alone; the newcomer retries soon, not on its backoff, and is the
// node once the old connection ends. Its backoff starts at 20 s, so a
// retry on the backoff would outlast the wait below.
func TestDrainingConnectionDefersRegistration(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	old := executiontest.New("p1", "m1")
	old.Block = true
	a, _ := runNode(t, e.addr, "n1", host(old))
	gen := waitReady(t, e, "n1", 0)
	waitNodeReady(t, a, gen)
	run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r", ProviderID: "p1", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	<-old.Started()
	shut := make(chan error, 1)
	go func() { shut <- a.Shutdown(context.Background()) }()
	eventually(t, "the old connection draining", func() bool { n1, _ := e.reg.Node("n1"); return n1.Draining })

	b, _ := runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")), func(c *node.Config) {
		c.Backoff = node.Backoff{Base: 20 * time.Second}
	})
	eventually(t, "draining rejection", func() bool {
		var re *node.RegistrationError
		return errors.As(b.Status().LastError, &re) && re.Rejection == iopv1.RegisterRejection_REGISTER_REJECTION_DRAINING
	})
	if got, ok := e.reg.Current("n1"); !ok || got != gen {
		t.Fatalf("draining connection disturbed: current %d/%v, want %d", got, ok, gen)
	}

	old.Release()
	if evs := collect(t, run); evs[len(evs)-1].Kind != execution.EventCompleted {
		t.Fatalf("the draining Node's run ended %+v", evs[len(evs)-1])
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	newGen := waitReady(t, e, "n1", gen)
	waitNodeReady(t, b, newGen)
	if st := b.Status(); st.Connects != 1 {
		t.Fatalf("replacement status %+v", st)
	}
}

// TestSilentConnectionFencedByProbe: a Node whose connection went silent
// (its machine vanished: the proxy holds every byte) comes back as a new
// process. The Edge probes the old connection, fences it, and accepts the
// new one, long before the 45 s heartbeat wait.
func TestSilentConnectionFencedByProbe(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	px := testproxy.New(t, e.addr)
	_, stopOld := runNode(t, px.Addr(), "n1", host(executiontest.New("p1", "m1")))
	oldGen := waitReady(t, e, "n1", 0)
	nextEvent(t, sub)

	px.Pause() // the old machine vanishes without closing anything
	runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")))
	newGen := waitReady(t, e, "n1", oldGen)

	ev := nextEvent(t, sub)
	if ev.Kind != nodes.EventDisconnected || ev.Generation != oldGen || ev.Reason != "superseded" {
		t.Fatalf("event %+v, want the old generation disconnected as superseded", ev)
	}
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventReady || ev.Generation != newGen {
		t.Fatalf("event %+v, want ready for the new generation", ev)
	}
	if newGen <= oldGen {
		t.Fatalf("new generation %d not above old %d", newGen, oldGen)
	}

	// The stale connection closing later produces nothing for the live one.
	px.Resume()
	stopOld()
	px.Cut()
	if _, err := e.reg.StartRun(ctx(t), "n1", oldGen, &execution.RunRequest{RunID: "x", ProviderID: "p1", Target: "m1"}); !errors.Is(err, nodes.ErrStaleGeneration) {
		t.Fatalf("StartRun on the fenced generation = %v", err)
	}
	if got, ok := e.reg.Current("n1"); !ok || got != newGen {
		t.Fatalf("current = %d/%v, want %d", got, ok, newGen)
	}
	e.reg.Disconnect("n1", newGen, "barrier")
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventDisconnected || ev.Generation != newGen || ev.Reason != "disconnected: barrier" {
		t.Fatalf("event %+v, want only the barrier's disconnect (the stale close must produce none)", ev)
	}
}

func TestHeartbeatTimeout(t *testing.T) {
	for _, mode := range []string{"paused", "closed"} {
		t.Run(mode, func(t *testing.T) {
			hb := shortHeartbeat()
			e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1))), Wire: hb})
			sub := e.reg.Subscribe()
			defer sub.Close()
			px := testproxy.New(t, e.addr)
			runNode(t, px.Addr(), "n1", host(executiontest.New("p1", "m1")), func(c *node.Config) { c.Wire = hb })
			gen := waitReady(t, e, "n1", 0)
			nextEvent(t, sub)
			want := "heartbeat_timeout"
			if mode == "paused" {
				px.Pause()
			} else {
				px.Cut()
				want = "transport_error"
			}
			ev := nextEvent(t, sub)
			if ev.Kind != nodes.EventDisconnected || ev.Generation != gen || ev.Reason != want {
				t.Fatalf("event %+v, want disconnected %s for %d", ev, want, gen)
			}
			n1, _ := e.reg.Node("n1")
			if n1.Connected || n1.Providers[0].Health != nodes.HealthOffline || n1.Providers[0].Capacity != 0 || n1.LastDisconnect != want {
				t.Fatalf("after %s: %+v", want, n1)
			}
			// The Node reconnects once the network is back.
			px.Resume()
			newGen := waitReady(t, e, "n1", gen)
			if newGen <= gen {
				t.Fatalf("reconnected with generation %d, not above %d", newGen, gen)
			}
		})
	}
}

func TestReconnectAfterEdgeRestart(t *testing.T) {
	st := store(t, record("n1", spec("p1", "m1", 1)))
	e1 := startEdge(t, "", 1, nodes.Config{Store: st})
	addr := e1.addr
	p := executiontest.New("p1", "m1")
	rt, _ := runNode(t, addr, "n1", host(p))
	oldGen := waitReady(t, e1, "n1", 0)
	waitNodeReady(t, rt, oldGen) // else the first connection may end before the Node counts it
	e1.stop()

	e2 := startEdge(t, addr, 2, nodes.Config{Store: st})
	newGen := waitReady(t, e2, "n1", 0)
	if newGen>>32 != 2 || newGen <= oldGen {
		t.Fatalf("generation after restart %#x, before %#x", newGen, oldGen)
	}
	if _, err := e2.reg.StartRun(ctx(t), "n1", oldGen, &execution.RunRequest{RunID: "r", ProviderID: "p1", Target: "m1"}); !errors.Is(err, nodes.ErrStaleGeneration) {
		t.Fatalf("StartRun with a generation from before the restart = %v", err)
	}
	eventually(t, "node to count its second connection", func() bool { return rt.Status().Connects == 2 })
	run, err := e2.reg.StartRun(ctx(t), "n1", newGen, &execution.RunRequest{RunID: "r", ProviderID: "p1", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	if evs := collect(t, run); evs[len(evs)-1].Kind != execution.EventCompleted {
		t.Fatalf("run after restart: %v", kinds(evs))
	}
}

func TestConfigUpdateAppliedLive(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	p := executiontest.New("p1", "m1")
	p.Meta.Models = []string{"m1", "m2"}
	p.Block = true
	rt, _ := runNode(t, e.addr, "n1", host(p))
	gen := waitReady(t, e, "n1", 0)
	nextEvent(t, sub)
	before, _ := e.reg.Node("n1")

	// A run in flight under the old revision.
	run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "old", ProviderID: "p1", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Started()

	upd := spec("p1", "m2", 3)
	upd.Models = []string{"m1", "m2"}
	e.reg.Refresh(store(t, record("n1", upd)))
	ev := nextEvent(t, sub)
	if ev.Kind != nodes.EventConfigApplied || ev.Revision <= before.ConfigRevision {
		t.Fatalf("event %+v, want config_applied above revision %d", ev, before.ConfigRevision)
	}
	after, _ := e.reg.Node("n1")
	if after.AppliedRevision != after.ConfigRevision || after.Providers[0].Capacity != 3 || after.Generation != gen {
		t.Fatalf("after update: %+v", after)
	}
	if st := rt.Status(); st.Revision != after.ConfigRevision {
		t.Fatalf("node revision %d, edge %d", st.Revision, after.ConfigRevision)
	}
	if run.Revision != before.AppliedRevision {
		t.Fatalf("in-flight run revision %d, want the one it was admitted under (%d)", run.Revision, before.AppliedRevision)
	}
	p.Release()
	if evs := collect(t, run); evs[len(evs)-1].Kind != execution.EventCompleted {
		t.Fatalf("in-flight run across the update: %v", kinds(evs))
	}
	// A new run sees the new model list.
	run2, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "new", ProviderID: "p1", Target: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	if run2.Revision != after.ConfigRevision {
		t.Fatalf("new run revision %d", run2.Revision)
	}
	if evs := collect(t, run2); evs[len(evs)-1].Kind != execution.EventCompleted {
		t.Fatalf("new run: %v", kinds(evs))
	}
}

func TestPayloadOutsideAllowListRefused(t *testing.T) {
	cli := spec("p-adapter", "m1", 1)
	cli.Adapter = "cli"
	cli.Category = execution.CategoryCLI
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1",
		spec("p-ok", "m1", 1),
		spec("p-unknown", "m1", 1),    // not in the Node's allow-list
		cli,                           // the Node hosts it with another adapter
		spec("p-model", "m-other", 1), // a model the Node does not allow
	))})
	rt, _ := runNode(t, e.addr, "n1", []node.Hosted{
		{Provider: executiontest.New("p-ok", "m1")},
		{Provider: executiontest.New("p-adapter", "m1")},
		{Provider: executiontest.New("p-model", "m1"), AllowedModels: []string{"m1"}},
	})
	gen := waitReady(t, e, "n1", 0)
	n1, _ := e.reg.Node("n1")
	got := map[string]nodes.ProviderHealth{}
	for _, p := range n1.Providers {
		got[p.ID] = p.Health
	}
	want := map[string]nodes.ProviderHealth{"p-ok": nodes.HealthHealthy, "p-unknown": nodes.HealthRefused, "p-adapter": nodes.HealthRefused, "p-model": nodes.HealthRefused}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("provider health (-want +got):\n%s", d)
	}
	eventually(t, "node status to list its refusals", func() bool { return rt.Status().State == node.StateReady })
	if d := cmp.Diff([]string{"p-unknown", "p-adapter", "p-model"}, rt.Status().Refused); d != "" {
		t.Errorf("node refused (-want +got):\n%s", d)
	}
	for _, id := range []string{"p-unknown", "p-adapter", "p-model"} {
		if _, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r-" + id, ProviderID: id, Target: "m1"}); !errors.Is(err, nodes.ErrProviderUnavailable) {
			t.Errorf("StartRun on refused %s = %v", id, err)
		}
	}
}

func TestGenerationFencingEndsRuns(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 4)))})
	p := executiontest.New("p1", "m1")
	p.Block = true
	p.Reply = []string{"partial"}
	runNode(t, e.addr, "n1", host(p))
	gen := waitReady(t, e, "n1", 0)
	run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r1", ProviderID: "p1", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []execution.EventKind{execution.EventStarted, execution.EventDelta} {
		if ev, err := run.Next(ctx(t)); err != nil || ev.Kind != want {
			t.Fatalf("event %v %v, want %v", ev.Kind, err, want)
		}
	}
	if err := e.reg.Disconnect("n1", gen, "operator"); err != nil {
		t.Fatal(err)
	}
	ev, err := run.Next(ctx(t))
	if err != nil || ev.Kind != execution.EventFailed || ev.Failure.Class != execution.FailureTransport {
		t.Fatalf("after fencing: %+v %v, want a transport failure", ev, err)
	}
	if _, err := run.Next(ctx(t)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the terminal: %v", err)
	}
	// The Node cancelled the provider call when its connection ended.
	select {
	case err := <-p.Ended():
		if err == nil {
			t.Fatal("provider finished normally after its connection ended")
		}
	case <-ctx(t).Done():
		t.Fatal("provider never saw the cancellation")
	}
	p.Release() // nothing from the old connection can complete the run now
	if _, err := run.Next(ctx(t)); !errors.Is(err, io.EOF) {
		t.Fatalf("a fenced run produced more: %v", err)
	}
}

func TestCancellation(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 4)))})
	p := executiontest.New("p1", "m1")
	p.Block = true
	runNode(t, e.addr, "n1", host(p))
	gen := waitReady(t, e, "n1", 0)
	start := func(id string) *nodes.Run {
		run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: id, ProviderID: "p1", Target: "m1"})
		if err != nil {
			t.Fatal(err)
		}
		if ev, err := run.Next(ctx(t)); err != nil || ev.Kind != execution.EventStarted {
			t.Fatalf("first event %v %v", ev, err)
		}
		<-p.Started()
		return run
	}

	t.Run("cancel message ends only that run", func(t *testing.T) {
		a, b := start("a"), start("b")
		if err := a.Cancel(); err != nil {
			t.Fatal(err)
		}
		ev, err := a.Next(ctx(t))
		if err != nil || ev.Kind != execution.EventFailed || ev.Failure.Class != execution.FailureCanceled {
			t.Fatalf("cancelled run ended %+v %v", ev, err)
		}
		<-p.Ended()
		n1, _ := e.reg.Node("n1")
		if n1.Providers[0].InFlight != 1 {
			t.Fatalf("in flight %d, want 1 (b still runs)", n1.Providers[0].InFlight)
		}
		b.Close()
		<-p.Ended()
	})
	t.Run("closing the run resets it and the node cancels", func(t *testing.T) {
		r := start("c")
		r.Close()
		select {
		case err := <-p.Ended():
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("provider ended with %v, want context canceled", err)
			}
		case <-ctx(t).Done():
			t.Fatal("node never cancelled the provider call")
		}
		if _, err := r.Next(ctx(t)); !errors.Is(err, io.EOF) {
			t.Fatalf("Next after Close = %v", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "d", ProviderID: "p1", Target: "m1", Deadline: time.Now().Add(50 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, run)
		if last := evs[len(evs)-1]; last.Failure == nil || last.Failure.Class != execution.FailureDeadline {
			t.Fatalf("deadline run ended %+v", last)
		}
	})
	eventually(t, "in flight back to zero", func() bool {
		n1, _ := e.reg.Node("n1")
		return n1.Providers[0].InFlight == 0
	})
}

func TestNodeShutdownFailsRunsAsTransport(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	p := executiontest.New("p1", "m1")
	p.Block = true
	_, stop := runNode(t, e.addr, "n1", host(p))
	gen := waitReady(t, e, "n1", 0)
	run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r", ProviderID: "p1", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Started()
	stop()
	evs := collect(t, run)
	if last := evs[len(evs)-1]; last.Kind != execution.EventFailed || last.Failure.Class != execution.FailureTransport {
		t.Fatalf("run on a Node that shut down ended %+v", last)
	}
	if err := <-p.Ended(); err == nil {
		t.Fatal("the provider call was not cancelled")
	}
}

func TestSubscriberThatFallsBehindResyncs(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1))), EventBuffer: 2})
	slow := e.reg.Subscribe()
	defer slow.Close()
	p := executiontest.New("p1", "m1")
	for i := range 3 {
		_, stop := runNode(t, e.addr, "n1", host(p))
		waitReady(t, e, "n1", 0)
		stop()
		eventually(t, fmt.Sprint("disconnect ", i), func() bool { _, ok := e.reg.Current("n1"); return !ok })
	}
	// 6 transitions into a buffer of 2: the subscriber must resync.
	if _, err := slow.Next(ctx(t)); !errors.Is(err, nodes.ErrResync) {
		t.Fatalf("Next = %v, want ErrResync", err)
	}
	if n1, _ := e.reg.Node("n1"); n1.Connected {
		t.Fatal("snapshot after resync shows n1 connected")
	}
}

func TestProviderHealthChanges(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1), spec("p2", "m2", 1)))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	p1, p2 := executiontest.New("p1", "m1"), executiontest.New("p2", "m2")
	runNode(t, e.addr, "n1", host(p1, p2), func(c *node.Config) { c.HealthInterval = 10 * time.Millisecond })
	gen := waitReady(t, e, "n1", 0)
	nextEvent(t, sub)

	p1.SetHealthy(false)
	ev := nextEvent(t, sub)
	if ev.Kind != nodes.EventProviderHealth || ev.Provider.ID != "p1" || ev.Provider.Health != nodes.HealthUnhealthy || ev.Provider.Status != nodes.StatusUnavailable {
		t.Fatalf("event %+v (%+v)", ev, ev.Provider)
	}
	if _, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r", ProviderID: "p1", Target: "m1"}); !errors.Is(err, nodes.ErrProviderUnavailable) {
		t.Fatalf("StartRun on an unhealthy provider = %v", err)
	}
	n1, _ := e.reg.Node("n1")
	if n1.Providers[1].Health != nodes.HealthHealthy {
		t.Fatalf("p2 changed with p1: %+v", n1.Providers[1])
	}
	p1.SetHealthy(true)
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventProviderHealth || ev.Provider.ID != "p1" || ev.Provider.Health != nodes.HealthHealthy {
		t.Fatalf("event %+v", ev)
	}
}

// TestFailedCallChecksProviderAtOnce: a run that fails as unavailable has
// its provider checked at once, not at the next round (an hour here). The
// check decides, not the failure: a provider that passes it stays
// healthy; one that fails it is reported unhealthy, so the Edge admits
// nothing more to it, and the shorter recheck of an unhealthy provider
// reports it back once it passes.
func TestFailedCallChecksProviderAtOnce(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 2)))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	p := executiontest.New("p1", "m1")
	p.Fail = execution.Failf(execution.FailureUnavailable, "upstream unreachable")
	runNode(t, e.addr, "n1", host(p), func(c *node.Config) {
		c.HealthInterval = time.Hour
		c.UnhealthyInterval = 20 * time.Millisecond
	})
	gen := waitReady(t, e, "n1", 0)
	nextEvent(t, sub) // ready
	checks := p.Checks()
	fail := func(id string) {
		t.Helper()
		run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: id, ProviderID: "p1", Target: "m1"})
		if err != nil {
			t.Fatal(err)
		}
		evs := collect(t, run)
		if last := evs[len(evs)-1]; last.Kind != execution.EventFailed || last.Failure.Class != execution.FailureUnavailable {
			t.Fatalf("run %s ended %+v", id, last)
		}
	}

	// The call failed, but the provider answers its check: still healthy.
	fail("r1")
	eventually(t, "a check after the failed run", func() bool { return p.Checks() > checks })
	if ev, err := sub.Poll(); !errors.Is(err, nodes.ErrNoEvent) {
		t.Fatalf("a failed call whose check passed produced %+v %v", ev, err)
	}

	// Now the upstream is down: the next failed call has it reported.
	p.SetHealthy(false)
	fail("r2")
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventProviderHealth || ev.Provider.ID != "p1" || ev.Provider.Health != nodes.HealthUnhealthy {
		t.Fatalf("event %+v (%+v), want p1 unhealthy", ev, ev.Provider)
	}
	if _, _, ok := e.reg.Admission("n1", "p1", "m1"); ok {
		t.Fatal("an unhealthy provider is still admitted")
	}

	p.SetHealthy(true)
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventProviderHealth || ev.Provider.ID != "p1" || ev.Provider.Health != nodes.HealthHealthy {
		t.Fatalf("event %+v (%+v), want p1 healthy again", ev, ev.Provider)
	}
	if _, _, ok := e.reg.Admission("n1", "p1", "m1"); !ok {
		t.Fatal("a recovered provider is not admitted")
	}
}

// rogue emits a Started event, which only the host may do.
type rogue struct{ *executiontest.Provider }

func (r rogue) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	if err := w.WriteEvent(execution.Event{Kind: execution.EventCompleted}); err == nil {
		return execution.Result{}, errors.New("host accepted a terminal from the provider")
	}
	return execution.Result{}, nil
}

func TestProviderCannotEmitTerminals(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	runNode(t, e.addr, "n1", []node.Hosted{{Provider: rogue{executiontest.New("p1", "m1")}}})
	gen := waitReady(t, e, "n1", 0)
	run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r", ProviderID: "p1", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, run)
	if d := cmp.Diff([]string{"started", "failed"}, kinds(evs)); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
	if evs[1].Failure.Class != execution.FailureInternal {
		t.Fatalf("failure %+v", evs[1].Failure)
	}
}

func TestOverTLS(t *testing.T) {
	ca := testpki.NewCA(t, "edge")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testpki.Leaf{})}}
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1))), TLS: serverTLS})
	runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")), func(c *node.Config) {
		c.TLS = &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}
	})
	gen := waitReady(t, e, "n1", 0)
	res, err := e.reg.Command(ctx(t), "n1", gen, &iopv1.NodeCommandRequest{Command: iopv1.NodeCommand_NODE_COMMAND_TRANSPORT_STATUS})
	if err != nil || !res.GetTransportStatus().GetTls() {
		t.Fatalf("transport status over TLS: %v %v", res, err)
	}
	// A plaintext Node cannot register with a TLS Edge.
	rt, stop := runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")))
	eventually(t, "plaintext attempt to fail", func() bool { return rt.Status().LastError != nil })
	stop()
	if got, _ := e.reg.Current("n1"); got != gen {
		t.Fatalf("the TLS node's connection changed: %d", got)
	}
}

// TestCloseEndsWaitingRunAsCanceled: Close on a run whose Next is waiting
// for the Node ends it as cancelled, as Close promises: the stream reset
// Close sends is its own doing, not a broken transport (which a caller
// answers with 503 and Retry-After).
func TestCloseEndsWaitingRunAsCanceled(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	p := executiontest.New("p1", "m1")
	p.Block = true
	runNode(t, e.addr, "n1", host(p))
	gen := waitReady(t, e, "n1", 0)
	run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: "r1", ProviderID: "p1", Target: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Started()
	if ev, err := run.Next(ctx(t)); err != nil || ev.Kind != execution.EventStarted {
		t.Fatalf("first event %+v %v", ev, err)
	}
	type result struct {
		ev  execution.Event
		err error
	}
	next := make(chan result, 1)
	go func() {
		ev, err := run.Next(ctx(t))
		next <- result{ev, err}
	}()
	time.Sleep(20 * time.Millisecond) // let Next wait on the stream (if it has not, it sees io.EOF below)
	run.Close()
	r := <-next
	if !errors.Is(r.err, io.EOF) && (r.err != nil || r.ev.Kind != execution.EventFailed || r.ev.Failure.Class != execution.FailureCanceled) {
		t.Fatalf("Next across Close: %+v %v, want a cancelled terminal", r.ev, r.err)
	}
	if ev, err := run.Next(ctx(t)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the terminal: %+v %v", ev, err)
	}
	if err := <-p.Ended(); !errors.Is(err, context.Canceled) {
		t.Fatalf("the provider's run ended with %v, want it cancelled", err)
	}
}

// TestNodeCertificateRenewal: over mutual TLS, the registry records when
// the Node's client certificate expires and warns when that is near;
// SetTLS serves a renewed server certificate to the next connection and
// refuses to turn TLS off.
func TestNodeCertificateRenewal(t *testing.T) {
	ca := testpki.NewCA(t, "edge")
	var logged syncbuf.Buffer
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testpki.Leaf{})}, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1))), TLS: serverTLS,
		Logger: hclog.New(&hclog.LoggerOptions{Output: &logged, Level: hclog.Warn})})
	soon := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	client := ca.Issue(t, testpki.Leaf{NotAfter: soon})
	runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")), func(c *node.Config) {
		c.TLS = &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", Certificates: []tls.Certificate{client}}
	})
	waitReady(t, e, "n1", 0)
	if n, _ := e.reg.Node("n1"); !n.CertificateExpiry.Equal(soon) {
		t.Fatalf("certificate expiry %v, want %v", n.CertificateExpiry, soon)
	}
	if !strings.Contains(logged.String(), "node certificate expires soon") || !strings.Contains(logged.String(), "node=n1") {
		t.Fatalf("no warning for a certificate 48 h from its end:\n%s", logged.String())
	}

	other := testpki.NewCA(t, "renewed")
	if err := e.reg.SetTLS(&tls.Config{Certificates: []tls.Certificate{other.Issue(t, testpki.Leaf{})}}); err != nil {
		t.Fatal(err)
	}
	c, err := tls.Dial("tcp", e.addr, &tls.Config{RootCAs: other.Pool, ServerName: "localhost", NextProtos: []string{"iop/1"}})
	if err != nil {
		t.Fatalf("the renewed certificate is not served: %v", err)
	}
	c.Close()
	if err := e.reg.SetTLS(nil); !errors.Is(err, nodes.ErrTLSMode) {
		t.Fatalf("SetTLS(nil) on a TLS registry: %v", err)
	}
}

// TestTokenChangeEndsConnection: a reload that changes a Node's token
// (rotated, say, because it leaked) ends the connection that registered
// with the old one, and the old token registers no more; a reload that
// keeps it leaves the connection alone. Before, a Node authenticated
// with a revoked token kept serving until it reconnected.
func TestTokenChangeEndsConnection(t *testing.T) {
	const rotated = "rotated-token-0123456789abcdef"
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1)))})
	sub := e.reg.Subscribe()
	defer sub.Close()
	rt, _ := runNode(t, e.addr, "n1", host(executiontest.New("p1", "m1")))
	gen := waitReady(t, e, "n1", 0)
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventReady {
		t.Fatalf("event %+v, want ready", ev)
	}

	e.reg.Refresh(store(t, record("n1", spec("p1", "m1", 2)))) // same token
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventConfigApplied || ev.Generation != gen {
		t.Fatalf("event %+v after a reload that kept the token, want config_applied on generation %d", ev, gen)
	}

	rec := record("n1", spec("p1", "m1", 2))
	rec.TokenHash = nodes.HashToken(rotated)
	e.reg.Refresh(store(t, rec))
	if ev := nextEvent(t, sub); ev.Kind != nodes.EventDisconnected || ev.Generation != gen || ev.Reason != "token changed" {
		t.Fatalf("event %+v after the token changed, want generation %d disconnected for it", ev, gen)
	}
	// The Node, still holding the old token, is turned away.
	eventually(t, "the old token refused", func() bool {
		var re *node.RegistrationError
		return errors.As(rt.Status().LastError, &re) && re.Rejection == iopv1.RegisterRejection_REGISTER_REJECTION_UNAUTHENTICATED
	})
	if _, ok := e.reg.Current("n1"); ok {
		t.Fatal("a connection with the old token is current")
	}
	// Given the old token back, it registers again.
	e.reg.Refresh(store(t, record("n1", spec("p1", "m1", 2))))
	waitReady(t, e, "n1", gen)
}
