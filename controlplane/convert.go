package controlplane

import (
	"strings"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// msg wraps a control message body in an Envelope.
func msg(body any) *iopv1.Envelope {
	e := &iopv1.Envelope{}
	switch b := body.(type) {
	case *iopv1.EdgeHelloRequest:
		e.Body = &iopv1.Envelope_EdgeHelloRequest{EdgeHelloRequest: b}
	case *iopv1.EdgeHelloResponse:
		e.Body = &iopv1.Envelope_EdgeHelloResponse{EdgeHelloResponse: b}
	case *iopv1.EdgeStatusRequest:
		e.Body = &iopv1.Envelope_EdgeStatusRequest{EdgeStatusRequest: b}
	case *iopv1.EdgeStatusResponse:
		e.Body = &iopv1.Envelope_EdgeStatusResponse{EdgeStatusResponse: b}
	case *iopv1.EdgeNodeEvent:
		e.Body = &iopv1.Envelope_EdgeNodeEvent{EdgeNodeEvent: b}
	case *iopv1.EdgeCommandRequest:
		e.Body = &iopv1.Envelope_EdgeCommandRequest{EdgeCommandRequest: b}
	case *iopv1.EdgeCommandResponse:
		e.Body = &iopv1.Envelope_EdgeCommandResponse{EdgeCommandResponse: b}
	case *iopv1.EdgeCommandEvent:
		e.Body = &iopv1.Envelope_EdgeCommandEvent{EdgeCommandEvent: b}
	case *iopv1.Error:
		e.Body = &iopv1.Envelope_Error{Error: b}
	default:
		panic("controlplane: msg of an unknown body type")
	}
	return e
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// maxUnixMs is the last millisecond of year 9999, the latest time RFC
// 3339, and so the operator's JSON, can carry.
const maxUnixMs = 253402300799999

// fromUnixMs reads a time an Edge sent: nil when it is absent (0), or
// one no JSON text carries, which would make the whole status refuse to
// encode.
func fromUnixMs(ms int64) *time.Time {
	if ms <= 0 || ms > maxUnixMs {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

func u32(n int) uint32 { return uint32(min(max(int64(n), 0), 1<<31)) }

// u64 is n on the wire; a negative count (none is) is sent as 0.
func u64(n int64) uint64 { return uint64(max(n, 0)) }

// --- Edge side: the Edge's own types to the wire ---------------------------

func nodeToWire(n nodes.NodeSnapshot) *iopv1.EdgeNodeSnapshot {
	out := &iopv1.EdgeNodeSnapshot{
		NodeId:          n.ID,
		Connected:       n.Connected,
		Generation:      n.Generation,
		ConnectedUnixMs: unixMs(n.ConnectedAt),
		LastDisconnect:  nodewire.Note(n.LastDisconnect),
		Draining:        n.Draining,
		// The expiry, not the certificate: no identity detail leaves.
		CertificateExpiryUnixMs: unixMs(n.CertificateExpiry),
		Config: &iopv1.EdgeNodeConfigSummary{
			Revision: n.ConfigRevision, AppliedRevision: n.AppliedRevision, ProviderCount: u32(len(n.Providers)),
		},
	}
	for _, p := range n.Providers {
		out.ProviderSnapshots = append(out.ProviderSnapshots, providerToWire(p))
	}
	return out
}

func providerToWire(p nodes.ProviderSnapshot) *iopv1.ProviderSnapshot {
	return &iopv1.ProviderSnapshot{
		ProviderId:          p.ID,
		Adapter:             p.Adapter,
		Category:            nodewire.Category(p.Category),
		Status:              statusToWire(p.Status),
		Health:              healthToWire(p.Health),
		Capacity:            u32(p.Capacity),
		LongContextCapacity: u32(p.LongContextCapacity),
		InFlight:            u32(p.InFlight),
		LongContextInFlight: u32(p.LongContextInFlight),
		Queued:              u32(p.Queued),
		Models:              p.Models,
		CoolingUntilUnixMs:  unixMs(p.CoolingUntil),
		CoolingModelsUnixMs: coolingToWire(p.CoolingModels),
	}
}

func coolingToWire(models map[string]time.Time) map[string]int64 {
	if len(models) == 0 {
		return nil
	}
	out := make(map[string]int64, len(models))
	for m, t := range models {
		out[m] = unixMs(t)
	}
	return out
}

func statusToWire(s nodes.ProviderStatus) iopv1.ProviderStatus {
	switch s {
	case nodes.StatusAvailable:
		return iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE
	case nodes.StatusDraining:
		return iopv1.ProviderStatus_PROVIDER_STATUS_DRAINING
	case nodes.StatusDisabled:
		return iopv1.ProviderStatus_PROVIDER_STATUS_DISABLED
	}
	return iopv1.ProviderStatus_PROVIDER_STATUS_UNAVAILABLE
}

func healthToWire(h nodes.ProviderHealth) iopv1.ProviderHealth {
	switch h {
	case nodes.HealthHealthy:
		return iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY
	case nodes.HealthUnhealthy:
		return iopv1.ProviderHealth_PROVIDER_HEALTH_UNHEALTHY
	case nodes.HealthRefused:
		return iopv1.ProviderHealth_PROVIDER_HEALTH_REFUSED
	}
	return iopv1.ProviderHealth_PROVIDER_HEALTH_OFFLINE
}

func eventToWire(e nodes.Event) *iopv1.EdgeNodeEvent {
	out := &iopv1.EdgeNodeEvent{
		Seq: e.Seq, NodeId: e.NodeID, Generation: e.Generation,
		Reason: nodewire.Note(e.Reason), Revision: e.Revision, TimeUnixMs: unixMs(e.Time),
	}
	switch e.Kind {
	case nodes.EventReady:
		out.Kind = iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_READY
	case nodes.EventDisconnected:
		out.Kind = iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_DISCONNECTED
	case nodes.EventProviderHealth:
		out.Kind = iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_PROVIDER_CHANGED
	case nodes.EventConfigApplied:
		out.Kind = iopv1.EdgeNodeEventKind_EDGE_NODE_EVENT_KIND_CONFIG_APPLIED
	default:
		return nil
	}
	if e.Provider != nil {
		out.Provider = providerToWire(*e.Provider)
	}
	return out
}

// --- Hub side: the wire to the operator's view ------------------------------

// NodeView is a Node as its Edge last reported it.
type NodeView struct {
	ID string `json:"id"`
	// Connected is dispatch-readiness in the Edge's registry.
	Connected       bool       `json:"connected"`
	Draining        bool       `json:"draining"`
	Generation      uint64     `json:"generation"`
	ConfigRevision  uint64     `json:"config_revision"`
	AppliedRevision uint64     `json:"applied_revision"`
	ConnectedAt     *time.Time `json:"connected_at,omitempty"`
	LastDisconnect  string     `json:"last_disconnect,omitempty"`
	// CertificateExpiry is when the client certificate the Node presented
	// expires (absent without one): the status page warns two weeks
	// ahead.
	CertificateExpiry *time.Time     `json:"certificate_expiry,omitempty"`
	Providers         []ProviderView `json:"providers"`
}

// ProviderView is a provider as its Edge last reported it.
type ProviderView struct {
	ID                  string   `json:"id"`
	Adapter             string   `json:"adapter"`
	Category            string   `json:"category"`
	Models              []string `json:"models"`
	Status              string   `json:"status"`
	Health              string   `json:"health"`
	Capacity            int      `json:"capacity"`
	LongContextCapacity int      `json:"long_context_capacity"`
	InFlight            int      `json:"in_flight"`
	LongContextInFlight int      `json:"long_context_in_flight"`
	Queued              int      `json:"queued"`
	// CoolingUntil is when a provider that answered "not now" as a whole
	// (503, 529) gets admission's slots again (absent when it does not
	// cool); CoolingModels, by model, when each model that answered 429
	// does.
	CoolingUntil  *time.Time           `json:"cooling_until,omitempty"`
	CoolingModels map[string]time.Time `json:"cooling_models,omitempty"`
}

func nodeFromWire(m *iopv1.EdgeNodeSnapshot) NodeView {
	v := NodeView{
		ID:                m.GetNodeId(),
		Connected:         m.GetConnected(),
		Draining:          m.GetDraining(),
		Generation:        m.GetGeneration(),
		ConfigRevision:    m.GetConfig().GetRevision(),
		AppliedRevision:   m.GetConfig().GetAppliedRevision(),
		ConnectedAt:       fromUnixMs(m.GetConnectedUnixMs()),
		LastDisconnect:    nodewire.Note(m.GetLastDisconnect()),
		CertificateExpiry: fromUnixMs(m.GetCertificateExpiryUnixMs()),
		Providers:         []ProviderView{},
	}
	for _, p := range m.GetProviderSnapshots() {
		v.Providers = append(v.Providers, providerFromWire(p))
	}
	return v
}

func providerFromWire(p *iopv1.ProviderSnapshot) ProviderView {
	cat, ok := nodewire.CategoryFrom(p.GetCategory())
	if !ok {
		cat = execution.Category("unknown")
	}
	models := p.GetModels()
	if models == nil {
		models = []string{}
	}
	return ProviderView{
		ID:                  p.GetProviderId(),
		Adapter:             p.GetAdapter(),
		Category:            string(cat),
		Models:              models,
		Status:              enumName(p.GetStatus().String(), "PROVIDER_STATUS_"),
		Health:              enumName(p.GetHealth().String(), "PROVIDER_HEALTH_"),
		Capacity:            int(p.GetCapacity()),
		LongContextCapacity: int(p.GetLongContextCapacity()),
		InFlight:            int(p.GetInFlight()),
		LongContextInFlight: int(p.GetLongContextInFlight()),
		Queued:              int(p.GetQueued()),
		CoolingUntil:        fromUnixMs(p.GetCoolingUntilUnixMs()),
		CoolingModels:       coolingFromWire(p.GetCoolingModelsUnixMs()),
	}
}

// coolingFromWire reads the models an Edge says cool; one without a name,
// or with a time JSON cannot carry, is left out.
func coolingFromWire(models map[string]int64) map[string]time.Time {
	var out map[string]time.Time
	for m, ms := range models {
		t := fromUnixMs(ms)
		if t == nil || m == "" {
			continue
		}
		if out == nil {
			out = map[string]time.Time{}
		}
		out[m] = *t
	}
	return out
}

// enumName turns PROVIDER_STATUS_AVAILABLE into "available"; a value this
// build does not know (a number) becomes "unknown".
func enumName(s, prefix string) string {
	name, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return "unknown"
	}
	return strings.ToLower(name)
}
