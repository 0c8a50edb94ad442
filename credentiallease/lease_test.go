package credentiallease

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hpke"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a settable test clock.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time        { return time.UnixMilli(c.ms.Load()) }
func (c *clock) set(t time.Time)       { c.ms.Store(t.UnixMilli()) }
func (c *clock) add(d time.Duration)   { c.ms.Add(d.Milliseconds()) }
func newClock(t time.Time) *clock      { c := &clock{}; c.set(t); return c }
func seeded(b byte) ed25519.PrivateKey { return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{b}, 32)) }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type fixture struct {
	t       *testing.T
	edgeKey ed25519.PrivateKey
	is      *Issuer
	node    *NodeKey
	op      *Opener
	replay  string
	edgeClk *clock
	nodeClk *clock
	b       Binding
	want    Expect
	secret  []byte
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, edgeKey: seeded(1), edgeClk: newClock(t0), nodeClk: newClock(t0), secret: []byte("sk-hosted-api-key-0123456789")}
	var err error
	f.is, err = NewIssuer("edge-2026-11", f.edgeKey, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f.is.Now = f.edgeClk.now
	if f.node, err = GenerateNodeKey(); err != nil {
		t.Fatal(err)
	}
	f.replay = filepath.Join(t.TempDir(), "replay")
	f.op = f.newOpener(f.node, nil)
	f.b = Binding{Principal: "alice", Route: "claude", Slot: "run_0001", Profile: "anthropic-main", Target: "claude-sonnet-4",
		NodeID: "n1", NodeKeyID: f.node.ID(), CredentialID: "anthropic-prod", CredentialRevision: 3, Generation: 1<<32 | 7}
	f.want = Expect{Principal: "alice", Route: "claude", Slot: "run_0001", Profile: "anthropic-main", Target: "claude-sonnet-4",
		CredentialID: "anthropic-prod", Generation: 1<<32 | 7}
	return f
}

// newOpener opens the fixture's replay file afresh (a Node restart).
func (f *fixture) newOpener(key *NodeKey, mutate func(*OpenerConfig)) *Opener {
	f.t.Helper()
	rc, err := OpenReplayFile(f.replay)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { rc.Close() })
	cfg := OpenerConfig{NodeID: "n1", Key: key, EdgeKeys: map[string]ed25519.PublicKey{"edge-2026-11": f.edgeKey.Public().(ed25519.PublicKey)},
		Replay: rc, Now: f.nodeClk.now}
	if mutate != nil {
		mutate(&cfg)
	}
	op, err := NewOpener(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return op
}

func (f *fixture) issue() []byte {
	f.t.Helper()
	env, err := f.is.Issue(f.b, f.node.PublicKey(), f.secret)
	if err != nil {
		f.t.Fatal(err)
	}
	return env
}

// resign replaces an envelope's signature with a valid one over its
// (possibly altered) bytes: what only a holder of the Edge key could do.
// Checks after the signature must refuse such envelopes on their own.
func (f *fixture) resign(env []byte) []byte {
	body := env[:len(env)-sigLen]
	sig, _ := f.edgeKey.Sign(nil, body, &ed25519.Options{Context: SignatureContext})
	return append(append([]byte(nil), body...), sig...)
}

// build makes an envelope from parts and signs it with the Edge key.
func (f *fixture) build(version, suite uint8, keyID string, header, sealed []byte) []byte {
	out := append([]byte(nil), magic[:]...)
	out = append(out, version, suite, byte(len(keyID)))
	out = append(out, keyID...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(header)))
	out = append(out, header...)
	out = binary.BigEndian.AppendUint16(out, uint16(len(sealed)))
	out = append(out, sealed...)
	return f.resign(append(out, make([]byte, sigLen)...))
}

func expectRefused(t *testing.T, what string, s *Secret, err error, want error) {
	t.Helper()
	var re *RefusedError
	if s != nil || !errors.Is(err, want) || !errors.As(err, &re) {
		t.Fatalf("%s: secret %v, error %v; want a refusal %v", what, s != nil, err, want)
	}
}

