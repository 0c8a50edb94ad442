package edge

import (
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/iop-dev/iop/credentiallease"
)

// TestReloadLeaseTTL: a reload's lease lifetime applies to the leases
// issued after it (before, the one of New stayed, silently); a reload
// that changes the signing key is refused and leaves the issuer as it was.
func TestReloadLeaseTTL(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	keyID := credentiallease.KeyID(pub)
	cfg := Config{Epoch: 1, Leases: &LeaseSigner{KeyID: keyID, Key: priv, TTL: 10 * time.Second}}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	node, _ := credentiallease.GenerateNodeKey()
	binding := credentiallease.Binding{Principal: "alice", Route: "gpt", Slot: "req_1", Profile: "hosted", Target: "m",
		NodeID: "n1", NodeKeyID: credentiallease.KeyID(node.PublicKey()), CredentialID: "c", CredentialRevision: 1, Generation: 1}
	// opensAt reports whether a lease issued now still opens at now+after.
	opensAt := func(after time.Duration) error {
		t.Helper()
		env, err := s.issuer.Load().Issue(binding, node.PublicKey(), []byte("secret"))
		if err != nil {
			t.Fatal(err)
		}
		op, err := credentiallease.NewOpener(credentiallease.OpenerConfig{NodeID: "n1", Key: node, Replay: credentiallease.NewReplayCache(),
			EdgeKeys: map[string]ed25519.PublicKey{keyID: pub}, Skew: time.Second,
			Now: func() time.Time { return time.Now().Add(after) }})
		if err != nil {
			t.Fatal(err)
		}
		_, err = op.Open(env, credentiallease.Expect{Principal: "alice", Route: "gpt", Slot: "req_1", Profile: "hosted", Target: "m", CredentialID: "c", Generation: 1})
		return err
	}
	if err := opensAt(30 * time.Second); !errors.Is(err, credentiallease.ErrExpired) {
		t.Fatalf("a 10 s lease, 30 s later: %v, want ErrExpired", err)
	}
	longer := cfg
	longer.Leases = &LeaseSigner{KeyID: keyID, Key: priv, TTL: 2 * time.Minute}
	if err := s.Reload(longer); err != nil {
		t.Fatal(err)
	}
	if err := opensAt(30 * time.Second); err != nil {
		t.Fatalf("a 2 min lease after the reload, 30 s later: %v", err)
	}
	_, other, _ := ed25519.GenerateKey(nil)
	rekeyed := cfg
	rekeyed.Leases = &LeaseSigner{KeyID: "another", Key: other, TTL: 10 * time.Second}
	if err := s.Reload(rekeyed); err == nil {
		t.Fatal("a reload changing the signing key was accepted")
	}
	if err := opensAt(30 * time.Second); err != nil {
		t.Fatalf("a refused reload changed the issuer: %v", err)
	}
	if err := opensAt(3 * time.Minute); !errors.Is(err, credentiallease.ErrExpired) {
		t.Fatalf("a 2 min lease, 3 min later: %v, want ErrExpired", err)
	}
}
