// Package identity is the Edge's certificate authority for workload
// identity: it issues Node and Edge certificates whose identity is a SPIFFE
// ID in a URI SAN (spiffe://<trust-domain>/node/<id>,
// spiffe://<trust-domain>/edge/<id>), signs certificate requests (the
// enrollment call: the Node keeps its private key), and reads a verified
// peer's identity back. [NodeAuthenticator] plugs the check into the Edge's
// node registry for managed mode; the Control Plane uses [PeerID] for
// Edges.
//
// Identity is read only from a chain the TLS handshake already verified
// against the configured CA; a certificate without exactly one SPIFFE ID
// of the expected trust domain and kind names no one.
package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/iop-dev/iop/internal/atomicfile"
)

// Kind is the workload kind in a SPIFFE ID path.
type Kind string

// Kinds.
const (
	KindNode Kind = "node"
	KindEdge Kind = "edge"
)

// Errors.
var (
	// ErrNoIdentity: no verified certificate, or none with exactly one
	// SPIFFE ID of the expected trust domain and kind.
	ErrNoIdentity = errors.New("identity: no verified workload identity")
	// ErrIdentityMismatch: the certificate names another id.
	ErrIdentityMismatch = errors.New("identity: certificate names another workload")
	// ErrCSR: the certificate request is malformed or not self-signed by
	// its key.
	ErrCSR = errors.New("identity: invalid certificate request")
	// ErrCAExpired: the CA's certificate ends before the certificate to
	// issue would start.
	ErrCAExpired = errors.New("identity: the CA certificate has expired")
	// ErrName: a trust domain or workload id this package never issues
	// or accepts (see CheckTrustDomain and CheckID).
	ErrName = errors.New("identity: invalid name")
)

// CheckTrustDomain reports whether td is a trust domain this package
// issues and accepts: 1 to 128 bytes of lowercase letters, digits, '.',
// '_' and '-', and not "." or "..". A configuration naming another could
// never match a certificate, so its loaders refuse it at once with
// ErrName instead of refusing every peer later.
func CheckTrustDomain(td string) error {
	if !validName(td, false) {
		return fmt.Errorf("%w: trust domain %q: 1 to 128 bytes of lowercase letters, digits, '.', '_', '-', and not \".\" or \"..\"", ErrName, td)
	}
	return nil
}

// CheckID reports whether id is a workload id this package issues and
// accepts: 1 to 128 bytes of letters, digits, '.', '_' and '-', and not
// "." or ".." (a SPIFFE ID's path segments never are). Otherwise it
// returns ErrName.
func CheckID(id string) error {
	if !validName(id, true) {
		return fmt.Errorf("%w: id %q: 1 to 128 bytes of letters, digits, '.', '_', '-', and not \".\" or \"..\"", ErrName, id)
	}
	return nil
}

// ID returns the SPIFFE ID of a workload.
func ID(trustDomain string, kind Kind, id string) *url.URL {
	return &url.URL{Scheme: "spiffe", Host: trustDomain, Path: "/" + string(kind) + "/" + id}
}

