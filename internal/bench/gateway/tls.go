package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// benchPKI is a throwaway CA and one certificate for 127.0.0.1, shared by
// every role of a -tls run through files in one directory.
type benchPKI struct {
	roots *x509.CertPool
	cert  tls.Certificate
}

// makePKI writes ca.pem, cert.pem and key.pem into dir.
func makePKI(dir string) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gateway bench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		log.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		log.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			log.Fatal(err)
		}
	}
	write("ca.pem", "CERTIFICATE", caDER)
	write("cert.pem", "CERTIFICATE", leafDER)
	write("key.pem", "EC PRIVATE KEY", keyDER)
}

// loadPKI reads what makePKI wrote; an empty dir means plaintext (nil).
func loadPKI(dir string) *benchPKI {
	if dir == "" {
		return nil
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		log.Fatal(err)
	}
	return &benchPKI{roots: roots, cert: cert}
}

func (p *benchPKI) server() *tls.Config { return &tls.Config{Certificates: []tls.Certificate{p.cert}} }
func (p *benchPKI) client() *tls.Config { return &tls.Config{RootCAs: p.roots} }

// scheme is the URL scheme of a plaintext (nil) or TLS run.
func (p *benchPKI) scheme() string {
	if p == nil {
		return "http://"
	}
	return "https://"
}

// serveHTTP serves h on ln, over TLS when p is set.
func (p *benchPKI) serveHTTP(ln net.Listener, h http.Handler) {
	if p == nil {
		http.Serve(ln, h)
		return
	}
	http.Serve(tls.NewListener(ln, p.server()), h)
}

// transport returns an HTTP transport keeping conns idle connections per
// host, trusting the bench CA when p is set.
func (p *benchPKI) transport(conns int) *http.Transport {
	tr := &http.Transport{MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute, ForceAttemptHTTP2: false}
	if p != nil {
		tr.TLSClientConfig = p.client()
	}
	return tr
}