func TestOpen(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	s, err := f.op.Open(env, f.want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Bytes(), f.secret) {
		t.Fatal("wrong secret")
	}
	for _, out := range []string{s.String(), fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s)} {
		if strings.Contains(out, "sk-hosted") {
			t.Fatalf("the secret printed: %s", out)
		}
	}
	raw := s.Bytes()
	s.Clear()
	if s.Bytes() != nil || bytes.Contains(raw, []byte("sk-hosted")) {
		t.Fatal("Clear left the secret in memory")
	}
	if bytes.Contains(env, f.secret) {
		t.Fatal("the secret is in the envelope in the clear")
	}
}

// TestEveryBitFlipRefused flips each bit of a valid envelope in turn: the
// header, the key id, the sealed secret and the signature. None opens.
func TestEveryBitFlipRefused(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	regions := map[string]int{}
	for i := range env {
		for bit := range 8 {
			m := bytes.Clone(env)
			m[i] ^= 1 << bit
			s, err := f.op.Open(m, f.want)
			if s != nil || err == nil {
				t.Fatalf("byte %d bit %d flipped: the lease opened", i, bit)
			}
			var re *RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("byte %d bit %d: untyped error %v", i, bit, err)
			}
			regions[re.Reason.Error()]++
		}
	}
	// Flips in the signed part are caught by the signature.
	if regions[ErrBadSignature.Error()] == 0 {
		t.Fatalf("refusals %v", regions)
	}
	// The original still opens: nothing above consumed it.
	if _, err := f.op.Open(env, f.want); err != nil {
		t.Fatalf("the untouched lease: %v", err)
	}
}

func TestSignatureRefusals(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	body := env[:len(env)-sigLen]
	for name, sign := range map[string]func() []byte{
		"other context": func() []byte {
			s, _ := f.edgeKey.Sign(nil, body, &ed25519.Options{Context: "iop something else"})
			return s
		},
		"no context": func() []byte { return ed25519.Sign(f.edgeKey, body) },
		"other key": func() []byte {
			s, _ := seeded(9).Sign(nil, body, &ed25519.Options{Context: SignatureContext})
			return s
		},
	} {
		m := append(bytes.Clone(body), sign()...)
		s, err := f.op.Open(m, f.want)
		expectRefused(t, name, s, err, ErrBadSignature)
	}
	unknown := f.newOpener(f.node, func(c *OpenerConfig) {
		c.EdgeKeys = map[string]ed25519.PublicKey{"edge-2027-01": f.edgeKey.Public().(ed25519.PublicKey)}
	})
	s, err := unknown.Open(env, f.want)
	expectRefused(t, "unknown key id", s, err, ErrUnknownKey)
	retired := f.newOpener(f.node, func(c *OpenerConfig) { c.RetiredEdgeKeyIDs = []string{"edge-2026-11"} })
	s, err = retired.Open(env, f.want)
	expectRefused(t, "retired key id", s, err, ErrRetiredKey)
}

func TestRecipient(t *testing.T) {
	f := newFixture(t)
	other, _ := GenerateNodeKey()
	b := f.b
	b.NodeID, b.NodeKeyID = "n2", other.ID()
	env, err := f.is.Issue(b, other.PublicKey(), f.secret)
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.op.Open(env, f.want)
	expectRefused(t, "a lease for another node", s, err, ErrWrongRecipient)
	// The HPKE open refuses on its own: n1's key cannot open what was
	// sealed to n2.
	fr, _ := parseFrame(env)
	if _, err := hpke.Open(f.node.priv, hpke.HKDFSHA256(), hpke.ChaCha20Poly1305(), fr.info(), fr.sealed); err == nil {
		t.Fatal("n1's key opened a secret sealed to n2")
	}
	// Even relabelled as n1's (which takes the Edge's key), it does not open.
	h, _ := decodeHeader(fr)
	h.NodeID, h.NodeKeyID = "n1", f.node.ID()
	hb, _ := encodeHeader(h)
	s, err = f.op.Open(f.build(fr.version, fr.suite, fr.keyID, hb, fr.sealed), f.want)
	expectRefused(t, "n2's sealed secret relabelled for n1", s, err, ErrOpenFailed)

	// A lease for this node id but another key.
	b = f.b
	b.NodeKeyID = other.ID()
	env, _ = f.is.Issue(b, other.PublicKey(), f.secret)
	s, err = f.op.Open(env, f.want)
	expectRefused(t, "another key of this node id", s, err, ErrWrongRecipient)
}

