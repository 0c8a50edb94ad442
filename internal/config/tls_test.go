package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iop-dev/iop/internal/testpki"
)

// writePEM writes cert's certificate and key as PEM files name.crt and
// name.key in dir.
func writePEM(t *testing.T, dir, name string, cert tls.Certificate) {
	t.Helper()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}))
	writeFile(t, filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}))
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// handshake runs a real TLS handshake on loopback between server and
// client and returns the client's error, or the server's when the client
// saw none.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serr <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		err = tc.Handshake()
		if err == nil {
			// TLS 1.3 finishes the client's side first: a refused client
			// certificate reaches the client as an alert on its first
			// read, so the server answers one byte.
			_, err = tc.Write([]byte{1})
		}
		serr <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	if e := <-serr; err == nil {
		err = e
	}
	return err
}

// TestTLSFiles: the TLS sections of edge.yaml (api.tls, node_tls),
// node.yaml (tls) and hub.yaml (http.tls) load PEM files named relative
// to the file's directory into configurations that complete a real
// handshake, mutual where a client CA is named; a bad file is refused
// with an error that names the field.
func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "config test CA")
	writeFile(t, filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}))
	writePEM(t, dir, "edge", ca.Issue(t, testpki.Leaf{DNSNames: []string{"edge.iop.test"}}))
	writePEM(t, dir, "node", ca.Issue(t, testpki.Leaf{}))
	other := testpki.NewCA(t, "another CA")
	writePEM(t, dir, "stranger", other.Issue(t, testpki.Leaf{}))
	t.Setenv("IOP_NODE_TOKEN_FOR_TEST", "node-token-0123456789abcdef")

	edgeDoc := minimalEdge + `
node_tls: {cert_file: edge.crt, key_file: edge.key, client_ca_file: ca.crt}
`
	edgeDoc = strings.Replace(edgeDoc, `api: {listen: "127.0.0.1:0"}`, `api: {listen: "127.0.0.1:0", tls: {cert_file: edge.crt, key_file: edge.key}}`, 1)
	ef, err := ParseEdge([]byte(edgeDoc), dir)
	if err != nil {
		t.Fatal(err)
	}
	apiTLS, err := ef.APITLS()
	if err != nil || apiTLS == nil || apiTLS.ClientAuth != tls.NoClientCert {
		t.Fatalf("APITLS() = %+v, %v", apiTLS, err)
	}
	ecfg, err := ef.Config(1)
	if err != nil {
		t.Fatal(err)
	}
	if ecfg.NodeTLS == nil || ecfg.NodeTLS.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatalf("NodeTLS %+v", ecfg.NodeTLS)
	}
	if ecfg.APITLS == nil || len(ecfg.APITLS.Certificates) != 1 || ecfg.APITLS.ClientAuth != tls.NoClientCert {
		t.Fatalf("APITLS %+v", ecfg.APITLS)
	}

	nodeDoc := func(tlsSection string) string {
		return "edge: edge.iop.test:9440\nnode_id: n1\ntoken: {env: IOP_NODE_TOKEN_FOR_TEST}\ntls: " + tlsSection + "\n"
	}
	nodeTLS := func(t *testing.T, section string) (*tls.Config, error) {
		t.Helper()
		nf, err := ParseNode([]byte(nodeDoc(section)), dir)
		if err != nil {
			return nil, err
		}
		cfg, err := nf.Config()
		return cfg.TLS, err
	}
	mutual, err := nodeTLS(t, "{ca_file: ca.crt, cert_file: node.crt, key_file: node.key, server_name: edge.iop.test}")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, ecfg.NodeTLS, mutual); err != nil {
		t.Fatalf("mutual TLS between node_tls and the Node's tls: %v", err)
	}
	anonymous, err := nodeTLS(t, "{ca_file: ca.crt, server_name: edge.iop.test}")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, apiTLS, anonymous); err != nil {
		t.Fatalf("api.tls without a client certificate: %v", err)
	}
	if err := handshake(t, ecfg.NodeTLS, anonymous); err == nil {
		t.Fatal("node_tls accepted a Node without a client certificate")
	}
	stranger, err := nodeTLS(t, "{ca_file: ca.crt, cert_file: stranger.crt, key_file: stranger.key, server_name: edge.iop.test}")
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, ecfg.NodeTLS, stranger); err == nil {
		t.Fatal("node_tls accepted a client certificate of another CA")
	}
	wrongName, err := nodeTLS(t, "{ca_file: ca.crt, server_name: other.iop.test}")
	if err != nil {
		t.Fatal(err)
	}
	var hostErr x509.HostnameError
	if err := handshake(t, apiTLS, wrongName); !errors.As(err, &hostErr) {
		t.Fatalf("a server name the certificate does not hold: %v", err)
	}

	hubDoc := `
edges_listen: 127.0.0.1:0
http: {listen: 127.0.0.1:0, tls: {cert_file: edge.crt, key_file: edge.key, client_ca_file: ca.crt}}
operator_mtls: true
edges:
  - {id: e1, token: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}}
operators:
  - {name: alice, token: {env: IOP_NODE_TOKEN_FOR_TEST}}
`
	hf, err := ParseHub([]byte(hubDoc), dir)
	if err != nil {
		t.Fatal(err)
	}
	httpTLS, err := hf.HTTPTLS()
	if err != nil || httpTLS.ClientAuth != tls.VerifyClientCertIfGiven {
		t.Fatalf("HTTPTLS() = %+v, %v", httpTLS, err)
	}
	if err := handshake(t, httpTLS, anonymous); err != nil {
		t.Fatalf("operator HTTPS without a certificate (token sign-in): %v", err)
	}
	// A client offers only a certificate of a CA the server names; this
	// one insists on its own.
	insistent := stranger.Clone()
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "stranger.crt"), filepath.Join(dir, "stranger.key"))
	if err != nil {
		t.Fatal(err)
	}
	insistent.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	if err := handshake(t, httpTLS, insistent); err == nil {
		t.Fatal("operator HTTPS accepted a certificate of another CA")
	}

	writeFile(t, filepath.Join(dir, "empty.crt"), []byte("no PEM here\n"))
	writeFile(t, filepath.Join(dir, "huge.crt"), make([]byte, 2<<20))
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Run("edge refusals", func(t *testing.T) {
		for name, c := range map[string]struct{ section, want string }{
			"api without key":      {`api: {listen: "127.0.0.1:0", tls: {cert_file: edge.crt}}`, "api.tls: cert_file and key_file are required"},
			"api key of another":   {`api: {listen: "127.0.0.1:0", tls: {cert_file: edge.crt, key_file: node.key}}`, "api.tls: tls: private key does not match public key"},
			"api missing cert":     {`api: {listen: "127.0.0.1:0", tls: {cert_file: missing.crt, key_file: edge.key}}`, "api.tls: open " + filepath.Join(dir, "missing.crt")},
			"api cert a directory": {`api: {listen: "127.0.0.1:0", tls: {cert_file: adir, key_file: edge.key}}`, "api.tls: " + filepath.Join(dir, "adir") + " is not a regular file"},
			"api cert too large":   {`api: {listen: "127.0.0.1:0", tls: {cert_file: huge.crt, key_file: edge.key}}`, "api.tls: " + filepath.Join(dir, "huge.crt") + " is larger than"},
			"client ca without pem": {`api: {listen: "127.0.0.1:0", tls: {cert_file: edge.crt, key_file: edge.key, client_ca_file: empty.crt}}`,
				"api.tls: client_ca_file: " + filepath.Join(dir, "empty.crt") + " holds no PEM certificate"},
		} {
			doc := strings.Replace(minimalEdge, `api: {listen: "127.0.0.1:0"}`, c.section, 1)
			ef, err := ParseEdge([]byte(doc), dir)
			if err == nil {
				_, err = ef.APITLS()
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error starting %q", name, err, c.want)
			}
			if ef != nil {
				_, err = ef.Config(1) // what a start or a reload reads
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error starting %q", name, err, c.want)
			}
		}
	})
	t.Run("node refusals", func(t *testing.T) {
		for name, c := range map[string]struct{ section, want string }{
			"cert without key":  {"{ca_file: ca.crt, cert_file: node.crt}", "tls: cert_file and key_file go together"},
			"key without cert":  {"{ca_file: ca.crt, key_file: node.key}", "tls: cert_file and key_file go together"},
			"ca without pem":    {"{ca_file: empty.crt}", "tls: ca_file: "},
			"ca a directory":    {"{ca_file: adir}", "tls: ca_file: "},
			"ca missing":        {"{ca_file: missing.crt}", "tls: ca_file: "},
			"key of another":    {"{ca_file: ca.crt, cert_file: node.crt, key_file: edge.key}", "tls: tls: private key does not match public key"},
			"unknown tls field": {"{ca_file: ca.crt, verify: false}", `line 4: unknown key "verify"`},
		} {
			_, err := nodeTLS(t, c.section)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error containing %q", name, err, c.want)
			}
		}
	})
}