// validName accepts trust domains and ids of lowercase letters, digits,
// '.', '_' and '-' (ids may also use uppercase), 1 to 128 bytes, but for
// the dot segments "." and "..", which the SPIFFE ID format forbids as
// path segments (and a path cleaner would resolve).
func validName(s string, allowUpper bool) bool {
	if s == "" || len(s) > 128 || s == "." || s == ".." {
		return false
	}
	for _, c := range s {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || allowUpper && c >= 'A' && c <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

// parseID splits a SPIFFE ID into its parts, strictly.
func parseID(u *url.URL) (td string, kind Kind, id string, ok bool) {
	if u.Scheme != "spiffe" || u.User != nil || u.Port() != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", "", "", false
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 2 || !strings.HasPrefix(u.Path, "/") || !validName(u.Host, false) || !validName(parts[1], true) {
		return "", "", "", false
	}
	// The ID must be written as it reads: a percent-escape ("node%2Fa",
	// "%61") or an empty query decodes to a name the certificate does
	// not spell, and SPIFFE IDs have neither.
	if u.String() != ID(u.Host, Kind(parts[0]), parts[1]).String() {
		return "", "", "", false
	}
	return u.Host, Kind(parts[0]), parts[1], true
}

// PeerID returns the workload id of a TLS peer whose chain the handshake
// verified: the leaf must carry exactly one SPIFFE ID, in trustDomain, of
// kind. Anything else is ErrNoIdentity.
func PeerID(cs *tls.ConnectionState, trustDomain string, kind Kind) (string, error) {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", ErrNoIdentity
	}
	return CertID(cs.VerifiedChains[0][0], trustDomain, kind)
}

// CertID returns the workload id a certificate names (see PeerID). It
// does not verify the certificate.
func CertID(cert *x509.Certificate, trustDomain string, kind Kind) (string, error) {
	td, k, id, err := Workload(cert)
	if err != nil {
		return "", err
	}
	if td != trustDomain || k != kind {
		return "", fmt.Errorf("%w: %q is not a %s of trust domain %q", ErrNoIdentity, ID(td, k, id), kind, trustDomain)
	}
	return id, nil
}

// Workload returns the trust domain, kind and id of the SPIFFE ID a
// certificate carries, read as strictly as CertID reads it but of any
// trust domain and kind: for a caller that must tell a workload's
// certificate from another, and one workload's kind from another's. A
// certificate without exactly one well-formed SPIFFE ID of a known kind
// is ErrNoIdentity. It does not verify the certificate.
func Workload(cert *x509.Certificate) (trustDomain string, kind Kind, id string, err error) {
	var found []*url.URL
	for _, u := range cert.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		return "", "", "", fmt.Errorf("%w: %d SPIFFE IDs in the certificate", ErrNoIdentity, len(found))
	}
	td, k, id, ok := parseID(found[0])
	if !ok || (k != KindNode && k != KindEdge) {
		return "", "", "", fmt.Errorf("%w: %q is not a workload ID", ErrNoIdentity, found[0])
	}
	return td, k, id, nil
}

// CA is a certificate authority for one trust domain.
type CA struct {
	TrustDomain string
	Cert        *x509.Certificate
	key         crypto.Signer
	certPEM     []byte
}

// DefaultCAValidity and DefaultCertValidity are the lifetimes NewCA and
// Issue use when given zero.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 90 * 24 * time.Hour
)

// NewCA creates a CA with a fresh ECDSA P-256 key.
func NewCA(trustDomain string, validity time.Duration) (*CA, error) {
	if err := CheckTrustDomain(trustDomain); err != nil {
		return nil, err
	}
	if validity <= 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "IOP CA " + trustDomain},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		URIs:                  []*url.URL{{Scheme: "spiffe", Host: trustDomain}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{TrustDomain: trustDomain, Cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der)}, nil
}

// LoadCA reads a CA's certificate and private key (PEM). The key file must
// be readable by its owner only.
func LoadCA(certPath, keyPath string) (*CA, error) {
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(keyPath)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("identity: %s has mode %v; the CA key must be readable by its owner only", keyPath, st.Mode().Perm())
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	cblk, _ := pem.Decode(cb)
	kblk, _ := pem.Decode(kb)
	if cblk == nil || cblk.Type != "CERTIFICATE" || kblk == nil || kblk.Type != "PRIVATE KEY" {
		return nil, errors.New("identity: CA files are not a PEM certificate and a PEM PRIVATE KEY")
	}
	cert, err := x509.ParseCertificate(cblk.Bytes)
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kblk.Bytes)
	if err != nil {
		return nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("identity: not a CA certificate and key")
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("identity: the CA key does not match its certificate")
	}
	td, ok := caTrustDomain(cert)
	if !ok {
		return nil, errors.New("identity: the CA certificate names no trust domain (one URI SAN spiffe://<trust-domain>)")
	}
	return &CA{TrustDomain: td, Cert: cert, key: signer, certPEM: pemBlock("CERTIFICATE", cblk.Bytes)}, nil
}

// caTrustDomain reads the trust domain a CA certificate names: exactly
// one URI SAN, spiffe://<trust-domain>, written as it reads, with a
// trust domain NewCA would accept. Every certificate the CA issues
// carries that trust domain, so a name NewCA refuses, or one with a
// path, port or escape, is refused here too rather than carried into
// workload IDs.
func caTrustDomain(cert *x509.Certificate) (string, bool) {
	if len(cert.URIs) != 1 {
		return "", false
	}
	u := cert.URIs[0]
	if u.Scheme != "spiffe" || !validName(u.Host, false) {
		return "", false
	}
	want := url.URL{Scheme: "spiffe", Host: u.Host}
	if u.String() != want.String() {
		return "", false
	}
	return u.Host, true
}

