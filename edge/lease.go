package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/wire/iopv1"
)

// ErrCredentialUnavailable is a dispatch to a leased provider that could
// not get a lease: the credential is revoked or unreadable, or the Node
// registered no lease key. The request is refused; nothing else is tried
// with another credential.
var ErrCredentialUnavailable = errors.New("edge: credential unavailable for this provider")

// grant issues the credential lease for one dispatch to a leased provider
// on a Node's connection of generation gen: bound to the principal, route,
// slot, profile (provider), target, node and its key, the credential's id
// and revision, and the generation. A provider that is not leased gets
// nil. Whether the provider is leased, and with which credential, is the
// current configuration's, not the one the request was admitted under
// (which the Node no longer holds once it applied the change): a
// revocation or a rotation reaches the requests that were waiting for a
// slot when it came, and none of them is issued a revoked credential or
// an old revision.
func (s *Server) grant(ctx context.Context, principal, route, slot string, t Target, nodeID string, gen uint64) (*execution.Grant, error) {
	cur := s.snap.Load()
	now, ok := cur.providers[t.ProviderID]
	if !ok || now.nodeID != nodeID {
		return nil, fmt.Errorf("%w: provider %q left node %q", ErrCredentialUnavailable, t.ProviderID, nodeID)
	}
	if now.credential == "" {
		return nil, nil
	}
	cred := cur.creds[now.credential]
	issuer := s.issuer.Load()
	if !cur.leasable(now.credential) || issuer == nil {
		return nil, fmt.Errorf("%w: credential %q is revoked or unknown", ErrCredentialUnavailable, now.credential)
	}
	key, ok := s.reg.LeaseKey(nodeID, gen)
	if !ok {
		return nil, fmt.Errorf("%w: node %q registered no lease key on this connection", ErrCredentialUnavailable, nodeID)
	}
	secret, err := cred.Secret.Secret(ctx)
	if err != nil {
		// The error names the source (file or variable), never a value.
		return nil, fmt.Errorf("%w: %v", ErrCredentialUnavailable, err)
	}
	b := []byte(secret)
	defer clear(b)
	env, err := issuer.Issue(credentiallease.Binding{
		Principal: principal, Route: route, Slot: slot, Profile: t.ProviderID, Target: t.Model,
		NodeID: nodeID, NodeKeyID: credentiallease.KeyID(key), CredentialID: cred.ID,
		CredentialRevision: cred.Revision, Generation: gen,
	}, key, b)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCredentialUnavailable, err)
	}
	s.metrics.leasesIssued.WithLabelValues(t.ProviderID).Inc()
	return &execution.Grant{Lease: env, Principal: principal, Route: route}, nil
}

// leasable reports whether the credential id names one the Edge leases:
// configured and not revoked.
func (snap *snapshot) leasable(id string) bool {
	c, ok := snap.creds[id]
	return ok && !c.Revoked
}

// leasePolicy is what Nodes are told about credentials: revoked ones, and
// the current revision of each (older leases are refused).
func leasePolicy(cfg *Config) *iopv1.LeasePolicy {
	p := &iopv1.LeasePolicy{MinRevisions: map[string]uint64{}}
	for _, c := range cfg.Credentials {
		if c.Revoked {
			p.RevokedCredentials = append(p.RevokedCredentials, c.ID)
		}
		p.MinRevisions[c.ID] = c.Revision
	}
	slices.Sort(p.RevokedCredentials)
	return p
}
