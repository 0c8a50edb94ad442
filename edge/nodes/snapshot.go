package nodes

import (
	"maps"
	"slices"
	"time"

	"github.com/iop-dev/iop/execution"
)

// ProviderStatus is whether a provider can take work.
type ProviderStatus string

// Provider statuses.
const (
	StatusAvailable   ProviderStatus = "available"
	StatusUnavailable ProviderStatus = "unavailable"
	StatusDraining    ProviderStatus = "draining"
	StatusDisabled    ProviderStatus = "disabled"
)

// ProviderHealth is what the Node last reported about a provider.
type ProviderHealth string

// Provider health values.
const (
	HealthHealthy   ProviderHealth = "healthy"
	HealthUnhealthy ProviderHealth = "unhealthy"
	// HealthOffline: the Node is not connected (or never reported it).
	HealthOffline ProviderHealth = "offline"
	// HealthRefused: the Node refused to host it (outside its allow-list).
	HealthRefused ProviderHealth = "refused"
)

// NodeSnapshot is the Edge's view of one configured Node.
type NodeSnapshot struct {
	ID string
	// Connected means dispatch-ready: registered, config applied, ready
	// acknowledged. A registered connection that is not ready yet is not
	// connected.
	Connected bool
	// Generation is the current connection's generation (0 when none).
	Generation uint64
	// ConfigRevision is the revision the Edge last sent; AppliedRevision
	// is the one the Node last acknowledged.
	ConfigRevision  uint64
	AppliedRevision uint64
	// ConnectedAt is when the current connection became ready.
	ConnectedAt time.Time
	// CertificateExpiry is when the client certificate the current
	// connection presented expires (zero without one): a Node reads a
	// renewed certificate at its next connection, so an expiry coming
	// close means nobody renewed it.
	CertificateExpiry time.Time
	// LastDisconnect is the reason the last ready connection ended.
	LastDisconnect string
	// Draining: the Edge admits nothing new to this node, because an
	// operator drains it (SetDraining) or because the Node is shutting
	// down (it sent GOAWAY and finishes the work it has); its available
	// providers report StatusDraining.
	Draining bool
	// Providers are the configured providers, in configuration order.
	Providers []ProviderSnapshot
}

// ProviderSnapshot is one configured provider's state. A provider on a Node
// that is not connected keeps its identity with StatusUnavailable,
// HealthOffline and zero figures. A provider the Edge disabled
// (SetProviderEnabled) reports StatusDisabled, one on a draining node
// StatusDraining; both keep their capacity and in-flight figures.
type ProviderSnapshot struct {
	ID                  string
	Adapter             string
	Category            execution.Category
	Models              []string
	Status              ProviderStatus
	Health              ProviderHealth
	Capacity            int
	LongContextCapacity int
	InFlight            int
	LongContextInFlight int
	Queued              int
	// CoolingUntil is when a provider that answered "not now" as a whole
	// (503, 529: overloaded, a model loading) gets admission's slots
	// again; zero when it does not cool. CoolingModels are the models
	// cooling on their own (429: rate limited), each with its end. The
	// registry leaves both empty: the Edge's admission fills them, as it
	// does the pressure figures (edge.Server.Nodes).
	CoolingUntil  time.Time
	CoolingModels map[string]time.Time
}

func (p ProviderSnapshot) clone() ProviderSnapshot {
	p.Models = slices.Clone(p.Models)
	p.CoolingModels = maps.Clone(p.CoolingModels)
	return p
}
