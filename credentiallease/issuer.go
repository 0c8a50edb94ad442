package credentiallease

import (
	"crypto/ed25519"
	"crypto/hpke"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Issuer is the Edge's side: it seals a secret to one Node's key for one
// dispatch and signs the lease.
type Issuer struct {
	keyID string
	key   ed25519.PrivateKey
	ttl   time.Duration
	// Now returns the time leases are issued at. Nil means time.Now.
	Now func() time.Time
}

// DefaultTTL is a lease's lifetime when NewIssuer is given zero.
const DefaultTTL = 60 * time.Second

// NewIssuer returns an Issuer signing with key under keyID (Nodes pin the
// id and its public key). ttl zero means DefaultTTL; above MaxTTL is an
// error.
func NewIssuer(keyID string, key ed25519.PrivateKey, ttl time.Duration) (*Issuer, error) {
	if keyID == "" || len(keyID) > maxKeyIDLen {
		return nil, fmt.Errorf("credentiallease: key id must be 1 to %d bytes", maxKeyIDLen)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("credentiallease: not an Ed25519 private key")
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < time.Second || ttl > MaxTTL {
		return nil, fmt.Errorf("credentiallease: ttl %v outside 1s..%v", ttl, MaxTTL)
	}
	return &Issuer{keyID: keyID, key: key, ttl: ttl}, nil
}

// KeyID returns the signing key's id.
func (is *Issuer) KeyID() string { return is.keyID }

// PublicKey returns the signing key's public half, for Nodes to pin.
func (is *Issuer) PublicKey() ed25519.PublicKey { return is.key.Public().(ed25519.PublicKey) }

// Issue seals secret to the Node key recipient (its registered X25519
// public key, whose KeyID must equal b.NodeKeyID) and returns the signed
// envelope. The lease is valid from now until now + the Issuer's TTL.
func (is *Issuer) Issue(b Binding, recipient []byte, secret []byte) ([]byte, error) {
	now := time.Now()
	if is.Now != nil {
		now = is.Now()
	}
	h := &Header{Version: Version1, Suite: SuiteX25519SHA256ChaCha20Ed25519, EdgeKeyID: is.keyID, Binding: b,
		IssuedAt: now, NotBefore: now, ExpiresAt: now.Add(is.ttl)}
	if _, err := rand.Read(h.LeaseID[:]); err != nil {
		return nil, err
	}
	return is.seal(h, recipient, secret)
}

// seal builds, seals and signs an envelope for h.
func (is *Issuer) seal(h *Header, recipient []byte, secret []byte) ([]byte, error) {
	switch {
	case len(secret) == 0 || len(secret) > MaxSecretSize:
		return nil, fmt.Errorf("credentiallease: secret must be 1 to %d bytes", MaxSecretSize)
	case h.NodeID == "" || h.CredentialID == "" || h.Slot == "":
		return nil, errors.New("credentiallease: node id, credential id and slot are required")
	case KeyID(recipient) != h.NodeKeyID:
		return nil, errors.New("credentiallease: the recipient key does not match the binding's node key id")
	}
	pub, err := kem().NewPublicKey(recipient)
	if err != nil {
		return nil, fmt.Errorf("credentiallease: recipient key: %w", err)
	}
	header, err := encodeHeader(h)
	if err != nil {
		return nil, err
	}
	if len(header) > 0xffff {
		return nil, errors.New("credentiallease: header too large")
	}
	f := &frame{version: h.Version, suite: h.Suite, keyID: h.EdgeKeyID, header: header}
	sealed, err := hpke.Seal(pub, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), f.info(), secret)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8+len(h.EdgeKeyID)+len(header)+len(sealed)+sigLen)
	out = append(out, magic[:]...)
	out = append(out, h.Version, h.Suite, byte(len(h.EdgeKeyID)))
	out = append(out, h.EdgeKeyID...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(header)))
	out = append(out, header...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(sealed)))
	out = append(out, sealed...)
	sig, err := is.key.Sign(nil, out, &ed25519.Options{Context: SignatureContext})
	if err != nil {
		return nil, err
	}
	out = append(out, sig...)
	if len(out) > MaxEnvelopeSize {
		return nil, errors.New("credentiallease: envelope too large")
	}
	return out, nil
}
