package identity

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func parsePEM(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIssueAndVerify(t *testing.T) {
	ca, err := NewCA("iop.test", 0)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(KindNode, "gpu-box", Options{})
	if err != nil {
		t.Fatal(err)
	}
	cert := parsePEM(t, certPEM)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatal(err)
	}
	if id, err := CertID(cert, "iop.test", KindNode); err != nil || id != "gpu-box" {
		t.Fatalf("id %q %v", id, err)
	}
	for name, c := range map[string]struct {
		td   string
		kind Kind
	}{"other trust domain": {"other.test", KindNode}, "other kind": {"iop.test", KindEdge}} {
		if _, err := CertID(cert, c.td, c.kind); !errors.Is(err, ErrNoIdentity) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := PeerID(nil, "iop.test", KindNode); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("no TLS: %v", err)
	}
	for _, id := range []string{"", "a/b", "../x", "bad id"} {
		if _, _, err := ca.Issue(KindNode, id, Options{}); err == nil {
			t.Errorf("id %q issued", id)
		}
	}
	if _, _, err := ca.Issue("admin", "x", Options{}); err == nil {
		t.Error("an unknown kind issued")
	}
}

// TestCertIDStrict: exactly one SPIFFE ID of the right shape names a
// workload; anything else names no one.
func TestCertIDStrict(t *testing.T) {
	u := func(s string) *url.URL { v, _ := url.Parse(s); return v }
	for name, uris := range map[string][]*url.URL{
		"none":           nil,
		"two":            {u("spiffe://iop.test/node/a"), u("spiffe://iop.test/node/b")},
		"extra segment":  {u("spiffe://iop.test/node/a/b")},
		"port":           {u("spiffe://iop.test:8443/node/a")},
		"query":          {u("spiffe://iop.test/node/a?x=1")},
		"user":           {u("spiffe://x@iop.test/node/a")},
		"no id":          {u("spiffe://iop.test/node/")},
		"uppercase host": {u("spiffe://IOP.test/node/a")},
		"escaped id":     {u("spiffe://iop.test/node/%61")},
		"escaped slash":  {u("spiffe://iop.test/node%2Fa")},
		"empty query":    {u("spiffe://iop.test/node/a?")},
		"dot segment":    {u("spiffe://iop.test/node/..")},
		"dot":            {u("spiffe://iop.test/node/.")},
	} {
		if _, err := CertID(&x509.Certificate{URIs: uris}, "iop.test", KindNode); !errors.Is(err, ErrNoIdentity) {
			t.Errorf("%s: %v", name, err)
		}
		if _, _, _, err := Workload(&x509.Certificate{URIs: uris}); !errors.Is(err, ErrNoIdentity) {
			t.Errorf("Workload, %s: %v", name, err)
		}
	}
	// Workload reads any trust domain and either kind, and nothing else.
	for s, want := range map[string]string{
		"spiffe://other.example/edge/E-1": "other.example edge E-1",
		"spiffe://iop.test/node/gpu.1":    "iop.test node gpu.1",
		"spiffe://iop.test/operator/bob":  "",
		"https://iop.test/node/a":         "",
	} {
		td, kind, id, err := Workload(&x509.Certificate{URIs: []*url.URL{u(s)}})
		got := ""
		if err == nil {
			got = fmt.Sprint(td, " ", kind, " ", id)
		}
		if got != want || (want == "") != errors.Is(err, ErrNoIdentity) {
			t.Errorf("Workload(%s) = %q, %v; want %q", s, got, err, want)
		}
	}
}

