package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/backoff"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/workspace"
)

// Config configures a Runtime: the Node-local facts of node.yaml. Each
// field's comment says what its zero value means.
type Config struct {
	// EdgeAddr is the Edge's host:port for Node sessions. Required.
	EdgeAddr string
	// NodeID is this Node's id, as configured on the Edge. Required.
	NodeID string
	// Token is the registration credential. Required. It is sent only in
	// the registration and never logged.
	Token string
	// TLS, when set, dials with TLS 1.3 and ALPN iop/1 (client certificate
	// included for mutual TLS); without a ServerName the host of EdgeAddr
	// is verified. Nil means plaintext, for loopback and development only.
	TLS *tls.Config
	// EdgeIdentity, when set, is the workload identity the Edge's server
	// certificate must carry (spiffe://<TrustDomain>/edge/<EdgeID>, from
	// the Edge CA) on top of the usual CA and host name checks; TLS is
	// required with it. Managed deployments set it so a Node talks only to
	// its own Edge.
	EdgeIdentity *EdgeIdentity
	// Providers is the allow-list: the providers this Node is willing to
	// host, each with the models it may serve. The Edge's config payload is
	// intersected with it; anything outside is refused.
	Providers []Hosted
	// Wire tunes the session. Nil means wire defaults.
	Wire *wire.Config
	// Backoff is the reconnect policy. Zero fields mean gRPC's defaults
	// (1 s, x1.6, jitter 0.2, at most 120 s); Validate refuses a negative
	// duration, a Multiplier below 1 or not finite, a Jitter outside
	// [0, 1) and a Max above a day.
	Backoff Backoff
	// HealthInterval is how often providers that implement
	// execution.HealthChecker are checked. Zero means 15 s. A provider
	// is also checked at once when a call to it fails as unavailable
	// (its upstream could not be reached, or said it is overloaded), so
	// that the Edge stops sending it work before the next round.
	HealthInterval time.Duration
	// UnhealthyInterval is how often a provider found unhealthy is
	// checked again until it recovers. Zero means the lower of
	// HealthInterval and 5 s.
	UnhealthyInterval time.Duration
	// RegisterTimeout bounds the registration exchange. Zero means 15 s.
	RegisterTimeout time.Duration
	// Leases, when set, lets the Node take credential leases: it registers
	// the opener's public key, and a provider the Edge marks as leased gets
	// its credential only from a lease opened right before each call. Nil
	// means the Node refuses to host leased providers.
	Leases *credentiallease.Opener
	// Workspaces is the Node's workspace catalog (node.yaml). The Edge's
	// configured refs are accepted only where the catalog allows their
	// authority. Nil means no workspaces.
	Workspaces *workspace.Catalog
	// Version is reported to the Edge. Empty means "dev".
	Version string
	// Logger receives runtime events (ids, reasons; never tokens, prompts
	// or output). Nil means silent.
	Logger hclog.Logger
}

// EdgeIdentity names the Edge a Node accepts.
type EdgeIdentity struct {
	TrustDomain string
	EdgeID      string
}

// Hosted is one entry of the Node's provider allow-list.
type Hosted struct {
	// Provider is the adapter instance.
	Provider execution.Provider
	// AllowedModels limits the models the Edge may configure for it, and
	// so the models every run and tunnel may name: a tunnel's body must
	// name its target as its one top-level "model" (a body above 64 MiB
	// is refused, as it is read whole for the check). Nil means the
	// provider's own Info().Models; if that is empty too, any model is
	// allowed (a server that discovers its models) and bodies stream
	// unchecked.
	AllowedModels []string
}

// Backoff is a reconnect policy (see gRPC's connection backoff).
type Backoff struct {
	Base       time.Duration
	Multiplier float64
	Jitter     float64
	Max        time.Duration
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
	var errs []error
	if c.EdgeAddr == "" {
		errs = append(errs, errors.New("EdgeAddr is required"))
	}
	if c.NodeID == "" {
		errs = append(errs, errors.New("NodeID is required"))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("Token is required"))
	}
	seen := map[string]bool{}
	for i, h := range c.Providers {
		if h.Provider == nil {
			errs = append(errs, fmt.Errorf("Providers[%d]: nil Provider", i))
			continue
		}
		info := h.Provider.Info()
		if err := info.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Providers[%d]: %w", i, err))
			continue
		}
		if seen[info.ID] {
			errs = append(errs, fmt.Errorf("Providers[%d]: duplicate id %q", i, info.ID))
		}
		seen[info.ID] = true
	}
	if err := c.Wire.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Wire: %w", err))
	}
	if ei := c.EdgeIdentity; ei != nil {
		if c.TLS == nil || ei.TrustDomain == "" || ei.EdgeID == "" {
			errs = append(errs, errors.New("EdgeIdentity needs TLS, a TrustDomain and an EdgeID"))
		} else if err := errors.Join(identity.CheckTrustDomain(ei.TrustDomain), identity.CheckID(ei.EdgeID)); err != nil {
			errs = append(errs, fmt.Errorf("EdgeIdentity: %w", err))
		}
	}
	if c.Leases != nil && c.Leases.NodeID() != c.NodeID {
		errs = append(errs, fmt.Errorf("Leases opens leases for node %q, not %q", c.Leases.NodeID(), c.NodeID))
	}
	if err := backoff.Config(c.Backoff).Validate(); err != nil {
		errs = append(errs, fmt.Errorf("Backoff: %w", err))
	}
	if c.HealthInterval < 0 || c.UnhealthyInterval < 0 || c.RegisterTimeout < 0 {
		errs = append(errs, errors.New("HealthInterval, UnhealthyInterval and RegisterTimeout must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("node: config: %w", err)
	}
	return nil
}

// tlsConfig is the dial configuration: cfg.TLS, plus the Edge identity
// check when EdgeIdentity is set (after the standard verification).
func (rt *Runtime) tlsConfig() *tls.Config {
	id := rt.cfg.EdgeIdentity
	if rt.cfg.TLS == nil || id == nil {
		return rt.cfg.TLS
	}
	c := rt.cfg.TLS.Clone()
	prev := c.VerifyConnection
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if prev != nil {
			if err := prev(cs); err != nil {
				return err
			}
		}
		got, err := identity.PeerID(&cs, id.TrustDomain, identity.KindEdge)
		if err != nil {
			return fmt.Errorf("node: edge identity: %w", err)
		}
		if got != id.EdgeID {
			return fmt.Errorf("node: edge identity: %w: %q, want %q", identity.ErrIdentityMismatch, got, id.EdgeID)
		}
		return nil
	}
	return c
}
