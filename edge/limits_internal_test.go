package edge

import (
	"testing"
	"time"
)

// TestLimitWaitBounded: the wait a token refusal announces follows the
// deficit, and a deficit far beyond the rate is announced as the longest
// wait, never as an overflowed (negative) one.
func TestLimitWaitBounded(t *testing.T) {
	for _, c := range []struct {
		deficit   float64
		perMinute int
		want      time.Duration
	}{
		{1, 60, time.Second},
		{30, 60, 30 * time.Second},
		{1 << 40, 1, maxLimitWait},
		{1 << 62, 1, maxLimitWait},
	} {
		if got := perMinuteWait(c.deficit, c.perMinute); got != c.want {
			t.Errorf("perMinuteWait(%v, %d) = %v, want %v", c.deficit, c.perMinute, got, c.want)
		}
	}
	// Through admit: a key whose budget a huge answer overdrew.
	var l limiter
	k := &APIKey{Name: "k", TokensPerMinute: 1}
	now := time.Now()
	kl, _ := l.admit(k, now)
	kl.release()
	l.spend(k, 1<<40)
	_, r := l.admit(k, now)
	if r == nil || r.kind != "tokens" || r.retry != maxLimitWait {
		t.Fatalf("refusal %+v, want tokens with the longest wait", r)
	}
}
