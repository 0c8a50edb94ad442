package backoff

import (
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	b := New(Config{})
	b.rand = func() float64 { return 0.5 } // no jitter
	want := []time.Duration{time.Second, 1600 * time.Millisecond, 2560 * time.Millisecond}
	for i, w := range want {
		if got := b.Next(); got != w {
			t.Errorf("delay %d = %v, want %v", i, got, w)
		}
	}
	for range 20 {
		b.Next()
	}
	if got := b.Next(); got != DefaultMax {
		t.Errorf("capped delay = %v, want %v", got, DefaultMax)
	}
	b.Reset()
	if got := b.Next(); got != time.Second {
		t.Errorf("after reset = %v", got)
	}
}

func TestJitterBounds(t *testing.T) {
	for _, r := range []float64{0, 0.999} {
		b := New(Config{})
		b.rand = func() float64 { return r }
		d := b.Next()
		if d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Errorf("rand=%v: first delay %v outside 1s +-20%%", r, d)
		}
	}
}