// TestCheckNames: the names this package issues and accepts, and the
// dot segments it refuses (a SPIFFE ID's path has none).
func TestCheckNames(t *testing.T) {
	for _, id := range []string{"gpu-1", "Edge_2", "n.3", "...", ".x"} {
		if err := CheckID(id); err != nil {
			t.Errorf("CheckID(%q): %v", id, err)
		}
	}
	for _, id := range []string{"", ".", "..", "a/b", "a b", strings.Repeat("a", 129)} {
		if err := CheckID(id); !errors.Is(err, ErrName) {
			t.Errorf("CheckID(%q): %v, want ErrName", id, err)
		}
	}
	for _, td := range []string{".", "..", "Iop.test", ""} {
		if err := CheckTrustDomain(td); !errors.Is(err, ErrName) {
			t.Errorf("CheckTrustDomain(%q): %v, want ErrName", td, err)
		}
	}
	ca, err := NewCA("iop.test", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ca.Issue(KindNode, "..", Options{}); err == nil {
		t.Error("a certificate issued for the id \"..\"")
	}
}

// TestSignCSR: only the request's key is taken; the names in it are not.
func TestSignCSR(t *testing.T) {
	ca, _ := NewCA("iop.test", 0)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "admin"},
		DNSNames: []string{"edge.example"},
		URIs:     []*url.URL{{Scheme: "spiffe", Host: "iop.test", Path: "/edge/admin"}},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignCSR(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}), KindNode, "gpu-box", Options{Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert := parsePEM(t, certPEM)
	if len(cert.DNSNames) != 0 || len(cert.URIs) != 1 || cert.URIs[0].String() != "spiffe://iop.test/node/gpu-box" || cert.Subject.CommonName != "gpu-box" {
		t.Fatalf("names from the request were taken: %v %v %q", cert.DNSNames, cert.URIs, cert.Subject.CommonName)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		t.Fatal("not the request's key")
	}
	bad := append([]byte(nil), csr...)
	bad[len(bad)-5] ^= 0xff // the signature
	if _, err := ca.SignCSR(bad, KindNode, "gpu-box", Options{}); !errors.Is(err, ErrCSR) {
		t.Fatalf("a request with a broken signature: %v", err)
	}
	if _, err := ca.SignCSR([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), KindNode, "x", Options{}); !errors.Is(err, ErrCSR) {
		t.Fatalf("a certificate instead of a request: %v", err)
	}
}