// TestClientCertificateRenewed: a client certificate (node.yaml's tls,
// edge.yaml's control_plane.tls) is read at each handshake, so a renewed
// one is presented from the next connection with no restart; files that
// no longer make a pair fail the handshake with the reason, never fall
// back to another certificate.
func TestClientCertificateRenewed(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "iop test CA")
	writeFile(t, filepath.Join(dir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}))
	writePEM(t, dir, "edge", ca.Issue(t, testpki.Leaf{DNSNames: []string{"edge.iop.test"}}))
	first := ca.Issue(t, testpki.Leaf{})
	writePEM(t, dir, "node", first)
	t.Setenv("IOP_NODE_TOKEN_FOR_TEST", "node-token-0123456789abcdef")
	nf, err := ParseNode([]byte("edge: edge.iop.test:9440\nnode_id: n1\ntoken: {env: IOP_NODE_TOKEN_FOR_TEST}\n"+
		"tls: {ca_file: ca.crt, cert_file: node.crt, key_file: node.key, server_name: edge.iop.test}\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nf.Config()
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "edge.crt"), filepath.Join(dir, "edge.key"))
	if err != nil {
		t.Fatal(err)
	}
	var presented []byte
	server := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error { presented = cs.PeerCertificates[0].Raw; return nil }}

	if err := handshake(t, server, cfg.TLS); err != nil || !bytes.Equal(presented, first.Certificate[0]) {
		t.Fatalf("first handshake: %v (presented the configured certificate: %v)", err, bytes.Equal(presented, first.Certificate[0]))
	}
	renewed := ca.Issue(t, testpki.Leaf{})
	writePEM(t, dir, "node", renewed)
	if err := handshake(t, server, cfg.TLS); err != nil || !bytes.Equal(presented, renewed.Certificate[0]) {
		t.Fatalf("after renewal: %v (presented the renewed certificate: %v)", err, bytes.Equal(presented, renewed.Certificate[0]))
	}
	// A key that is not the certificate's: refused with the reason.
	other := ca.Issue(t, testpki.Leaf{})
	key, _ := x509.MarshalPKCS8PrivateKey(other.PrivateKey)
	writeFile(t, filepath.Join(dir, "node.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}))
	presented = nil
	if err := handshake(t, server, cfg.TLS); err == nil || presented != nil {
		t.Fatalf("a mismatched pair: %v, presented %v", err, presented != nil)
	}
	if _, err := cfg.TLS.GetClientCertificate(&tls.CertificateRequestInfo{}); err == nil || !strings.Contains(err.Error(), "client certificate: tls: private key does not match public key") {
		t.Fatalf("GetClientCertificate on a mismatched pair: %v", err)
	}
}

// TestCertificates: each file lists the certificates it presents with
// their ends, and ReportCertificates prints them, marks one near its end
// and fails on one that has ended.
func TestCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := testpki.NewCA(t, "config test CA")
	now := time.Now()
	writePEM(t, dir, "api", ca.Issue(t, testpki.Leaf{NotAfter: now.Add(90 * 24 * time.Hour)}))
	writePEM(t, dir, "nodes", ca.Issue(t, testpki.Leaf{NotAfter: now.Add(3 * 24 * time.Hour)}))
	writePEM(t, dir, "old", ca.Issue(t, testpki.Leaf{NotAfter: now.Add(-time.Hour)}))
	ef := &EdgeFile{dir: dir, NodeTLS: &TLSFiles{CertFile: "nodes.crt", KeyFile: "nodes.key", ClientCA: "ca.crt"}}
	ef.API.TLS = &TLSFiles{CertFile: "api.crt", KeyFile: "api.key"}
	certs, err := ef.Certificates()
	if err != nil || len(certs) != 2 || certs[0].Setting != "api.tls" || certs[1].Setting != "node_tls" {
		t.Fatalf("edge certificates %+v %v", certs, err)
	}
	var out strings.Builder
	if err := ReportCertificates(&out, ef, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "api.tls until ") || !strings.Contains(out.String(), "(89 days)") || !strings.Contains(out.String(), "node_tls until ") || !strings.Contains(out.String(), "ENDS IN 2 DAYS") {
		t.Errorf("report:\n%s", out.String())
	}
	nf := &NodeFile{dir: dir, TLS: &TLSFiles{CertFile: "old.crt", KeyFile: "old.key"}}
	certs, err = nf.Certificates()
	if err != nil || len(certs) != 1 {
		t.Fatalf("node certificates %+v %v", certs, err)
	}
	out.Reset()
	if err := ReportCertificates(&out, nf, now); err == nil || !strings.Contains(err.Error(), "tls: the certificate ended on ") || !strings.Contains(out.String(), "ENDED on") {
		t.Errorf("an ended certificate: %v\n%s", err, out.String())
	}
	hf := &HubFile{dir: dir, EdgeTLS: &TLSFiles{CertFile: "api.crt", KeyFile: "nodes.key"}}
	if _, err := hf.Certificates(); err == nil || !strings.Contains(err.Error(), "edge_tls: ") {
		t.Errorf("a certificate with another's key: %v", err)
	}
	if certs, err := (&NodeFile{dir: dir}).Certificates(); err != nil || len(certs) != 0 {
		t.Errorf("no tls: %+v %v", certs, err)
	}
}
