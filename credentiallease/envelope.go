package credentiallease

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
	"unicode/utf8"
)

// Envelope format, version 1 (all integers big-endian):
//
//	magic       "IOPL"
//	version     u8    (1)
//	suite       u8    (1: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256,
//	                   ChaCha20-Poly1305; Ed25519ctx signature)
//	edge key id u8 length, then the id (1..64 bytes)
//	header      u16 length, then the header below
//	sealed      u16 length, then the HPKE encapsulated key and ciphertext
//	signature   64 bytes, Ed25519 with context SignatureContext over every
//	            byte before it
//
// Nothing may follow the signature. The version 1 header is, in order: the
// 16-byte lease id; the strings principal, route, slot, profile, target,
// node id, node key id and credential id (each a u8 length and UTF-8
// bytes); the credential revision and the connection generation (u64);
// issued-at, not-before and expiry (i64 Unix milliseconds). Nothing may
// follow the expiry.
//
// The HPKE info is HPKEInfoPrefix followed by the SHA-256 of the version,
// suite, edge key id and header bytes exactly as they appear, so sealed
// bytes moved into another lease do not open.

// Version and suite numbers this package speaks.
const (
	Version1                         uint8 = 1
	SuiteX25519SHA256ChaCha20Ed25519 uint8 = 1
)

// Limits.
const (
	// MaxTTL is the longest lease lifetime accepted (expiry - issued-at).
	MaxTTL = 120 * time.Second
	// MaxEnvelopeSize bounds an envelope; larger ones are refused before
	// any parsing.
	MaxEnvelopeSize = 16 << 10
	// MaxSecretSize bounds the sealed secret.
	MaxSecretSize = 8 << 10
	// maxKeyIDLen bounds the Edge key id.
	maxKeyIDLen = 64
)

// SignatureContext is the Ed25519ctx context string of a lease signature;
// a signature made for anything else does not verify as a lease.
const SignatureContext = "iop credential lease v1"

// HPKEInfoPrefix starts the HPKE info of a version 1 lease.
const HPKEInfoPrefix = "iop credential lease v1 seal\x00"

var magic = [4]byte{'I', 'O', 'P', 'L'}

const sigLen = 64

// Binding is what a lease is for: exactly one dispatch on one Node's
// connection.
type Binding struct {
	// Principal is the API key name the request came with.
	Principal string
	// Route is the public model name the request asked for.
	Route string
	// Slot is the dispatch's own id (the run or tunnel id the Edge
	// admitted).
	Slot string
	// Profile names the provider profile the credential is for (the
	// provider id).
	Profile string
	// Target is the upstream model.
	Target string
	// NodeID and NodeKeyID name the recipient and its encryption key.
	NodeID    string
	NodeKeyID string
	// CredentialID and CredentialRevision name the secret's version.
	CredentialID       string
	CredentialRevision uint64
	// Generation is the Node connection's generation.
	Generation uint64
}

// Header is a lease's signed, cleartext part.
type Header struct {
	Version   uint8
	Suite     uint8
	EdgeKeyID string
	LeaseID   [16]byte
	Binding
	IssuedAt  time.Time
	NotBefore time.Time
	ExpiresAt time.Time
}

// frame is an envelope split into its parts; every slice aliases the
// received bytes.
type frame struct {
	version, suite uint8
	keyID          string
	header         []byte
	sealed         []byte
	signed         []byte // every byte before the signature
	sig            []byte
}

// parseFrame splits an envelope strictly: exact lengths, nothing trailing.
func parseFrame(b []byte) (*frame, error) {
	if len(b) > MaxEnvelopeSize {
		return nil, refuse(ErrOversized, "%d bytes, above %d", len(b), MaxEnvelopeSize)
	}
	r := reader{b: b}
	var m [4]byte
	copy(m[:], r.bytes(4))
	f := &frame{}
	f.version = r.u8()
	f.suite = r.u8()
	kl := int(r.u8())
	f.keyID = string(r.bytes(kl))
	f.header = r.bytes(int(r.u16()))
	f.sealed = r.bytes(int(r.u16()))
	signedEnd := r.off
	f.sig = r.bytes(sigLen)
	switch {
	case r.err:
		return nil, refuse(ErrMalformed, "truncated envelope")
	case m != magic:
		return nil, refuse(ErrMalformed, "not a lease envelope")
	case r.off != len(b):
		return nil, refuse(ErrMalformed, "%d trailing bytes", len(b)-r.off)
	case kl == 0 || kl > maxKeyIDLen:
		return nil, refuse(ErrMalformed, "edge key id length %d", kl)
	case len(f.sealed) == 0:
		return nil, refuse(ErrMalformed, "no sealed secret")
	}
	f.signed = b[:signedEnd]
	return f, nil
}

