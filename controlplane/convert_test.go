package controlplane

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/wire/iopv1"
)

// TestProviderCoolingCrossesTheWire: a provider's cooldowns (its own and
// its models'), as the Edge reports them, reach the operator's view to
// the millisecond; one that does not cool has none; a registry event
// about the provider (which does not carry them) leaves the last
// status's in place, and a disconnect clears them.
func TestProviderCoolingCrossesTheWire(t *testing.T) {
	until := time.Date(2026, 12, 6, 21, 30, 5, 123_000_000, time.UTC)
	b, err := proto.Marshal(nodeToWire(nodes.NodeSnapshot{ID: "n1", Connected: true, Providers: []nodes.ProviderSnapshot{
		{ID: "cool", Status: nodes.StatusAvailable, CoolingUntil: until, CoolingModels: map[string]time.Time{"m1": until.Add(time.Second)}},
		{ID: "warm", Status: nodes.StatusAvailable},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	var m iopv1.EdgeNodeSnapshot
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	v := EdgeView{Nodes: []NodeView{nodeFromWire(&m)}}
	ps := v.Nodes[0].Providers
	if ps[0].CoolingUntil == nil || !ps[0].CoolingUntil.Equal(until) || len(ps[0].CoolingModels) != 1 || !ps[0].CoolingModels["m1"].Equal(until.Add(time.Second)) ||
		ps[1].CoolingUntil != nil || ps[1].CoolingModels != nil {
		t.Fatalf("cooling in the view: %+v, %+v; want %v and m1 a second later, none", ps[0], ps[1], until)
	}

	applyToView(&v, &iopv1.EdgeNodeEvent{Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_PROVIDER_CHANGED, NodeId: "n1",
		Provider: providerToWire(nodes.ProviderSnapshot{ID: "cool", Status: nodes.StatusAvailable, Health: nodes.HealthUnhealthy})})
	if p := v.Nodes[0].Providers[0]; p.Health != "unhealthy" || p.CoolingUntil == nil || !p.CoolingUntil.Equal(until) || len(p.CoolingModels) != 1 {
		t.Fatalf("after a provider event: health %s, cooling until %v, models %v", p.Health, p.CoolingUntil, p.CoolingModels)
	}
	applyToView(&v, &iopv1.EdgeNodeEvent{Kind: iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_DISCONNECTED, NodeId: "n1"})
	if p := v.Nodes[0].Providers[0]; p.CoolingUntil != nil || p.CoolingModels != nil {
		t.Fatalf("after a disconnect: cooling until %v, models %v", p.CoolingUntil, p.CoolingModels)
	}
}
