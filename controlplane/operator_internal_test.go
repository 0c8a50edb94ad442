package controlplane

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestLoginRacingRemoval: a sign-in that races a reload removing its
// operator leaves no session behind. The token was checked, then the
// session added, each under the lock but not under one hold: a reload
// between the two ended the operator's sessions before the new one came,
// and it lived out its 12 hours.
func TestLoginRacingRemoval(t *testing.T) {
	const aliceToken, bobToken = "alice-token-0123456789abcdef0123", "bob-token-0123456789abcdef012345"
	alice := Operator{Name: "alice", TokenHash: HashToken(aliceToken)}
	bob := Operator{Name: "bob", TokenHash: HashToken(bobToken)}
	for trial := range 200 {
		o := newOperators([]Operator{alice, bob}, false)
		signingIn := make(chan struct{})
		var removed atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			// Sign in until the removal, and a few times after.
			for i := 0; i < 5 || !removed.Load(); i++ {
				o.login(bobToken)
				if i == 0 {
					close(signingIn)
				}
			}
		})
		wg.Go(func() {
			<-signingIn
			o.setList([]Operator{alice})
			removed.Store(true)
		})
		wg.Wait()
		o.mu.Lock()
		for _, s := range o.sessions {
			if s.name == "bob" {
				o.mu.Unlock()
				t.Fatalf("trial %d: a session of bob, removed, outlived the reload", trial)
			}
		}
		o.mu.Unlock()
		if _, _, ok := o.login(bobToken); ok {
			t.Fatalf("trial %d: bob signed in after his removal", trial)
		}
	}
}
