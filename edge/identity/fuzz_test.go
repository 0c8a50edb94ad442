package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"testing"
)

// FuzzSignCSR: the enrollment call's certificate request is untrusted
// bytes. Whatever they are, SignCSR refuses them with ErrCSR or issues a
// certificate for the request's own key that names exactly the workload
// asked for, nothing the request spelled.
func FuzzSignCSR(f *testing.F) {
	ca, err := NewCA("iop.test", 0)
	if err != nil {
		f.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		DNSNames: []string{"edge.example"},
		URIs:     []*url.URL{{Scheme: "spiffe", Host: "iop.test", Path: "/edge/admin"}},
	}, key)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(der)
	f.Add(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	f.Add(ca.CertPEM())
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte{0x30, 0x82, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		certPEM, err := ca.SignCSR(b, KindNode, "gpu-box", Options{})
		if err != nil {
			if !errors.Is(err, ErrCSR) {
				t.Fatalf("refused without ErrCSR: %v", err)
			}
			return
		}
		blk, _ := pem.Decode(certPEM)
		cert, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("issued an unreadable certificate: %v", err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Fatalf("issued a certificate its CA does not verify: %v", err)
		}
		if id, err := CertID(cert, "iop.test", KindNode); err != nil || id != "gpu-box" || len(cert.URIs) != 1 || len(cert.DNSNames) != 0 || len(cert.IPAddresses) != 0 {
			t.Fatalf("issued names %v %v %v (id %q, %v)", cert.URIs, cert.DNSNames, cert.IPAddresses, id, err)
		}
		in := b
		if p, _ := pem.Decode(b); p != nil {
			in = p.Bytes
		}
		req, err := x509.ParseCertificateRequest(in)
		if err != nil {
			t.Fatalf("signed a request that does not parse: %v", err)
		}
		if pub, ok := cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(req.PublicKey) {
			t.Fatal("the certificate's key is not the request's")
		}
	})
}

// FuzzCertID: a URI SAN names a workload only when it is spelled exactly
// as that workload's SPIFFE ID; any other spelling names no one.
func FuzzCertID(f *testing.F) {
	for _, s := range []string{"spiffe://iop.test/node/gpu-box", "spiffe://iop.test/node/%61", "spiffe://iop.test/node%2Fa",
		"spiffe://iop.test/node/a?", "spiffe://iop.test/edge/a", "SPIFFE://iop.test/node/a", "spiffe://iop.test/node/a#", "spiffe://iop.test//node/a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		id, err := CertID(&x509.Certificate{URIs: []*url.URL{u}}, "iop.test", KindNode)
		if err != nil {
			if !errors.Is(err, ErrNoIdentity) {
				t.Fatalf("refused without ErrNoIdentity: %v", err)
			}
			return
		}
		if !validName(id, true) || u.String() != ID("iop.test", KindNode, id).String() {
			t.Fatalf("%q named %q", s, id)
		}
	})
}