// TestSignCSRRefusesWeakKeys: a request for a key too weak to name a
// workload (RSA under 2048 bits, a curve below P-256) is refused, though
// its signature checks.
func TestSignCSRRefusesWeakKeys(t *testing.T) {
	ca, _ := NewCA("iop.test", 0)
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	rsa2048, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, ed, _ := ed25519.GenerateKey(rand.Reader)
	for name, c := range map[string]struct {
		key crypto.Signer
		ok  bool
	}{"RSA 1024": {rsa1024, false}, "ECDSA P-224": {p224, false}, "RSA 2048": {rsa2048, true}, "Ed25519": {ed, true}} {
		csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, c.key)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, err = ca.SignCSR(csr, KindNode, "gpu-box", Options{})
		if c.ok && err != nil || !c.ok && !errors.Is(err, ErrCSR) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSaveLoadCA(t *testing.T) {
	ca, _ := NewCA("iop.test", 0)
	dir := t.TempDir()
	cp, kp := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := ca.Save(cp, kp); err != nil {
		t.Fatal(err)
	}
	back, err := LoadCA(cp, kp)
	if err != nil {
		t.Fatal(err)
	}
	if back.TrustDomain != "iop.test" || !back.Cert.Equal(ca.Cert) {
		t.Fatal("round trip changed the CA")
	}
	certPEM, _, err := back.Issue(KindEdge, "edge-1", Options{DNSNames: []string{"edge.example"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parsePEM(t, certPEM).Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "edge.example"}); err != nil {
		t.Fatalf("a server certificate from the loaded CA: %v", err)
	}
	os.Chmod(kp, 0o644)
	if _, err := LoadCA(cp, kp); err == nil {
		t.Fatal("a readable CA key was accepted")
	}
	other, _ := NewCA("iop.test", 0)
	other.Save(filepath.Join(dir, "o.crt"), filepath.Join(dir, "o.key"))
	os.Chmod(kp, 0o600)
	if _, err := LoadCA(filepath.Join(dir, "o.crt"), kp); err == nil {
		t.Fatal("a key that does not match the certificate was accepted")
	}
}

// TestSaveNeverReplacesAKey: a second CA saved over the first's files is
// refused and leaves both files as they were (a CA key lost is every
// certificate it issued orphaned).
func TestSaveNeverReplacesAKey(t *testing.T) {
	dir := t.TempDir()
	cp, kp := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	first, _ := NewCA("iop.test", 0)
	if err := first.Save(cp, kp); err != nil {
		t.Fatal(err)
	}
	cert0, _ := os.ReadFile(cp)
	key0, _ := os.ReadFile(kp)
	second, _ := NewCA("iop.test", 0)
	if err := second.Save(cp, kp); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Save over an existing key: %v, want fs.ErrExist", err)
	}
	cert1, _ := os.ReadFile(cp)
	key1, _ := os.ReadFile(kp)
	if !bytes.Equal(cert0, cert1) || !bytes.Equal(key0, key1) {
		t.Fatal("a refused Save changed the CA's files")
	}
	if _, err := LoadCA(cp, kp); err != nil {
		t.Fatalf("the first CA no longer loads: %v", err)
	}
	if st, _ := os.Stat(kp); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestIssueEndsWithTheCA: a certificate never outlives its CA, and a CA
// past its end issues nothing.
func TestIssueEndsWithTheCA(t *testing.T) {
	ca, err := NewCA("iop.test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(KindNode, "gpu-box", Options{Validity: 90 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if got := parsePEM(t, certPEM).NotAfter; !got.Equal(ca.Cert.NotAfter) {
		t.Fatalf("NotAfter %v, want the CA's %v", got, ca.Cert.NotAfter)
	}
	certPEM, _, err = ca.Issue(KindNode, "gpu-box", Options{Validity: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if c := parsePEM(t, certPEM); c.NotAfter.Sub(c.NotBefore) != time.Minute {
		t.Fatalf("a short validity was changed: %v", c.NotAfter.Sub(c.NotBefore))
	}
	after := Options{NotBefore: ca.Cert.NotAfter.Add(time.Second)}
	if _, _, err := ca.Issue(KindNode, "gpu-box", after); !errors.Is(err, ErrCAExpired) {
		t.Fatalf("Issue after the CA's end: %v, want ErrCAExpired", err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	csr, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if _, err := ca.SignCSR(csr, KindNode, "gpu-box", after); !errors.Is(err, ErrCAExpired) {
		t.Fatalf("SignCSR after the CA's end: %v, want ErrCAExpired", err)
	}
}

// TestLoadCAReadsTheTrustDomainStrictly: a CA certificate made elsewhere
// (openssl, another tool) must name its trust domain as NewCA would, or
// LoadCA refuses it; the trust domain goes into every ID the CA issues.
func TestLoadCAReadsTheTrustDomainStrictly(t *testing.T) {
	write := func(t *testing.T, uris ...string) (certPath, keyPath string) {
		t.Helper()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber:          serial(),
			Subject:               pkix.Name{CommonName: "elsewhere"},
			NotBefore:             time.Now().Add(-time.Minute),
			NotAfter:              time.Now().Add(time.Hour),
			KeyUsage:              x509.KeyUsageCertSign,
			BasicConstraintsValid: true,
			IsCA:                  true,
		}
		for _, s := range uris {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			tmpl.URIs = append(tmpl.URIs, u)
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalPKCS8PrivateKey(key)
		dir := t.TempDir()
		certPath, keyPath = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
		if err := os.WriteFile(certPath, pemBlock("CERTIFICATE", der), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyPath, pemBlock("PRIVATE KEY", kd), 0o600); err != nil {
			t.Fatal(err)
		}
		return certPath, keyPath
	}
	cp, kp := write(t, "spiffe://corp.example")
	ca, err := LoadCA(cp, kp)
	if err != nil {
		t.Fatalf("a CA made elsewhere with a plain trust domain: %v", err)
	}
	if ca.TrustDomain != "corp.example" {
		t.Fatalf("trust domain %q", ca.TrustDomain)
	}
	for _, uris := range [][]string{
		nil,
		{"https://corp.example"},
		{"spiffe://corp.example", "spiffe://other.example"},
		{"spiffe://Corp.Example"},
		{"spiffe://corp.example/node/a"},
		{"spiffe://corp.example:8443"},
		{"spiffe://corp.example?x=1"},
		{"spiffe://corp.example#top"},
		{"spiffe:corp.example"},
		{"spiffe://corp.example/"},
		{"spiffe://user@corp.example"},
	} {
		cp, kp := write(t, uris...)
		if ca, err := LoadCA(cp, kp); err == nil {
			t.Errorf("CA naming %q loaded with trust domain %q", uris, ca.TrustDomain)
		}
	}
}
