package credentiallease

import (
	"bytes"
	"crypto/ed25519"
	"testing"
	"time"
)

// FuzzOpen feeds arbitrary envelopes to a Node's Opener: it never panics,
// every refusal is typed, and nothing but a genuine lease opens.
func FuzzOpen(f *testing.F) {
	edge := seeded(1)
	is, _ := NewIssuer("edge-1", edge, time.Minute)
	is.Now = func() time.Time { return t0 }
	nk, err := kem().DeriveKeyPair(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		f.Fatal(err)
	}
	node := nodeKeyFrom(nk)
	b := Binding{Principal: "p", Route: "r", Slot: "s", Profile: "pr", Target: "t", NodeID: "n1", NodeKeyID: node.ID(),
		CredentialID: "c", CredentialRevision: 1, Generation: 9}
	genuine, err := is.Issue(b, node.PublicKey(), []byte("secret-value"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(genuine)
	f.Add(genuine[:40])
	f.Add(append(bytes.Clone(genuine), 0))
	f.Add([]byte("IOPL"))
	f.Add([]byte{})
	want := Expect{Principal: "p", Route: "r", Slot: "s", Profile: "pr", Target: "t", CredentialID: "c", Generation: 9}
	f.Fuzz(func(t *testing.T, env []byte) {
		op, err := NewOpener(OpenerConfig{NodeID: "n1", Key: node, EdgeKeys: map[string]ed25519.PublicKey{"edge-1": edge.Public().(ed25519.PublicKey)},
			Replay: NewReplayCache(), Now: func() time.Time { return t0 }})
		if err != nil {
			t.Fatal(err)
		}
		s, err := op.Open(env, want)
		if err == nil {
			// Only a lease the Edge key signed opens (each worker process
			// issues its own genuine one, so compare content, not bytes).
			fr, _ := parseFrame(env)
			h, herr := decodeHeader(fr)
			if herr != nil || h.Binding != b || string(s.Bytes()) != "secret-value" {
				t.Fatalf("an envelope that is not a genuine lease opened: %x", env)
			}
			return
		}
		if _, ok := err.(*RefusedError); !ok {
			t.Fatalf("untyped refusal %T %v", err, err)
		}
	})
}
