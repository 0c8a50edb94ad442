package nodes_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// FuzzNodeControl sends what a registered Node may put on its control
// stream, any envelope at all, to a real registry over loopback, and holds
// the registry to what a Node can never do: make it panic, widen its
// configuration (providers it was not given, capacity above the
// configured one), have a revision the Edge never sent counted as applied, or
// keep its node from registering afresh once the connection is gone. The
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
			case nodes.EventProviderHealth:
				if p := ev.Provider; p == nil || p.ID != "p1" || p.Capacity > 2 {
					t.Fatalf("a Node widened its configuration: %+v", p)
				}
			case nodes.EventDisconnected:
				return
			}
		}
	})
}
