package backoff

import (
	"math"
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

// TestSoon: a retry the peer expects to succeed shortly takes the asked
// delay, within Max and jittered, and leaves the schedule where it was.
func TestSoon(t *testing.T) {
	b := New(Config{Max: 5 * time.Second})
	b.rand = func() float64 { return 0.5 } // no jitter
	b.Next()
	b.Next() // the schedule is at its third delay
	if got := b.Soon(time.Second); got != time.Second {
		t.Errorf("Soon(1s) = %v", got)
	}
	if got := b.Soon(time.Minute); got != 5*time.Second {
		t.Errorf("Soon(1m) with Max 5s = %v, want the Max", got)
	}
	if got := b.Next(); got != 2560*time.Millisecond {
		t.Errorf("Next after Soon = %v, want the third delay, 2.56s", got)
	}
	for _, r := range []float64{0, 0.999} {
		b.rand = func() float64 { return r }
		if d := b.Soon(time.Second); d < 800*time.Millisecond || d > 1200*time.Millisecond {
			t.Errorf("rand=%v: Soon(1s) = %v outside 1s +-20%%", r, d)
		}
	}
}

// TestValidate: a policy the delays cannot be computed from is refused,
// and New, given one anyway, still yields delays within its bounds: a NaN
// multiplier or jitter, or a Max whose jittered value passes the Duration
// range, came out as a negative delay (a reconnect loop without pause).
func TestValidate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []Config{
		{}, {Base: time.Millisecond, Multiplier: 1, Jitter: 0.5, Max: time.Second}, {Multiplier: 2}, {Max: MaxMax}, {Base: time.Hour},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v refused: %v", c, err)
		}
	}
	bad := []Config{
		{Base: -1}, {Max: -1}, {Multiplier: 0.5}, {Multiplier: nan}, {Multiplier: inf}, {Multiplier: -1},
		{Jitter: -0.1}, {Jitter: 1}, {Jitter: nan}, {Max: MaxMax + 1}, {Base: -1 << 62},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
		b := New(c)
		for i := range 40 {
			if d := b.Next(); d <= 0 || d > 2*MaxMax {
				t.Fatalf("%+v: delay %d = %v", c, i, d)
			}
			if d := b.Soon(time.Duration(math.MaxInt64)); d <= 0 || d > 2*MaxMax {
				t.Fatalf("%+v: soon = %v", c, d)
			}
		}
	}
}
