package edge

import (
	"testing"
	"time"

	"github.com/iop-dev/iop/internal/sse"
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

// TestLimiterPrune: a reload forgets the limits of keys it no longer
// holds, keeps a retired key's entry while its requests are in flight (so
// a key configured again counts those against its concurrency), and
// keeps every configured key's budget as it was.
func TestLimiterPrune(t *testing.T) {
	var l limiter
	now := time.Now()
	kept := &APIKey{Name: "kept", RequestsPerMinute: 2}
	busy := &APIKey{Name: "busy", MaxConcurrent: 1}
	gone := &APIKey{Name: "gone", RequestsPerMinute: 1}
	for _, k := range []*APIKey{kept, gone} {
		kl, r := l.admit(k, now)
		if r != nil {
			t.Fatalf("%s refused: %+v", k.Name, r)
		}
		kl.release()
	}
	inflight, r := l.admit(busy, now)
	if r != nil {
		t.Fatalf("busy refused: %+v", r)
	}
	l.prune(func(name string) bool { return name == "kept" })
	if _, ok := l.keys["gone"]; ok {
		t.Error("a retired idle key's limits stayed")
	}
	if _, r := l.admit(busy, now); r == nil || r.kind != "concurrent" {
		t.Fatalf("busy again while in flight: refusal %+v, want concurrent", r)
	}
	inflight.release()
	if _, r := l.admit(kept, now); r != nil {
		t.Fatalf("kept: second request refused: %+v", r)
	}
	if _, r := l.admit(kept, now); r == nil || r.kind != "requests" {
		t.Fatalf("kept: third request in the minute: refusal %+v, want requests (its budget survived the prune)", r)
	}
	l.prune(func(string) bool { return false })
	if len(l.keys) != 1 {
		t.Fatalf("%d entries after pruning everything, want 1 (kept has a request in flight)", len(l.keys))
	}
}

// TestDeltaEvent: a stream passed through is estimated at a token per
// delta event, whatever its API names them, and at a token per event in a
// stream that names none; bookkeeping events and [DONE] count nothing.
func TestDeltaEvent(t *testing.T) {
	for _, c := range []struct {
		typ, data string
		want      bool
	}{
		{"", `{"choices":[{"delta":{"content":"a"}}]}`, true},
		{"", "[DONE]", false},
		{"content_block_delta", `{"type":"content_block_delta"}`, true},
		{"message_start", `{"type":"message_start"}`, false},
		{"content_block_start", `{}`, false},
		{"message_delta", `{"type":"message_delta"}`, false},
		{"ping", `{"type":"ping"}`, false},
		{"response.output_text.delta", `{}`, true},
		{"response.function_call_arguments.delta", `{}`, true},
		{"response.created", `{}`, false},
		{"response.output_text.done", `{}`, false},
	} {
		if got := deltaEvent(sse.Event{Type: c.typ, Data: []byte(c.data)}); got != c.want {
			t.Errorf("%q %s: %v, want %v", c.typ, c.data, got, c.want)
		}
	}
}

// TestLimitAddedByReload: a per-minute limit that a reload adds to a key
// already in use starts with its whole budget, as a key's first limits
// do, whatever the key did before; one that a reload changes keeps what
// is left of it (within the new rate); one removed and added again starts
// whole again.
func TestLimitAddedByReload(t *testing.T) {
	var l limiter
	t0 := time.Now()
	take := func(k *APIKey, at time.Duration) *limitRefusal {
		t.Helper()
		kl, r := l.admit(k, t0.Add(at))
		if r == nil {
			kl.release()
		}
		return r
	}
	open := &APIKey{Name: "k"}
	for i := range 5 {
		if r := take(open, time.Duration(i)*time.Millisecond); r != nil {
			t.Fatalf("a key without limits refused: %+v", r)
		}
	}
	l.spend(open, 1000) // no token limit: nothing is booked against one added later

	// A second later, a reload gives it 3 requests and 100 tokens a
	// minute: its three requests are served at once, the fourth waits.
	limited := &APIKey{Name: "k", RequestsPerMinute: 3, TokensPerMinute: 100}
	for i := range 3 {
		if r := take(limited, time.Second); r != nil {
			t.Fatalf("request %d under the limits just added refused: %+v", i+1, r)
		}
	}
	if r := take(limited, time.Second); r == nil || r.kind != "requests" {
		t.Fatalf("a fourth request in the minute: %+v, want refused for requests", r)
	}
	l.spend(limited, 150)
	// 20 s later a third of the requests came back, but the budget
	// overdrawn by 50 has refilled only 33 tokens.
	if r := take(limited, 21*time.Second); r == nil || r.kind != "tokens" {
		t.Fatalf("after the budget was overdrawn: %+v, want refused for tokens", r)
	}

	// A changed limit keeps what is left: at 6 a minute, the one request
	// left is served and the next waits for the refill at the new rate,
	// 10 s.
	raised := &APIKey{Name: "k", RequestsPerMinute: 6}
	if r := take(raised, 21*time.Second); r != nil {
		t.Fatalf("the request left under the raised limit: %+v, want served", r)
	}
	if r := take(raised, 21*time.Second); r == nil || r.kind != "requests" {
		t.Fatalf("a raised limit refilled at once: %+v", r)
	}
	if r := take(raised, 31*time.Second); r != nil {
		t.Fatalf("10 s later at 6 a minute: %+v, want served", r)
	}

	// Removed, then added again: whole again.
	if r := take(open, 32*time.Second); r != nil {
		t.Fatalf("with the limits removed: %+v", r)
	}
	for i := range 3 {
		if r := take(limited, 32*time.Second); r != nil {
			t.Fatalf("request %d under the limits added again refused: %+v", i+1, r)
		}
	}
}
