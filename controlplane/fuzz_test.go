package controlplane

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/wire/iopv1"
)

// FuzzReadSnapshots feeds the status stream decoder the bytes an Edge (or
// anything that dialed the Hub) could send: it returns Nodes or an error,
// never panics, and never allocates beyond its bounds.
func FuzzReadSnapshots(f *testing.F) {
	var good []byte
	for _, id := range []string{"n1", "n2"} {
		b, _ := proto.Marshal(nodeToWire(nodes.NodeSnapshot{ID: id, Connected: true, Providers: []nodes.ProviderSnapshot{{ID: "p", Adapter: "openai", Capacity: 2}}}))
		good = protowire.AppendVarint(good, uint64(len(b)))
		good = append(good, b...)
	}
	f.Add(good, uint16(2))
	f.Add(good, uint16(3))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, uint16(1))
	// Times no RFC 3339 text can carry (JSON would refuse the whole
	// status): read as absent.
	far, _ := proto.Marshal(&iopv1.EdgeNodeSnapshot{NodeId: "n", ConnectedUnixMs: math.MaxInt64, CertificateExpiryUnixMs: 253402300800000,
		ProviderSnapshots: []*iopv1.ProviderSnapshot{{ProviderId: "p", CoolingUntilUnixMs: math.MaxInt64,
			CoolingModelsUnixMs: map[string]int64{"m": math.MaxInt64, "": 1, "ok": 1}}}})
	f.Add(append(protowire.AppendVarint(nil, uint64(len(far))), far...), uint16(1))
	f.Fuzz(func(t *testing.T, data []byte, n uint16) {
		nodes, err := readSnapshots(bytes.NewReader(data), int(n))
		if err == nil && len(nodes) != int(n) {
			t.Fatalf("%d nodes for %d announced", len(nodes), n)
		}
		// What was read is what the operator's API serves: it encodes.
		if _, err := json.Marshal(nodes); err != nil {
			t.Fatalf("the Nodes read do not encode as JSON: %v", err)
		}
	})
}

// FuzzApplyEvents applies the lifecycle events an Edge could relay (each a
// varint length and an EdgeNodeEvent, as many as data holds) to a view
// taken from a status: it never panics, never adds, drops or renames a
// Node or a provider (an event names what the last status listed, or is
// ignored), and what it leaves encodes as JSON for the operator's API.
func FuzzApplyEvents(f *testing.F) {
	var seed []byte
	add := func(ev *iopv1.EdgeNodeEvent) {
		b, _ := proto.Marshal(ev)
		seed = protowire.AppendVarint(seed, uint64(len(b)))
		seed = append(seed, b...)
	}
	add(&iopv1.EdgeNodeEvent{Seq: 1, Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_DISCONNECTED, NodeId: "n1", Reason: "heartbeat_timeout"})
	add(&iopv1.EdgeNodeEvent{Seq: 2, Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_READY, NodeId: "n1", Generation: 3, Revision: 2, TimeUnixMs: math.MaxInt64})
	add(&iopv1.EdgeNodeEvent{Seq: 3, Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_PROVIDER_CHANGED, NodeId: "n2",
		Provider: &iopv1.ProviderSnapshot{ProviderId: "p2", Capacity: 9, CoolingUntilUnixMs: math.MaxInt64}})
	add(&iopv1.EdgeNodeEvent{Seq: 4, Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_PROVIDER_CHANGED, NodeId: "n2",
		Provider: &iopv1.ProviderSnapshot{ProviderId: "unknown"}})
	add(&iopv1.EdgeNodeEvent{Seq: 5, Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_CONFIG_APPLIED, NodeId: "n9", Revision: 7})
	add(&iopv1.EdgeNodeEvent{Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_STATUS_CHANGED})
	add(&iopv1.EdgeNodeEvent{Kind: 99, NodeId: "n1"})
	f.Add(seed)
	f.Add([]byte{0x02, 0x10, 0x03})
	f.Fuzz(func(t *testing.T, data []byte) {
		base := func() EdgeView {
			return EdgeView{Nodes: []NodeView{
				nodeFromWire(nodeToWire(nodes.NodeSnapshot{ID: "n1", Connected: true, Generation: 2, Providers: []nodes.ProviderSnapshot{{ID: "p1", Capacity: 2}}})),
				nodeFromWire(nodeToWire(nodes.NodeSnapshot{ID: "n2", Providers: []nodes.ProviderSnapshot{{ID: "p2"}, {ID: "p3"}}})),
			}}
		}
		v, want := base(), base()
		for len(data) > 0 {
			n, k := protowire.ConsumeVarint(data)
			if k < 0 || n > uint64(len(data)-k) {
				break
			}
			var ev iopv1.EdgeNodeEvent
			if proto.Unmarshal(data[k:k+int(n)], &ev) == nil {
				applyToView(&v, &ev)
			}
			data = data[k+int(n):]
		}
		if len(v.Nodes) != len(want.Nodes) {
			t.Fatalf("%d Nodes after the events, want %d", len(v.Nodes), len(want.Nodes))
		}
		for i, n := range v.Nodes {
			if n.ID != want.Nodes[i].ID || len(n.Providers) != len(want.Nodes[i].Providers) {
				t.Fatalf("Node %d is %q with %d providers, want %q with %d", i, n.ID, len(n.Providers), want.Nodes[i].ID, len(want.Nodes[i].Providers))
			}
			for j, p := range n.Providers {
				if p.ID != want.Nodes[i].Providers[j].ID {
					t.Fatalf("Node %s provider %d is %q, want %q", n.ID, j, p.ID, want.Nodes[i].Providers[j].ID)
				}
			}
		}
		if _, err := json.Marshal(v); err != nil {
			t.Fatalf("the view does not encode as JSON: %v", err)
		}
	})
}
