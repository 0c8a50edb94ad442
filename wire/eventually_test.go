package wire

import (
	"testing"
	"time"
)

// eventually polls cond until it holds. It waits on a state change, not on a
// duration: the bound only turns a hang into a failure.
func eventually(t testing.TB, cond func() bool, format string, args func() []any) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args()...)
		}
		time.Sleep(time.Millisecond)
	}
}
