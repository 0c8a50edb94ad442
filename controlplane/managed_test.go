package controlplane_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/wire/iopv1"
)

// TestManagedEdgeIdentity: with a trust domain, an Edge connects only with
// a CA-verified certificate whose SPIFFE ID names its edge id, on top of
// its token; no certificate, another CA's, an expired one or one for
// another Edge is refused.
func TestManagedEdgeIdentity(t *testing.T) {
	ca, err := identity.NewCA("iop.test", 0)
	if err != nil {
		t.Fatal(err)
	}
	other, _ := identity.NewCA("iop.test", 0)
	srvPEM, srvKey, _ := ca.Issue(identity.KindEdge, "hub", identity.Options{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	srvCert, _ := tls.X509KeyPair(srvPEM, srvKey)
	h := startHub(t, "", func(c *controlplane.Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool()}
		c.TrustDomain = "iop.test"
	})
	backend := startEdge(t, "e1", "", nil)
	cert := func(from *identity.CA, id string, opt identity.Options) []tls.Certificate {
		c, k, err := from.Issue(identity.KindEdge, id, opt)
		if err != nil {
			t.Fatal(err)
		}
		pair, _ := tls.X509KeyPair(c, k)
		return []tls.Certificate{pair}
	}
	// attempt runs a connector until its first outcome.
	attempt := func(certs []tls.Certificate) controlplane.ConnectorStatus {
		c, err := controlplane.NewConnector(controlplane.ConnectorConfig{HubAddr: h.addr, EdgeID: "e1", Token: edgeToken("e1"), Backoff: fast,
			TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: certs}}, backend.srv)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.Run(ctx) }()
		defer func() { cancel(); <-done }()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st := c.Status()
			if st.Connected || st.LastError != nil || time.Now().After(deadline) {
				return st
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	for _, c := range []struct {
		name     string
		certs    []tls.Certificate
		rejected bool // the hello was answered (TLS passed) and refused
	}{
		{"token, no certificate", nil, false},
		{"another CA", cert(other, "e1", identity.Options{}), false},
		{"expired", cert(ca, "e1", identity.Options{NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour}), false},
		{"certificate for another edge", cert(ca, "e2", identity.Options{}), true},
		{"a node's certificate", func() []tls.Certificate {
			c, k, _ := ca.Issue(identity.KindNode, "e1", identity.Options{})
			pair, _ := tls.X509KeyPair(c, k)
			return []tls.Certificate{pair}
		}(), true},
	} {
		st := attempt(c.certs)
		var he *controlplane.HelloError
		isHello := errors.As(st.LastError, &he)
		if st.Connected || st.LastError == nil || isHello != c.rejected || (isHello && he.Rejection != iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED) {
			t.Errorf("%s: connected %v, error %v", c.name, st.Connected, st.LastError)
		}
		if e, _ := h.hub.Edge("e1"); e.Connected {
			t.Fatalf("%s: the edge is connected", c.name)
		}
	}
	if st := attempt(cert(ca, "e1", identity.Options{})); !st.Connected {
		t.Fatalf("the right certificate: %v", st.LastError)
	}
}

// TestTrustDomainChecked: a Hub whose trust domain no certificate can
// carry is refused at New, not by refusing every Edge after.
func TestTrustDomainChecked(t *testing.T) {
	ca, _ := identity.NewCA("iop.test", 0)
	for _, td := range []string{"IOP.test", "iop.test/edge", "iop.test:1"} {
		cfg := controlplane.Config{
			Edges:       []controlplane.EdgeRecord{{ID: "e1", TokenHash: controlplane.HashToken(edgeToken("e1"))}},
			TLS:         &tls.Config{ClientCAs: ca.Pool()},
			TrustDomain: td,
		}
		if _, err := controlplane.New(cfg); !errors.Is(err, identity.ErrName) {
			t.Errorf("New with trust domain %q: %v, want identity.ErrName", td, err)
		}
	}
}