// info is the HPKE info for a frame: it binds the sealed secret to the
// exact version, suite, key id and header.
func (f *frame) info() []byte {
	h := sha256.New()
	h.Write([]byte{f.version, f.suite, byte(len(f.keyID))})
	h.Write([]byte(f.keyID))
	var l [2]byte
	binary.BigEndian.PutUint16(l[:], uint16(len(f.header)))
	h.Write(l[:])
	h.Write(f.header)
	return h.Sum([]byte(HPKEInfoPrefix))
}

// encodeHeader is the version 1 header encoding.
func encodeHeader(h *Header) ([]byte, error) {
	out := make([]byte, 0, 256)
	out = append(out, h.LeaseID[:]...)
	for _, f := range stringFields(&h.Binding) {
		if len(*f.v) > 255 {
			return nil, fmt.Errorf("credentiallease: %s is %d bytes, above 255", f.name, len(*f.v))
		}
		out = append(out, byte(len(*f.v)))
		out = append(out, *f.v...)
	}
	out = binary.BigEndian.AppendUint64(out, h.CredentialRevision)
	out = binary.BigEndian.AppendUint64(out, h.Generation)
	out = binary.BigEndian.AppendUint64(out, uint64(h.IssuedAt.UnixMilli()))
	out = binary.BigEndian.AppendUint64(out, uint64(h.NotBefore.UnixMilli()))
	out = binary.BigEndian.AppendUint64(out, uint64(h.ExpiresAt.UnixMilli()))
	return out, nil
}

// decodeHeader parses a version 1 header strictly.
func decodeHeader(f *frame) (*Header, error) {
	h := &Header{Version: f.version, Suite: f.suite, EdgeKeyID: f.keyID}
	r := reader{b: f.header}
	copy(h.LeaseID[:], r.bytes(16))
	for _, fl := range stringFields(&h.Binding) {
		s := r.bytes(int(r.u8()))
		if !utf8.Valid(s) {
			return nil, refuse(ErrMalformed, "%s is not UTF-8", fl.name)
		}
		*fl.v = string(s)
	}
	h.CredentialRevision = r.u64()
	h.Generation = r.u64()
	h.IssuedAt = time.UnixMilli(int64(r.u64()))
	h.NotBefore = time.UnixMilli(int64(r.u64()))
	h.ExpiresAt = time.UnixMilli(int64(r.u64()))
	switch {
	case r.err:
		return nil, refuse(ErrMalformed, "truncated header")
	case r.off != len(f.header):
		return nil, refuse(ErrMalformed, "%d trailing header bytes", len(f.header)-r.off)
	case h.NodeID == "" || h.NodeKeyID == "" || h.CredentialID == "" || h.Slot == "":
		return nil, refuse(ErrMalformed, "node id, node key id, credential id and slot are required")
	}
	return h, nil
}

type namedString struct {
	name string
	v    *string
}

// stringFields lists the header's strings in wire order.
func stringFields(b *Binding) []namedString {
	return []namedString{
		{"principal", &b.Principal}, {"route", &b.Route}, {"slot", &b.Slot}, {"profile", &b.Profile},
		{"target", &b.Target}, {"node_id", &b.NodeID}, {"node_key_id", &b.NodeKeyID}, {"credential_id", &b.CredentialID},
	}
}

// reader reads big-endian fields; a short read sets err and yields zeros.
type reader struct {
	b   []byte
	off int
	err bool
}

func (r *reader) bytes(n int) []byte {
	if r.err || n < 0 || len(r.b)-r.off < n {
		r.err = true
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) u8() uint8 {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16() uint16 {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

func (r *reader) u64() uint64 {
	b := r.bytes(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}