func TestRotatedNodeKey(t *testing.T) {
	f := newFixture(t)
	path := filepath.Join(t.TempDir(), "node.key")
	old, err := LoadOrCreateNodeKey(path)
	if err != nil {
		t.Fatal(err)
	}
	f.b.NodeKeyID = old.ID()
	env, _ := f.is.Issue(f.b, old.PublicKey(), f.secret)
	cur, err := RotateNodeKey(path)
	if err != nil || cur.ID() == old.ID() {
		t.Fatalf("rotate: %v", err)
	}
	op := f.newOpener(cur, func(c *OpenerConfig) { c.RetiredNodeKeyIDs = []string{old.ID()} })
	s, err := op.Open(env, f.want)
	expectRefused(t, "a lease sealed to the key before rotation", s, err, ErrStaleNodeKey)
	if again, _ := LoadOrCreateNodeKey(path); again.ID() != cur.ID() {
		t.Fatal("the rotated key did not persist")
	}
}

func TestTimeWindow(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	f.nodeClk.add(60*time.Second + DefaultSkew + time.Millisecond)
	s, err := f.op.Open(env, f.want)
	expectRefused(t, "expired", s, err, ErrExpired)

	f = newFixture(t)
	f.edgeClk.add(DefaultSkew + time.Second) // the Edge's clock runs ahead
	s, err = f.op.Open(f.issue(), f.want)
	expectRefused(t, "not-before beyond the skew", s, err, ErrNotYetValid)

	f = newFixture(t)
	f.edgeClk.add(DefaultSkew - time.Second) // within the skew: fine
	if _, err := f.op.Open(f.issue(), f.want); err != nil {
		t.Fatalf("within the skew: %v", err)
	}

	f = newFixture(t)
	h := &Header{Version: Version1, Suite: SuiteX25519SHA256ChaCha20Ed25519, EdgeKeyID: "edge-2026-11", Binding: f.b,
		IssuedAt: t0, NotBefore: t0, ExpiresAt: t0.Add(MaxTTL + time.Second)}
	env, err = f.is.seal(h, f.node.PublicKey(), f.secret)
	if err != nil {
		t.Fatal(err)
	}
	s, err = f.op.Open(env, f.want)
	expectRefused(t, "ttl above the maximum", s, err, ErrTTLTooLong)
	if _, err := NewIssuer("k", f.edgeKey, MaxTTL+time.Second); err == nil {
		t.Fatal("an issuer with a TTL above the maximum")
	}
}

// TestClockBackwards: a Node whose wall clock is set back does not take an
// expired lease as valid again, also after a restart.
func TestClockBackwards(t *testing.T) {
	f := newFixture(t)
	old := f.issue() // valid until t0+60s
	f.b.Slot, f.want.Slot = "run_0002", "run_0002"
	f.edgeClk.add(5 * time.Minute)
	f.nodeClk.add(5 * time.Minute)
	if _, err := f.op.Open(f.issue(), f.want); err != nil {
		t.Fatal(err)
	}
	f.nodeClk.set(t0.Add(10 * time.Second)) // back inside old's window
	f.want.Slot = "run_0001"
	s, err := f.op.Open(old, f.want)
	expectRefused(t, "after the clock went back", s, err, ErrExpired)
	restarted := f.newOpener(f.node, nil)
	s, err = restarted.Open(old, f.want)
	expectRefused(t, "after the clock went back and a restart", s, err, ErrExpired)
}

func TestReplay(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	if _, err := f.op.Open(env, f.want); err != nil {
		t.Fatal(err)
	}
	s, err := f.op.Open(env, f.want)
	expectRefused(t, "second use", s, err, ErrReplayed)
	restarted := f.newOpener(f.node, nil)
	s, err = restarted.Open(env, f.want)
	expectRefused(t, "use after a node restart", s, err, ErrReplayed)

	// Concurrent uses: exactly one opens.
	f.b.Slot, f.want.Slot = "run_0002", "run_0002"
	env = f.issue()
	var ok, replayed atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			_, err := restarted.Open(env, f.want)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrReplayed):
				replayed.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 1 || replayed.Load() != 15 {
		t.Fatalf("concurrent uses: %d opened, %d replayed", ok.Load(), replayed.Load())
	}
}

