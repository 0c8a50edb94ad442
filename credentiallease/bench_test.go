package credentiallease

import (
	"crypto/ed25519"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkIssue: one lease, as the Edge issues it per dispatch.
func BenchmarkIssue(b *testing.B) {
	is, _ := NewIssuer("k", seeded(1), time.Minute)
	node, _ := GenerateNodeKey()
	bind := Binding{Principal: "alice", Route: "r", Slot: "s", Profile: "p", Target: "t", NodeID: "n1", NodeKeyID: node.ID(), CredentialID: "c", CredentialRevision: 1, Generation: 1}
	pub := node.PublicKey()
	secret := []byte("sk-0123456789abcdef0123456789")
	for b.Loop() {
		if _, err := is.Issue(bind, pub, secret); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen compares opening with the in-memory replay cache and with
// the replay file (one write and fsync per lease), side by side.
func BenchmarkOpen(b *testing.B) {
	for _, mode := range []string{"memory", "file"} {
		b.Run(mode, func(b *testing.B) {
			edge := seeded(1)
			is, _ := NewIssuer("k", edge, time.Minute)
			node, _ := GenerateNodeKey()
			rc := NewReplayCache()
			if mode == "file" {
				var err error
				if rc, err = OpenReplayFile(filepath.Join(b.TempDir(), "replay")); err != nil {
					b.Fatal(err)
				}
				defer rc.Close()
			}
			op, err := NewOpener(OpenerConfig{NodeID: "n1", Key: node, EdgeKeys: map[string]ed25519.PublicKey{"k": edge.Public().(ed25519.PublicKey)}, Replay: rc})
			if err != nil {
				b.Fatal(err)
			}
			bind := Binding{Principal: "alice", Route: "r", Slot: "s", Profile: "p", Target: "t", NodeID: "n1", NodeKeyID: node.ID(), CredentialID: "c", CredentialRevision: 1, Generation: 1}
			want := Expect{Principal: "alice", Route: "r", Slot: "s", Profile: "p", Target: "t", CredentialID: "c", Generation: 1}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				env, err := is.Issue(bind, node.PublicKey(), []byte("sk-0123456789abcdef0123456789"))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				s, err := op.Open(env, want)
				if err != nil {
					b.Fatal(err)
				}
				s.Clear()
			}
		})
	}
}
