package edge

import (
	"testing"
	"time"

	"github.com/iop-dev/iop/edge/pool"
)

// TestAgingStepInEffect: a zero AgingStep is derived from the keys'
// priorities and the longest a request may wait, so that the lowest class
// reaches the highest in half that wait; a set one is kept; and the
// Server's pool follows a reload.
func TestAgingStepInEffect(t *testing.T) {
	keys := func(prios ...int) []APIKey {
		var out []APIKey
		for i, p := range prios {
			out = append(out, APIKey{Name: string(rune('a' + i)), Priority: p})
		}
		return out
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want time.Duration
	}{
		{"no keys", Config{}, pool.DefaultAgingStep},
		{"one class", Config{APIKeys: keys(5, 5)}, pool.DefaultAgingStep},
		{"ten classes, default queue timeout", Config{APIKeys: keys(10, 0, 3)}, 1500 * time.Millisecond},
		{"the request timeout is shorter", Config{APIKeys: keys(0, 10), RequestTimeout: 10 * time.Second}, 500 * time.Millisecond},
		{"the whole span", Config{APIKeys: keys(0, 100), QueueTimeout: time.Minute}, 300 * time.Millisecond},
		{"capped at the default", Config{APIKeys: keys(1, 2), QueueTimeout: time.Hour, RequestTimeout: time.Hour}, pool.DefaultAgingStep},
		{"set", Config{APIKeys: keys(0, 10), AgingStep: time.Second}, time.Second},
		{"never zero", Config{APIKeys: keys(0, 100), QueueTimeout: 100}, 1},
	} {
		if got := c.cfg.EffectiveAgingStep(); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		if c.cfg.AgingStep == 0 {
			if lo, hi := c.cfg.prioritySpan(); hi >= 0 {
				span := time.Duration(c.cfg.APIKeys[hi].Priority - c.cfg.APIKeys[lo].Priority)
				if climb := span * c.cfg.EffectiveAgingStep(); climb >= c.cfg.queueWait() && c.cfg.queueWait() >= 2*span {
					t.Errorf("%s: the span is climbed in %v, the queue wait is %v", c.name, climb, c.cfg.queueWait())
				}
			}
		}
	}

	s, err := New(Config{Epoch: 1, APIKeys: []APIKey{
		{Name: "batch", Hash: HashKey("sk-batch-0123456789abcdef012345"), Models: []string{"*"}},
		{Name: "interactive", Hash: HashKey("sk-inter-0123456789abcdef012345"), Models: []string{"*"}, Priority: 10},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.pool.AgingStep != 1500*time.Millisecond {
		t.Fatalf("pool aging step %v after New, want 1.5s", s.pool.AgingStep)
	}
	cfg := Config{Epoch: 1, QueueTimeout: 4 * time.Second, APIKeys: []APIKey{
		{Name: "batch", Hash: HashKey("sk-batch-0123456789abcdef012345"), Models: []string{"*"}},
		{Name: "interactive", Hash: HashKey("sk-inter-0123456789abcdef012345"), Models: []string{"*"}, Priority: 20},
	}}
	if err := s.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if s.pool.AgingStep != 100*time.Millisecond {
		t.Fatalf("pool aging step %v after a reload, want 100ms", s.pool.AgingStep)
	}
	cfg.AgingStep = 200 * time.Millisecond // 20 steps: 4 s, not below the queue timeout
	if err := s.Reload(cfg); err == nil {
		t.Fatal("an aging step too slow for the queue timeout was reloaded")
	}
	if s.pool.AgingStep != 100*time.Millisecond {
		t.Fatalf("pool aging step %v after a refused reload, want 100ms kept", s.pool.AgingStep)
	}
}