func TestPolicyAndCounters(t *testing.T) {
	f := newFixture(t)
	for name, c := range map[string]struct {
		p    Policy
		want error
	}{
		"revoked credential": {Policy{RevokedCredentials: []string{"anthropic-prod"}}, ErrRevoked},
		"disabled profile":   {Policy{DisabledProfiles: []string{"anthropic-main"}}, ErrDisabled},
		"disabled route":     {Policy{DisabledRoutes: []string{"claude"}}, ErrDisabled},
		"minimum revision":   {Policy{MinRevisions: map[string]uint64{"anthropic-prod": 4}}, ErrStaleRevision},
	} {
		f.op.SetPolicy(c.p)
		s, err := f.op.Open(f.issue(), f.want)
		expectRefused(t, name, s, err, c.want)
	}
	f.op.SetPolicy(Policy{})

	f.b.CredentialRevision = 5
	if _, err := f.op.Open(f.issue(), f.want); err != nil {
		t.Fatal(err)
	}
	f.b.CredentialRevision = 4
	s, err := f.op.Open(f.issue(), f.want)
	expectRefused(t, "a revision older than one seen", s, err, ErrStaleRevision)

	f.b.CredentialRevision = 5
	f.b.Generation = 1<<32 | 6
	s, err = f.op.Open(f.issue(), f.want)
	expectRefused(t, "the previous generation", s, err, ErrStaleGeneration)
}

// TestEachBindingField changes one field of the dispatch at a time.
func TestEachBindingField(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	for field, edit := range map[string]func(*Expect){
		"principal":     func(e *Expect) { e.Principal = "mallory" },
		"route":         func(e *Expect) { e.Route = "gpt" },
		"slot":          func(e *Expect) { e.Slot = "run_0002" },
		"profile":       func(e *Expect) { e.Profile = "anthropic-other" },
		"target":        func(e *Expect) { e.Target = "claude-opus-4" },
		"credential_id": func(e *Expect) { e.CredentialID = "anthropic-dev" },
	} {
		want := f.want
		edit(&want)
		s, err := f.op.Open(env, want)
		expectRefused(t, field, s, err, ErrBindingMismatch)
		var re *RefusedError
		errors.As(err, &re)
		if re.Field != field {
			t.Errorf("%s: refusal names %q", field, re.Field)
		}
	}
	if _, err := f.op.Open(env, f.want); err != nil {
		t.Fatalf("the lease itself: %v", err)
	}
}

// TestSealedPartMoved: the sealed secret of one lease spliced into another.
func TestSealedPartMoved(t *testing.T) {
	f := newFixture(t)
	a := f.issue()
	f.b.Slot = "run_0002"
	f.secret = []byte("sk-other-secret-0123456789")
	b := f.issue()
	fa, _ := parseFrame(a)
	fb, _ := parseFrame(b)
	spliced := f.build(fa.version, fa.suite, fa.keyID, fa.header, fb.sealed)
	s, err := f.op.Open(spliced, f.want)
	expectRefused(t, "b's sealed secret in a (re-signed)", s, err, ErrOpenFailed)
	unsigned := append(bytes.Clone(spliced[:len(spliced)-sigLen]), a[len(a)-sigLen:]...)
	s, err = f.op.Open(unsigned, f.want)
	expectRefused(t, "b's sealed secret in a", s, err, ErrBadSignature)
}

func TestDowngrade(t *testing.T) {
	f := newFixture(t)
	fr, _ := parseFrame(f.issue())
	s, err := f.op.Open(f.build(2, fr.suite, fr.keyID, fr.header, fr.sealed), f.want)
	expectRefused(t, "version 2", s, err, ErrUnsupportedVersion)
	s, err = f.op.Open(f.build(0, fr.suite, fr.keyID, fr.header, fr.sealed), f.want)
	expectRefused(t, "version 0", s, err, ErrUnsupportedVersion)
	s, err = f.op.Open(f.build(fr.version, 2, fr.keyID, fr.header, fr.sealed), f.want)
	expectRefused(t, "suite 2", s, err, ErrUnsupportedSuite)
}

