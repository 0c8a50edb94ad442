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
	"github.com/iop-dev/iop/internal/testpki"
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
	srvCert := workloadCert(t, ca, identity.KindEdge, "hub", identity.Options{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	h := startHub(t, "", func(c *controlplane.Config) {
		c.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool()}
		c.TrustDomain = "iop.test"
	})
	backend := startEdge(t, "e1", "", nil)
	cert := func(from *identity.CA, id string, opt identity.Options) []tls.Certificate {
		return []tls.Certificate{workloadCert(t, from, identity.KindEdge, id, opt)}
	}
	attempt := func(certs []tls.Certificate) controlplane.ConnectorStatus {
		return connectOnce(t, backend, controlplane.ConnectorConfig{HubAddr: h.addr, EdgeID: "e1", Token: edgeToken("e1"),
			TLS: &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: certs}})
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
		{"a node's certificate", []tls.Certificate{workloadCert(t, ca, identity.KindNode, "e1", identity.Options{})}, true},
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

// workloadCert issues a key and certificate from ca for a workload.
func workloadCert(t *testing.T, ca *identity.CA, kind identity.Kind, id string, opt identity.Options) tls.Certificate {
	t.Helper()
	c, k, err := ca.Issue(kind, id, opt)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// connectOnce runs a connector for backend with cfg (fast backoff) until
// its first outcome, and stops it.
func connectOnce(t *testing.T, backend *edgeRig, cfg controlplane.ConnectorConfig) controlplane.ConnectorStatus {
	t.Helper()
	cfg.Backoff = fast
	c, err := controlplane.NewConnector(cfg, backend.srv)
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

// TestCertificateNamedEdges: outside managed mode an Edge without a token
// (and, with AllowUnknownEdges, an unlisted one) proves its id with a
// verified client certificate naming it: by common name or DNS name, or,
// for a workload's certificate, by its SPIFFE ID, which must be an
// Edge's. A Node's certificate naming the same id never passes for the
// Edge, nor does one from a CA the Hub does not trust.
func TestCertificateNamedEdges(t *testing.T) {
	pki := testpki.NewCA(t, "edges")
	workloads, err := identity.NewCA("iop.test", 0)
	if err != nil {
		t.Fatal(err)
	}
	stranger := testpki.NewCA(t, "stranger")
	roots := pki.Pool.Clone()
	roots.AddCert(workloads.Cert)
	h := startHub(t, "", func(c *controlplane.Config) {
		c.Edges = append(c.Edges, controlplane.EdgeRecord{ID: "e4"}) // no token: a certificate must name it
		c.TLS = &tls.Config{Certificates: []tls.Certificate{pki.Issue(t, testpki.Leaf{})}, ClientCAs: roots}
		c.AllowUnknownEdges = true
	})
	issued := func(kind identity.Kind, id string) tls.Certificate {
		return workloadCert(t, workloads, kind, id, identity.Options{})
	}
	for _, c := range []struct {
		name, edge string
		cert       tls.Certificate
		connected  bool
	}{
		{"common name", "e4", pki.Issue(t, testpki.Leaf{CommonName: "e4"}), true},
		{"DNS name", "e4", pki.Issue(t, testpki.Leaf{DNSNames: []string{"e4"}}), true},
		{"an Edge's workload certificate", "e4", issued(identity.KindEdge, "e4"), true},
		{"an unlisted Edge's", "e9", issued(identity.KindEdge, "e9"), true},
		{"another name", "e4", pki.Issue(t, testpki.Leaf{CommonName: "e5"}), false},
		{"a Node's workload certificate of the same name", "e4", issued(identity.KindNode, "e4"), false},
		{"an unlisted Node's", "e9", issued(identity.KindNode, "e9"), false},
		{"a common name beside a SPIFFE ID of another", "e4", pki.Issue(t, testpki.Leaf{CommonName: "e4", URIs: []string{"spiffe://iop.test/node/e4"}}), false},
		{"an untrusted CA", "e4", stranger.Issue(t, testpki.Leaf{CommonName: "e4"}), false},
	} {
		backend := startEdge(t, c.edge, "", nil)
		st := connectOnce(t, backend, controlplane.ConnectorConfig{HubAddr: h.addr, EdgeID: c.edge,
			TLS: &tls.Config{RootCAs: pki.Pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{c.cert}}})
		if st.Connected != c.connected {
			t.Errorf("%s as %s: connected %v (%v), want %v", c.name, c.edge, st.Connected, st.LastError, c.connected)
		}
		waitFor(t, c.name+": the edge gone again", func() bool { e, _ := h.hub.Edge(c.edge); return !e.Connected })
	}
}
