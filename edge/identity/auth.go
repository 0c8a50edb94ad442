package identity

import (
	"context"
	"fmt"

	"github.com/iop-dev/iop/edge/nodes"
)

// NodeAuthenticator is managed mode's registration check: the Node must
// present a certificate the TLS handshake verified against the Edge CA,
// whose SPIFFE ID names exactly the node id it registers as. Next, when
// set, must also accept (a token on top of the certificate).
type NodeAuthenticator struct {
	TrustDomain string
	Next        nodes.Authenticator
}

var _ nodes.Authenticator = NodeAuthenticator{}

// Authenticate implements nodes.Authenticator. Every refusal wraps
// nodes.ErrUnauthenticated.
func (a NodeAuthenticator) Authenticate(ctx context.Context, h nodes.Hello) error {
	id, err := PeerID(h.TLS, a.TrustDomain, KindNode)
	if err != nil {
		return fmt.Errorf("%w: %v", nodes.ErrUnauthenticated, err)
	}
	if id != h.NodeID {
		return fmt.Errorf("%w: %v: certificate for %q, registering as %q", nodes.ErrUnauthenticated, ErrIdentityMismatch, id, h.NodeID)
	}
	if a.Next != nil {
		return a.Next.Authenticate(ctx, h)
	}
	return nil
}
