package controlplane

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net/url"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

// TestCoolingChanges: a cooling event is derived for each provider whose
// cooling keys changed between two statuses, and only then.
func TestCoolingChanges(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0).UTC()
	t1 := t0.Add(time.Minute)
	prov := func(id string, until *time.Time, models ...string) ProviderView {
		p := ProviderView{ID: id, CoolingUntil: until}
		for _, m := range models {
			if p.CoolingModels == nil {
				p.CoolingModels = map[string]time.Time{}
			}
			p.CoolingModels[m] = t0
		}
		return p
	}
	node := func(id string, ps ...ProviderView) NodeView { return NodeView{ID: id, Providers: ps} }
	later := func(p ProviderView) ProviderView { // the same keys, later ends
		if p.CoolingUntil != nil {
			p.CoolingUntil = &t1
		}
		for m := range p.CoolingModels {
			p.CoolingModels[m] = t1
		}
		return p
	}
	tests := []struct {
		name          string
		before, after []NodeView
		want          []string // "node/provider" of each event
	}{
		{"nothing cools", []NodeView{node("a", prov("p", nil))}, []NodeView{node("a", prov("p", nil))}, nil},
		{"a model begins", []NodeView{node("a", prov("p", nil))}, []NodeView{node("a", prov("p", nil, "m"))}, []string{"a/p"}},
		{"the provider begins", []NodeView{node("a", prov("p", nil, "m"))}, []NodeView{node("a", prov("p", &t0, "m"))}, []string{"a/p"}},
		{"lengthened only", []NodeView{node("a", prov("p", &t0, "m"))}, []NodeView{node("a", later(prov("p", &t0, "m")))}, nil},
		{"one model for another", []NodeView{node("a", prov("p", nil, "m"))}, []NodeView{node("a", prov("p", nil, "n"))}, []string{"a/p"}},
		{"ended", []NodeView{node("a", prov("p", &t0))}, []NodeView{node("a", prov("p", nil))}, []string{"a/p"}},
		{"a new node already cooling", nil, []NodeView{node("a", prov("p", nil)), node("b", prov("q", &t0))}, []string{"b/q"}},
		{"a node that left", []NodeView{node("a", prov("p", &t0))}, nil, nil},
		{"several", []NodeView{node("a", prov("p", nil), prov("q", &t0)), node("c", prov("r", nil))},
			[]NodeView{node("a", prov("p", nil, "m"), prov("q", nil)), node("b", prov("s", nil)), node("c", prov("r", nil))}, []string{"a/p", "a/q"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, ev := range coolingChanges("e", tt.before, tt.after) {
				if ev.Kind != EventProviderCooling || ev.EdgeID != "e" || ev.Provider == nil {
					t.Fatalf("event %+v", ev)
				}
				got = append(got, ev.NodeID+"/"+ev.Provider.ID)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOperatorCertName: a certificate names an operator by its common
// name, unless it has none or carries a SPIFFE ID (in any letter case).
func TestOperatorCertName(t *testing.T) {
	spiffe, _ := url.Parse("SPIFFE://iop.test/edge/e1")
	web, _ := url.Parse("https://carol.example")
	for _, c := range []struct {
		cert x509.Certificate
		want string
		ok   bool
	}{
		{x509.Certificate{Subject: pkix.Name{CommonName: "carol"}}, "carol", true},
		{x509.Certificate{Subject: pkix.Name{CommonName: "carol"}, URIs: []*url.URL{web}}, "carol", true},
		{x509.Certificate{}, "", false},
		{x509.Certificate{Subject: pkix.Name{CommonName: "e1"}, URIs: []*url.URL{web, spiffe}}, "", false},
	} {
		if got, ok := operatorCertName(&c.cert); got != c.want || ok != c.ok {
			t.Errorf("operatorCertName(CN %q, URIs %v) = %q, %v; want %q, %v", c.cert.Subject.CommonName, c.cert.URIs, got, ok, c.want, c.ok)
		}
	}
}
