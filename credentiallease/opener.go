package credentiallease

import (
	"crypto/ed25519"
	"crypto/hpke"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// DefaultSkew is the clock difference between Edge and Node tolerated
// when OpenerConfig.Skew is zero.
const DefaultSkew = 30 * time.Second

// maxSkew bounds OpenerConfig.Skew.
const maxSkew = 5 * time.Minute

// OpenerConfig configures a Node's Opener.
type OpenerConfig struct {
	// NodeID is this Node's id; a lease for any other id is refused.
	NodeID string
	// Key is the Node's current encryption key.
	Key *NodeKey
	// RetiredNodeKeyIDs are ids of keys this Node used before a rotation;
	// a lease sealed to one is refused as ErrStaleNodeKey.
	RetiredNodeKeyIDs []string
	// EdgeKeys are the pinned Edge signing keys by id.
	EdgeKeys map[string]ed25519.PublicKey
	// RetiredEdgeKeyIDs are Edge key ids no longer accepted.
	RetiredEdgeKeyIDs []string
	// Skew is the tolerated clock difference. Zero means DefaultSkew; at
	// most five minutes.
	Skew time.Duration
	// Replay remembers used lease ids. Required: a lease must be usable
	// once, also across a restart (use OpenReplayFile).
	Replay *ReplayCache
	// Now returns the wall clock. Nil means time.Now.
	Now func() time.Time
}

// Policy is the Edge's current word on credentials, delivered with the
// Node's configuration: revoked credentials, disabled profiles and routes,
// and the lowest credential revision still valid.
type Policy struct {
	RevokedCredentials []string
	DisabledProfiles   []string
	DisabledRoutes     []string
	// MinRevisions maps a credential id to its lowest valid revision.
	MinRevisions map[string]uint64
}

// Expect is the dispatch a lease is opened for: what the Node is actually
// about to execute. Every binding field must match it, and Generation is
// the Node's current connection generation.
type Expect struct {
	Principal, Route, Slot, Profile, Target string
	CredentialID                            string
	Generation                              uint64
}

// Opener is the Node's side: it verifies a lease completely and opens its
// secret, once.
type Opener struct {
	cfg  OpenerConfig
	skew time.Duration

	mu           sync.Mutex
	policy       Policy
	lastRevision map[string]uint64
}

// NewOpener validates cfg.
func NewOpener(cfg OpenerConfig) (*Opener, error) {
	switch {
	case cfg.NodeID == "":
		return nil, errors.New("credentiallease: NodeID is required")
	case cfg.Key == nil:
		return nil, errors.New("credentiallease: Key is required")
	case len(cfg.EdgeKeys) == 0:
		return nil, errors.New("credentiallease: at least one pinned Edge key is required")
	case cfg.Replay == nil:
		return nil, errors.New("credentiallease: a replay cache is required")
	case cfg.Skew < 0 || cfg.Skew > maxSkew:
		return nil, fmt.Errorf("credentiallease: skew %v outside 0..%v", cfg.Skew, maxSkew)
	}
	for id, k := range cfg.EdgeKeys {
		if len(k) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("credentiallease: edge key %q is not an Ed25519 public key", id)
		}
	}
	o := &Opener{cfg: cfg, skew: cfg.Skew, lastRevision: map[string]uint64{}}
	if o.skew == 0 {
		o.skew = DefaultSkew
	}
	// Expired entries go by this Opener's clock (the one leases are
	// judged by), never by another.
	if err := cfg.Replay.compact(o.clock()); err != nil {
		return nil, fmt.Errorf("credentiallease: replay file: %w", err)
	}
	return o, nil
}

// SetPolicy replaces the revocation policy (on every configuration update
// from the Edge).
func (o *Opener) SetPolicy(p Policy) {
	o.mu.Lock()
	o.policy = p
	o.mu.Unlock()
}

// NodeKeyID returns the id of the key leases must be sealed to.
func (o *Opener) NodeKeyID() string { return o.cfg.Key.ID() }

// PublicKey returns the Node key's public half, to register with the Edge.
func (o *Opener) PublicKey() []byte { return o.cfg.Key.PublicKey() }

// NodeID returns the node id leases must name.
func (o *Opener) NodeID() string { return o.cfg.NodeID }

// Open verifies envelope against the dispatch and returns its secret. The
// checks run in this order, and the first that fails refuses the lease:
// size; pinned Edge key id; signature over the received bytes; version
// and suite; recipient (node id, node key); every binding field against
// want; lifetime and time window with the skew; revoked credential or
// disabled profile or route; credential revision not older than the last
// seen; connection generation; single use. Only then is the secret
// opened. Every refusal is a *RefusedError.
func (o *Opener) Open(envelope []byte, want Expect) (*Secret, error) {
	h, f, err := o.verify(envelope, want)
	if err != nil {
		return nil, err
	}
	now := o.clock()
	if err := o.cfg.Replay.use(h.LeaseID, h.ExpiresAt.Add(o.skew), now); err != nil {
		return nil, err
	}
	secret, err := hpke.Open(o.cfg.Key.priv, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), f.info(), f.sealed)
	if err != nil {
		return nil, &RefusedError{Reason: ErrOpenFailed}
	}
	o.mu.Lock()
	if h.CredentialRevision > o.lastRevision[h.CredentialID] {
		o.lastRevision[h.CredentialID] = h.CredentialRevision
	}
	o.mu.Unlock()
	return &Secret{b: secret}, nil
}

