package node

import (
	"context"
	"errors"
	"maps"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/wire/iopv1"
)

// applyLeasePolicy hands the Edge's lease policy from a config payload to
// the opener. A payload without one clears it.
func (rt *Runtime) applyLeasePolicy(cfg *iopv1.NodeConfig) {
	if rt.cfg.Leases == nil {
		return
	}
	p := cfg.GetLeasePolicy()
	rt.cfg.Leases.SetPolicy(credentiallease.Policy{
		RevokedCredentials: p.GetRevokedCredentials(),
		DisabledProfiles:   p.GetDisabledProfiles(),
		DisabledRoutes:     p.GetDisabledRoutes(),
		MinRevisions:       maps.Clone(p.GetMinRevisions()),
	})
}

// errLeaseRefused wraps every lease refusal a dispatch gets.
var errLeaseRefused = errors.New("credential lease refused")

// openGrant opens the credential lease for one call to h, right before the
// provider call: slot, target and the generation are those of the dispatch
// being executed. For a leased provider it returns a context carrying the
// secret and a func that clears it; without a lease, or with one that does
// not verify, it refuses (no local credential is ever used instead). A
// provider that is not leased takes no grant.
func (s *session) openGrant(ctx context.Context, h *hosted, g *execution.Grant, slot, target string) (context.Context, func(), error) {
	if h.credID == "" {
		if g != nil {
			return nil, nil, errors.Join(errLeaseRefused, errors.New("a lease for a provider whose credential is not leased"))
		}
		return ctx, func() {}, nil
	}
	op := s.rt.cfg.Leases
	if op == nil || g == nil || len(g.Lease) == 0 {
		return nil, nil, errors.Join(errLeaseRefused, errors.New("no credential lease came with the dispatch"))
	}
	secret, err := op.Open(g.Lease, credentiallease.Expect{
		Principal: g.Principal, Route: g.Route, Slot: slot, Profile: h.info.ID, Target: target,
		CredentialID: h.credID, Generation: s.gen,
	})
	if err != nil {
		s.rt.log.Warn("credential lease refused", "provider", h.info.ID, "slot", slot, "reason", err)
		return nil, nil, errors.Join(errLeaseRefused, err)
	}
	return execution.WithLeasedSecret(ctx, secret.Bytes()), secret.Clear, nil
}
