package edge_test

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/internal/testpki"
	"github.com/iop-dev/iop/wire"
)

// served returns the leaf certificate a TLS listener at addr presents to
// a client trusting only ca, or the handshake's error.
func served(addr string, ca *testpki.CA, protos ...string) (*tls.Certificate, error) {
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1", NextProtos: protos})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	st := c.ConnectionState()
	return &tls.Certificate{Certificate: [][]byte{st.PeerCertificates[0].Raw}}, nil
}

// TestReloadRotatesTLS: a reload with renewed certificates (here, from
// another CA) takes effect for the API's and the Node listener's next
// handshakes without a restart; a reload that would turn TLS on or off is
// refused and changes nothing.
func TestReloadRotatesTLS(t *testing.T) {
	oldCA, newCA := testpki.NewCA(t, "old"), testpki.NewCA(t, "new")
	// Each certificate its own expiry, so the metrics tell them apart.
	expiry := time.Now().Add(10 * time.Hour).Truncate(time.Second)
	certs := func(ca *testpki.CA) (api, nodes *tls.Config) {
		expiry = expiry.Add(time.Hour)
		a := ca.Issue(t, testpki.Leaf{NotAfter: expiry})
		expiry = expiry.Add(time.Hour)
		return &tls.Config{Certificates: []tls.Certificate{a}},
			&tls.Config{Certificates: []tls.Certificate{ca.Issue(t, testpki.Leaf{NotAfter: expiry})}}
	}
	reg := prometheus.NewRegistry()
	cfg := edge.Config{Epoch: 1, Metrics: reg, APIKeys: []edge.APIKey{{Name: "a", Hash: edge.HashKey(apiKey), Models: []string{"*"}}}}
	cfg.APITLS, cfg.NodeTLS = certs(oldCA)
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	wg.Go(func() { srv.ServeTLS(apiLn, nil) }) // Config.APITLS, following reloads
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	api, nodeAddr := apiLn.Addr().String(), nodeLn.Addr().String()

	next := cfg
	next.APITLS, next.NodeTLS = certs(newCA)
	check := func(when string, trusted, untrusted *testpki.CA) {
		t.Helper()
		// The metrics name the certificates served now.
		want := map[string]*tls.Config{"api": cfg.APITLS, "nodes": cfg.NodeTLS}
		if trusted == newCA {
			want = map[string]*tls.Config{"api": next.APITLS, "nodes": next.NodeTLS}
		}
		for listener, tc := range want {
			if got, end := listenerExpiry(t, reg, listener), tc.Certificates[0].Leaf.NotAfter.Unix(); got != end {
				t.Errorf("%s: %s certificate expiry metric %d, want %d", when, listener, got, end)
			}
		}
		if _, err := served(api, trusted, "http/1.1"); err != nil {
			t.Errorf("%s: API handshake: %v", when, err)
		}
		if _, err := served(api, untrusted, "http/1.1"); err == nil {
			t.Errorf("%s: the API served a certificate of the other CA", when)
		}
		if _, err := served(nodeAddr, trusted, wire.ALPN); err != nil {
			t.Errorf("%s: Node listener handshake: %v", when, err)
		}
		if _, err := served(nodeAddr, untrusted, wire.ALPN); err == nil {
			t.Errorf("%s: the Node listener served a certificate of the other CA", when)
		}
	}
	check("at start", oldCA, newCA)
	if err := srv.Reload(next); err != nil {
		t.Fatal(err)
	}
	check("after the reload", newCA, oldCA)

	// Turning either off (or on) needs a restart: refused, nothing
	// changes.
	for name, mutate := range map[string]func(*edge.Config){
		"APITLS off":  func(c *edge.Config) { c.APITLS = nil },
		"NodeTLS off": func(c *edge.Config) { c.NodeTLS = nil },
	} {
		bad := cfg
		bad.APITLS, bad.NodeTLS = certs(oldCA)
		mutate(&bad)
		if err := srv.Reload(bad); err == nil {
			t.Errorf("reload with %s accepted", name)
		}
		check("after a refused reload ("+name+")", newCA, oldCA)
	}
	noCert := next
	noCert.APITLS = &tls.Config{}
	if err := srv.Reload(noCert); err == nil {
		t.Error("reload with an APITLS that has no certificate accepted")
	}
	check("after a reload without a certificate", newCA, oldCA)
}

// TestServeTLSWithoutConfig: ServeTLS given no configuration needs
// Config.APITLS.
func TestServeTLSWithoutConfig(t *testing.T) {
	srv, err := edge.New(edge.Config{Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := srv.ServeTLS(ln, nil); !errors.Is(err, edge.ErrNoAPITLS) {
		t.Fatalf("ServeTLS(ln, nil) without APITLS: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener was left open")
	}
	if _, err := edge.New(edge.Config{Epoch: 1, NodeTLS: &tls.Config{}}); err == nil {
		t.Fatal("a NodeTLS without a certificate was accepted")
	}
}

// listenerExpiry reads iop_edge_tls_certificate_expiry_timestamp_seconds
// for a listener (-1 when absent).
func listenerExpiry(t *testing.T, reg *prometheus.Registry, listener string) int64 {
	t.Helper()
	return int64(gauge(t, reg, "iop_edge_tls_certificate_expiry_timestamp_seconds", "listener", listener))
}

// gauge reads the gauge name whose label has value (-1 when absent).
func gauge(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}