// Save writes the CA key (0600) and then its certificate (0644), each
// whole or not at all (package atomicfile). It never replaces a key: a
// file at keyPath, another CA's key perhaps, is left alone and Save
// returns an error matching fs.ErrExist, with the certificate untouched.
func (ca *CA) Save(certPath, keyPath string) error {
	kd, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return err
	}
	if err := atomicfile.Create(keyPath, pemBlock("PRIVATE KEY", kd), 0o600); err != nil {
		return fmt.Errorf("identity: CA key: %w", err)
	}
	if err := atomicfile.Write(certPath, ca.certPEM, 0o644); err != nil {
		return fmt.Errorf("identity: CA certificate: %w", err)
	}
	return nil
}

// CertPEM returns the CA certificate, for trust pools.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Pool returns a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Options shape an issued certificate.
type Options struct {
	// Validity is the lifetime. Zero means DefaultCertValidity. A
	// certificate never outlives the CA's: it ends when the CA's ends.
	Validity time.Duration
	// DNSNames and IPAddresses make the certificate usable by a server
	// (an Edge accepting Nodes, a Hub) as well as a client.
	DNSNames    []string
	IPAddresses []net.IP
	// NotBefore overrides the start (tests of expired certificates).
	NotBefore time.Time
}

// SignCSR signs a PEM or DER certificate request for a workload. Only the
// request's public key is taken (its proof of possession is checked, and
// it must be ECDSA P-256, P-384 or P-521, Ed25519, or RSA of 2048 bits or
// more); the identity, names and usages come from the arguments, never
// from the request.
func (ca *CA) SignCSR(csr []byte, kind Kind, id string, opt Options) (certPEM []byte, err error) {
	if b, _ := pem.Decode(csr); b != nil {
		if b.Type != "CERTIFICATE REQUEST" {
			return nil, fmt.Errorf("%w: PEM block %q", ErrCSR, b.Type)
		}
		csr = b.Bytes
	}
	req, err := x509.ParseCertificateRequest(csr)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCSR, err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCSR, err)
	}
	if err := strongKey(req.PublicKey); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCSR, err)
	}
	return ca.sign(req.PublicKey, kind, id, opt)
}

// strongKey accepts the public keys a workload certificate may carry:
// ECDSA on P-256, P-384 or P-521, Ed25519, and RSA of 2048 bits or more.
func strongKey(pub crypto.PublicKey) error {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			return nil
		}
		return errors.New("unsupported ECDSA curve")
	case ed25519.PublicKey:
		return nil
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits (2048 at least)", k.N.BitLen())
		}
		return nil
	}
	return fmt.Errorf("unsupported key type %T", pub)
}

// Issue creates a key and a certificate for a workload (for operators
// without an enrollment flow). It returns PEM certificate and PKCS#8 key.
func (ca *CA) Issue(kind Kind, id string, opt Options) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	certPEM, err = ca.sign(key.Public(), kind, id, opt)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pemBlock("PRIVATE KEY", kd), nil
}

func (ca *CA) sign(pub crypto.PublicKey, kind Kind, id string, opt Options) ([]byte, error) {
	if kind != KindNode && kind != KindEdge {
		return nil, fmt.Errorf("identity: unknown kind %q", kind)
	}
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if opt.Validity <= 0 {
		opt.Validity = DefaultCertValidity
	}
	start := opt.NotBefore
	if start.IsZero() {
		start = time.Now().Add(-time.Minute)
	}
	// A certificate outliving its CA's would fail verification from the
	// CA's end anyway: it ends with the CA.
	end := start.Add(opt.Validity)
	if end.After(ca.Cert.NotAfter) {
		end = ca.Cert.NotAfter
	}
	if !end.After(start) {
		return nil, fmt.Errorf("%w (at %s)", ErrCAExpired, ca.Cert.NotAfter.UTC().Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: id},
		NotBefore:    start,
		NotAfter:     end,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:         []*url.URL{ID(ca.TrustDomain, kind, id)},
		DNSNames:     opt.DNSNames,
		IPAddresses:  opt.IPAddresses,
	}
	if len(opt.DNSNames) > 0 || len(opt.IPAddresses) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.key)
	if err != nil {
		return nil, err
	}
	return pemBlock("CERTIFICATE", der), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