func TestEnvelopeShape(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	for n := range len(env) {
		s, err := f.op.Open(env[:n], f.want)
		expectRefused(t, fmt.Sprintf("truncated to %d", n), s, err, ErrMalformed)
	}
	s, err := f.op.Open(append(bytes.Clone(env), 0), f.want)
	expectRefused(t, "a trailing byte", s, err, ErrMalformed)
	s, err = f.op.Open(make([]byte, MaxEnvelopeSize+1), f.want)
	expectRefused(t, "oversized", s, err, ErrOversized)
	fr, _ := parseFrame(env)
	s, err = f.op.Open(f.build(fr.version, fr.suite, fr.keyID, append(bytes.Clone(fr.header), 0), fr.sealed), f.want)
	expectRefused(t, "a trailing header byte (re-signed)", s, err, ErrMalformed)
	s, err = f.op.Open(f.build(fr.version, fr.suite, fr.keyID, fr.header[:len(fr.header)-1], fr.sealed), f.want)
	expectRefused(t, "a short header (re-signed)", s, err, ErrMalformed)
}

func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.key")
	k, err := LoadOrCreateNodeKey(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if again, err := LoadOrCreateNodeKey(path); err != nil || again.ID() != k.ID() {
		t.Fatalf("reload: %v", err)
	}
	os.Chmod(path, 0o644)
	if _, err := LoadOrCreateNodeKey(path); !errors.Is(err, ErrKeyFile) {
		t.Fatalf("a world-readable key: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "short.key"), []byte("short"), 0o600)
	if _, err := LoadOrCreateNodeKey(filepath.Join(dir, "short.key")); !errors.Is(err, ErrKeyFile) {
		t.Fatalf("a short key: %v", err)
	}
	sk, err := LoadOrCreateSigningKey(filepath.Join(dir, "edge.key"))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := LoadOrCreateSigningKey(filepath.Join(dir, "edge.key")); !again.Equal(sk) {
		t.Fatal("the signing key changed on reload")
	}
}

// TestKeyFileCreatedOnce: processes that start together on a fresh state
// directory (an Edge starting while `edge lease-key` runs) end up with one
// key, the one on disk, never each with its own; no temporary file is
// left behind.
func TestKeyFileCreatedOnce(t *testing.T) {
	dir := t.TempDir()
	const n = 16
	var wg sync.WaitGroup
	signing := make([]ed25519.PrivateKey, n)
	nodeIDs := make([]string, n)
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			k, err := LoadOrCreateSigningKey(filepath.Join(dir, "edge.key"))
			errs <- err
			signing[i] = k
		})
		wg.Go(func() {
			k, err := LoadOrCreateNodeKey(filepath.Join(dir, "node.key"))
			errs <- err
			if err == nil {
				nodeIDs[i] = k.ID()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	onDisk, err := LoadOrCreateSigningKey(filepath.Join(dir, "edge.key"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := LoadOrCreateNodeKey(filepath.Join(dir, "node.key"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if !signing[i].Equal(onDisk) {
			t.Errorf("creator %d holds a signing key that is not the one on disk", i)
		}
		if nodeIDs[i] != node.ID() {
			t.Errorf("creator %d holds node key %s, the file holds %s", i, nodeIDs[i], node.ID())
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("directory holds %v, want the two keys only", names)
	}
}

func TestReplayFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "replay")
	rc, err := OpenReplayFile(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	id := [16]byte{1}
	if err := rc.use(id, now.Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if err := rc.use([16]byte{2}, now.Add(-time.Minute), now); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	// A torn last line is ignored; expired entries are dropped by the
	// opener's clock.
	fh, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	fh.WriteString("0303")
	fh.Close()
	rc, err = OpenReplayFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rc.compact(now)
	if err := rc.use(id, now.Add(time.Minute), now); !errors.Is(err, ErrReplayed) {
		t.Fatalf("the id survived no restart: %v", err)
	}
	if len(rc.used) != 1 {
		t.Fatalf("entries after load: %d", len(rc.used))
	}
	rc.Close()
	os.WriteFile(path, []byte("not a replay line\n"), 0o600)
	if _, err := OpenReplayFile(path); !errors.Is(err, ErrReplayFile) {
		t.Fatalf("a damaged file: %v", err)
	}
}

// TestReplayCacheClosedRefuses: a lease offered after its replay cache was
// closed is refused, not opened unrecorded (a restart would open it
// again), and it is not used up by the refusal.
func TestReplayCacheClosedRefuses(t *testing.T) {
	f := newFixture(t)
	env := f.issue()
	f.op.cfg.Replay.Close()
	s, err := f.op.Open(env, f.want)
	expectRefused(t, "a use after Close", s, err, ErrReplayed)
	if _, err := NewOpener(f.op.cfg); err == nil {
		t.Fatal("an opener was made on a closed replay cache")
	}
	restarted := f.newOpener(f.node, nil)
	if _, err := restarted.Open(env, f.want); err != nil {
		t.Fatalf("the lease refused at Close does not open after a restart: %v", err)
	}
}

// TestReplayFileRepairedAfterFailedWrite: a write that fails (a full disk)
// refuses its lease and leaves the file as loadable as it was: the part of
// a line it may have left is gone before the next use is appended, so a
// restart neither fails on a damaged line nor forgets a later use.
func TestReplayFileRepairedAfterFailedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replay")
	rc, err := OpenReplayFile(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	until := now.Add(time.Minute)
	if err := rc.use([16]byte{1}, until, now); err != nil {
		t.Fatal(err)
	}
	// The write is cut short: part of its line reaches the file, and the
	// rest fails.
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fh.WriteString("0202020202")
	fh.Close()
	ro, err := os.Open(path) // a Write through it fails
	if err != nil {
		t.Fatal(err)
	}
	rc.f.Close()
	rc.f = ro
	if err := rc.use([16]byte{2}, until, now); !errors.Is(err, ErrReplayed) {
		t.Fatalf("a use whose record failed: %v, want refused", err)
	}
	if err := rc.use([16]byte{3}, until, now); err != nil {
		t.Fatalf("the use after a failed write: %v", err)
	}
	// A repair that failed as well leaves no file to append to; the next
	// use repairs first.
	rc.f.Close()
	rc.f = nil
	if err := rc.use([16]byte{4}, until, now); err != nil {
		t.Fatalf("the use after a failed repair: %v", err)
	}
	rc.Close()

	rc, err = OpenReplayFile(path)
	if err != nil {
		t.Fatalf("the file after a failed write: %v", err)
	}
	defer rc.Close()
	for id, want := range map[byte]bool{1: true, 2: false, 3: true, 4: true} {
		if _, got := rc.used[[16]byte{id}]; got != want {
			t.Errorf("after a restart, lease %d recorded: %v, want %v", id, got, want)
		}
	}
}

// TestReplayFileStaysSmall: a Node that opens leases for a long time
// keeps a replay file (and a map) the size of the leases still live, not
// of every lease it ever opened, and a restart still refuses each live
// one.
func TestReplayFileStaysSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "replay")
	rc, err := OpenReplayFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const (
		uses = 12000
		step = 100 * time.Millisecond // ten leases a second
		life = 150 * time.Second      // MaxTTL plus the default skew
	)
	live := int(life / step)
	start := time.Now()
	id := func(i int) [16]byte { return [16]byte{byte(i >> 16), byte(i >> 8), byte(i)} }
	most := 0
	for i := range uses {
		now := start.Add(time.Duration(i) * step)
		if err := rc.use(id(i), now.Add(life), now); err != nil {
			t.Fatalf("use %d: %v", i, err)
		}
		most = max(most, len(rc.used))
	}
	rc.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(b, []byte{'\n'})
	bound := 2*live + minCompactLines
	if lines > bound || most > bound {
		t.Fatalf("after %d uses with %d live: %d lines in the file, %d entries at most; want at most %d", uses, live, lines, most, bound)
	}
	rc, err = OpenReplayFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	now := start.Add((uses - 1) * step)
	for i := uses - live + 1; i < uses; i++ {
		if err := rc.use(id(i), now.Add(life), now); !errors.Is(err, ErrReplayed) {
			t.Fatalf("after a restart, live lease %d: %v, want ErrReplayed", i, err)
		}
	}
	t.Logf("%d uses, %d live: %d lines in the file, %d entries at most", uses, live, lines, most)
}