// clock is the wall clock, never earlier than a time this Node already
// acted on (also across restarts, through the replay file): a clock set
// back cannot revive an expired lease.
func (o *Opener) clock() time.Time {
	now := time.Now()
	if o.cfg.Now != nil {
		now = o.cfg.Now()
	}
	if hw := o.cfg.Replay.highWater(); now.Before(hw) {
		return hw
	}
	return now
}

// verify runs every check before single use.
func (o *Opener) verify(envelope []byte, want Expect) (*Header, *frame, error) {
	f, err := parseFrame(envelope)
	if err != nil {
		return nil, nil, err
	}
	if slices.Contains(o.cfg.RetiredEdgeKeyIDs, f.keyID) {
		return nil, nil, &RefusedError{Reason: ErrRetiredKey}
	}
	pub, ok := o.cfg.EdgeKeys[f.keyID]
	if !ok {
		return nil, nil, &RefusedError{Reason: ErrUnknownKey}
	}
	if err := ed25519.VerifyWithOptions(pub, f.signed, f.sig, &ed25519.Options{Context: SignatureContext}); err != nil {
		return nil, nil, &RefusedError{Reason: ErrBadSignature}
	}
	if f.version != Version1 {
		return nil, nil, refuse(ErrUnsupportedVersion, "version %d", f.version)
	}
	if f.suite != SuiteX25519SHA256ChaCha20Ed25519 {
		return nil, nil, refuse(ErrUnsupportedSuite, "suite %d", f.suite)
	}
	h, err := decodeHeader(f)
	if err != nil {
		return nil, nil, err
	}
	if h.NodeID != o.cfg.NodeID {
		return nil, nil, mismatch("node_id").as(ErrWrongRecipient)
	}
	if h.NodeKeyID != o.cfg.Key.ID() {
		if slices.Contains(o.cfg.RetiredNodeKeyIDs, h.NodeKeyID) {
			return nil, nil, &RefusedError{Reason: ErrStaleNodeKey}
		}
		return nil, nil, mismatch("node_key_id").as(ErrWrongRecipient)
	}
	for _, c := range []struct {
		field     string
		got, want string
	}{
		{"principal", h.Principal, want.Principal}, {"route", h.Route, want.Route}, {"slot", h.Slot, want.Slot},
		{"profile", h.Profile, want.Profile}, {"target", h.Target, want.Target}, {"credential_id", h.CredentialID, want.CredentialID},
	} {
		if c.got != c.want {
			return nil, nil, mismatch(c.field)
		}
	}
	ttl := h.ExpiresAt.Sub(h.IssuedAt)
	switch {
	case ttl > MaxTTL:
		return nil, nil, refuse(ErrTTLTooLong, "%v", ttl)
	case ttl <= 0 || h.NotBefore.Before(h.IssuedAt) || !h.NotBefore.Before(h.ExpiresAt):
		return nil, nil, refuse(ErrMalformed, "inconsistent time window")
	}
	now := o.clock()
	switch {
	case now.After(h.ExpiresAt.Add(o.skew)):
		return nil, nil, &RefusedError{Reason: ErrExpired}
	case h.NotBefore.After(now.Add(o.skew)) || h.IssuedAt.After(now.Add(o.skew)):
		return nil, nil, &RefusedError{Reason: ErrNotYetValid}
	}
	o.mu.Lock()
	p, last := o.policy, o.lastRevision[h.CredentialID]
	o.mu.Unlock()
	switch {
	case slices.Contains(p.RevokedCredentials, h.CredentialID):
		return nil, nil, &RefusedError{Reason: ErrRevoked}
	case slices.Contains(p.DisabledProfiles, h.Profile):
		return nil, nil, refuse(ErrDisabled, "profile")
	case slices.Contains(p.DisabledRoutes, h.Route):
		return nil, nil, refuse(ErrDisabled, "route")
	case h.CredentialRevision < last || h.CredentialRevision < p.MinRevisions[h.CredentialID]:
		return nil, nil, refuse(ErrStaleRevision, "revision %d", h.CredentialRevision)
	case h.Generation != want.Generation:
		return nil, nil, &RefusedError{Reason: ErrStaleGeneration}
	}
	return h, f, nil
}

// as re-labels a binding mismatch with a more specific reason.
func (e *RefusedError) as(reason error) *RefusedError {
	e.Reason = reason
	return e
}

// Secret is an opened credential. Use it for the one call, then Clear it.
// It never prints its value.
type Secret struct {
	mu sync.Mutex
	b  []byte
}

// Bytes returns the secret (nil after Clear). Do not keep the slice.
func (s *Secret) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b
}

// Clear overwrites the secret.
func (s *Secret) Clear() {
	s.mu.Lock()
	clear(s.b)
	s.b = nil
	s.mu.Unlock()
}

// String redacts.
func (s *Secret) String() string { return "[credential lease secret]" }

// GoString redacts.
func (s *Secret) GoString() string { return s.String() }
