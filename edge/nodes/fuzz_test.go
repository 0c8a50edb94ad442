package nodes_test

import (
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// FuzzNodeControl sends what a registered Node may put on its control
// stream, any envelope at all, to a real registry over loopback, and holds
// the registry to what a Node can never do: make it panic, have a
// revision the Edge never sent counted as applied, or keep its node from
// registering afresh once the connection is gone. (What a Node reports of
// its providers is not checked: the snapshots and events read here take
// providers and capacities from the configuration.) The
// protobuf decoding itself is FuzzSession's and FuzzTunnelCodec's; this
// target is for the registry's handling of the messages that decode.
func FuzzNodeControl(f *testing.F) {
	avail := iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE
	healthy := iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY
	for _, body := range []any{
		&iopv1.ConfigUpdateAck{Revision: 1, Providers: []*iopv1.ProviderSnapshot{{ProviderId: "p1", Status: avail, Health: healthy, Capacity: 1, Models: []string{"m1"}}}},
		&iopv1.ConfigUpdateAck{Revision: 99, Providers: []*iopv1.ProviderSnapshot{{ProviderId: "p1", Status: avail, Health: healthy, Capacity: 9}}},
		&iopv1.ConfigUpdateAck{Revision: 1, Refused: []*iopv1.ProviderRefusal{{ProviderId: "p1"}}, Workspaces: []string{"w", "w"}},
		&iopv1.ProviderSnapshotUpdate{Generation: 1 << 32, Providers: []*iopv1.ProviderSnapshot{{ProviderId: "smuggled", Status: avail, Health: healthy, Capacity: 100}}},
		&iopv1.ProviderSnapshotUpdate{Providers: []*iopv1.ProviderSnapshot{{ProviderId: "p1", Status: iopv1.ProviderStatus(42), Health: iopv1.ProviderHealth(-1)}}},
		&iopv1.RegisterRequest{NodeId: "n1"},
		&iopv1.NodeReadyRequest{Generation: 1},
	} {
		b, err := proto.Marshal(nodewire.Msg(body))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	e := startEdge(f, "", 1, nodes.Config{Store: store(f, record("n1", spec("p1", "m1", 2))), RegisterTimeout: time.Second})
	f.Fuzz(func(t *testing.T, data []byte) {
		var env iopv1.Envelope
		if proto.Unmarshal(data, &env) != nil {
			return
		}
		sub := e.reg.Subscribe()
		defer sub.Close()
		sess, err := wire.Dial(ctx(t), "tcp", e.addr, nil, &wire.Config{CloseLinger: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		st, err := sess.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		r := register(t, st, "n1", token)
		if !r.GetAccepted() {
			t.Fatalf("registration refused: %v", r)
		}
		gen, rev := r.GetGeneration(), r.GetConfig().GetRevision()
		st.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: gen, Revision: rev, Providers: []*iopv1.ProviderSnapshot{
			{ProviderId: "p1", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 2, Models: []string{"m1"}},
		}}))
		if env, err := st.ReadMessage(ctx(t)); err != nil || !env.GetNodeReadyResponse().GetAccepted() {
			t.Fatalf("ready answer %v %v", env, err)
		}
		// The fuzzed message, then one the control stream never takes: the
		// registry reads them in order, so by the time the second has
		// closed the session, the first has had whatever effect it has.
		st.WriteMessage(&env)
		st.WriteMessage(nodewire.Msg(&iopv1.RegisterRequest{NodeId: "n1"}))
		select {
		case <-sess.Done():
		case <-time.After(15 * time.Second):
			t.Fatal("the registry kept the session open after an unexpected message")
		}
		// Every event of this connection, up to its disconnect.
		for {
			ev, err := sub.Next(ctx(t))
			if err != nil {
				t.Fatalf("events: %v", err)
			}
			if ev.NodeID != "n1" || ev.Generation != gen {
				continue
			}
			switch ev.Kind {
			case nodes.EventConfigApplied:
				if ev.Revision > rev {
					t.Fatalf("revision %d counted as applied; the Edge sent %d", ev.Revision, rev)
				}
			case nodes.EventDisconnected:
				return
			}
		}
	})
}

// FuzzNodeRun answers runs with any sequence of envelopes a Node may send
// on a run's stream, and holds Run.Next to its contract whatever the Node
// sends: no panic, exactly one terminal event and nothing after it, then
// io.EOF; and the run's claim on the provider given back. The input is a
// sequence of envelopes, each a varint length and its protobuf bytes; a run
// event without a run id gets the run's own.
func FuzzNodeRun(f *testing.F) {
	started := nodewire.Msg(&iopv1.RunEvent{Event: &iopv1.RunEvent_Started{Started: &iopv1.RunStarted{Model: "m1"}}})
	delta := nodewire.Msg(&iopv1.RunEvent{Event: &iopv1.RunEvent_Delta{Delta: &iopv1.OutputDelta{Text: "hi"}}})
	usage := nodewire.Msg(&iopv1.RunEvent{Event: &iopv1.RunEvent_Usage{Usage: &iopv1.Usage{InputTokens: 1 << 63, OutputTokens: 2}}})
	done := nodewire.Msg(&iopv1.RunEvent{Event: &iopv1.RunEvent_Completed{Completed: &iopv1.RunCompleted{StopReason: "end_turn"}}})
	failed := nodewire.Msg(&iopv1.RunEvent{Event: &iopv1.RunEvent_Failed{Failed: &iopv1.RunFailed{Class: iopv1.FailureClass(99), Message: "no"}}})
	other := nodewire.Msg(&iopv1.RunEvent{RunId: "someone-else", Event: &iopv1.RunEvent_Delta{Delta: &iopv1.OutputDelta{Text: "x"}}})
	for _, seq := range [][]*iopv1.Envelope{
		{started, delta, usage, done},
		{started, delta, done, delta},
		{delta},
		{started, started},
		{failed},
		{},
		{started, other},
		{started, nodewire.Msg(&iopv1.RegisterRequest{NodeId: "n1"})},
		{started, &iopv1.Envelope{}},
	} {
		var b []byte
		for _, env := range seq {
			m, err := proto.Marshal(env)
			if err != nil {
				f.Fatal(err)
			}
			b = protowire.AppendVarint(b, uint64(len(m)))
			b = append(b, m...)
		}
		f.Add(b)
	}

	e := startEdge(f, "", 1, nodes.Config{Store: store(f, record("n1", spec("p1", "m1", 2))), RegisterTimeout: time.Second})
	// One hand-driven Node for every input: it answers each run with the
	// script of the input being run.
	var script atomic.Pointer[[]*iopv1.Envelope]
	// The Edge resets every run it ends itself, far faster than the
	// rapid-reset guard lets a peer: this Node is not what is tested.
	sess, err := wire.Dial(ctx(f), "tcp", e.addr, nil, &wire.Config{ResetRate: 1 << 30, ResetBurst: 1 << 30})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { sess.Close() })
	sess.Handle(func(st *wire.Stream) {
		env, err := st.ReadMessage(sess.Context())
		if err != nil {
			return
		}
		id := env.GetRunRequest().GetRunId()
		for _, m := range *script.Load() {
			if re := m.GetRunEvent(); re != nil && re.GetRunId() == "" {
				m = proto.Clone(m).(*iopv1.Envelope)
				m.GetRunEvent().RunId = id
			}
			if st.WriteMessage(m) != nil {
				return
			}
		}
		st.CloseWrite()
		for {
			if _, err := st.ReadMessage(sess.Context()); err != nil {
				return // the Edge ended the run
			}
		}
	})
	ctl, err := sess.OpenStream(ctx(f))
	if err != nil {
		f.Fatal(err)
	}
	r := register(f, ctl, "n1", token)
	gen := r.GetGeneration()
	ctl.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: gen, Revision: r.GetConfig().GetRevision(), Providers: []*iopv1.ProviderSnapshot{
		{ProviderId: "p1", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 2, Models: []string{"m1"}},
	}}))
	if env, err := ctl.ReadMessage(ctx(f)); err != nil || !env.GetNodeReadyResponse().GetAccepted() {
		f.Fatalf("ready answer %v %v", env, err)
	}
	var runs atomic.Uint64
	f.Fuzz(func(t *testing.T, data []byte) {
		var envs []*iopv1.Envelope
		for len(data) > 0 {
			n, k := protowire.ConsumeVarint(data)
			if k < 0 || n > uint64(len(data)-k) {
				break
			}
			var env iopv1.Envelope
			if proto.Unmarshal(data[k:k+int(n)], &env) == nil {
				envs = append(envs, &env)
			}
			data = data[k+int(n):]
		}
		script.Store(&envs)
		id := fmt.Sprintf("r%d", runs.Add(1))
		run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: id, ProviderID: "p1", Adapter: "openai", Target: "m1"})
		if err != nil {
			t.Fatalf("start run: %v (the Node's session: %v)", err, sess.Err())
		}
		terminals := 0
		for {
			ev, err := run.Next(ctx(t))
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("next: %v", err)
			}
			if terminals > 0 {
				t.Fatalf("event %v after the terminal", ev.Kind)
			}
			if ev.Kind.Terminal() {
				terminals++
			}
		}
		if terminals != 1 {
			t.Fatalf("%d terminal events, want 1", terminals)
		}
		run.Close()
		n1, _ := e.reg.Node("n1")
		if !n1.Connected || n1.Providers[0].InFlight != 0 {
			t.Fatalf("after the run: connected %v, in flight %d", n1.Connected, n1.Providers[0].InFlight)
		}
	})
}
