package edge

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge/pool"
)

func TestCooldownFor(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"":                              defaultCooldown,
		"0":                             defaultCooldown,
		"-5":                            defaultCooldown,
		"soon":                          defaultCooldown,
		"Wed, 21 Oct 2015 07:28:00 GMT": defaultCooldown, // a date is not read
		"1":                             time.Second,
		"7":                             7 * time.Second,
		"60":                            maxCooldown,
		"3600":                          maxCooldown,
		"99999999999999999999999":       defaultCooldown, // not an int
	} {
		if got := cooldownFor(in); got != want {
			t.Errorf("cooldownFor(%q) = %v, want %v", in, got, want)
		}
	}
}

// TestCooldown: a cooldown lasts until its end, a shorter one never cuts
// a longer one short, a model's cools that model only while a whole
// provider's cools every model of it, an ended one lets admission
// re-evaluate (kick) and is forgotten, and nothing is kicked after close.
// Watchers are told when a key begins cooling and when cooldowns end, not
// when one only lengthens.
func TestCooldown(t *testing.T) {
	kicks := make(chan struct{}, 16)
	var changes atomic.Int32
	var c cooldown
	c.kick = func() { kicks <- struct{}{} }
	c.changed = func() { changes.Add(1) }
	wantChanges := func(when string, n int32) {
		t.Helper()
		if got := changes.Load(); got != n {
			t.Fatalf("%s: %d changes reported, want %d", when, got, n)
		}
	}
	t0 := time.Now()
	if c.cooling("a", "m1") {
		t.Fatal("cooling before any refusal")
	}
	c.start(coolKey{"a", ""}, time.Hour, t0)
	c.start(coolKey{"a", ""}, time.Second, t0) // shorter: the hour stays
	wantChanges("a began cooling", 1)
	if !c.coolingAt("a", "m1", t0.Add(30*time.Minute)) || c.coolingAt("a", "m1", t0.Add(time.Hour)) || c.cooling("b", "m1") {
		t.Fatal("cooldown of a: wrong span, or b cooling")
	}
	c.start(coolKey{"b", "m1"}, time.Minute, t0)
	c.start(coolKey{"b", "m1"}, time.Hour, t0) // longer: not a change
	wantChanges("b's m1 began cooling, then lengthened", 2)
	if !c.coolingAt("b", "m1", t0) || c.coolingAt("b", "m2", t0) {
		t.Fatal("b's m1 rate limited: m1 must cool, m2 not")
	}
	whole, models := c.ends("b", t0)
	if !whole.IsZero() || len(models) != 1 || !models["m1"].Equal(t0.Add(time.Hour)) {
		t.Fatalf("b's ends: whole %v, models %v; want none and m1 in an hour", whole, models)
	}
	if whole, models := c.ends("a", t0); !whole.Equal(t0.Add(time.Hour)) || models != nil {
		t.Fatalf("a's ends: whole %v, models %v; want an hour and none", whole, models)
	}
	if !c.any("b") || c.any("c") {
		t.Fatal("any: b has a model cooling, c nothing")
	}
	c.start(coolKey{"c", "m1"}, 20*time.Millisecond, time.Now())
	select {
	case <-kicks:
	case <-time.After(10 * time.Second):
		t.Fatal("no kick when c's cooldown ended")
	}
	// The end is reported beside the kick, not before it.
	for deadline := time.Now().Add(10 * time.Second); changes.Load() < 4 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	wantChanges("c's m1 began and ended", 4)
	if c.cooling("c", "m1") || !c.cooling("a", "m1") {
		t.Fatal("after c's end: c still cooling, or a not")
	}
	c.mu.Lock()
	n, entries := c.n.Load(), len(c.until)
	c.mu.Unlock()
	if n != 2 || entries != 2 {
		t.Fatalf("after c's end: count %d, entries %d, want 2 (a, b's m1)", n, entries)
	}
	c.close()
	c.start(coolKey{"d", ""}, time.Nanosecond, time.Now())
	time.Sleep(10 * time.Millisecond)
	select {
	case <-kicks:
		t.Fatal("kicked after close")
	default:
	}
	wantChanges("after close", 4)
}

// TestQueueRetryAfter: a request refused at its queue timeout is told to
// come back after the timeout and a second, or at the end of the earliest
// cooldown among its candidates (for the route's model) when that comes
// sooner. A provider that is no candidate now does not count.
func TestQueueRetryAfter(t *testing.T) {
	// An hour ahead of the clock: no cooldown's timer fires (and drops
	// it) during the test; endAt reads each end against the time given.
	t0 := time.Now().Add(time.Hour)
	route := &Route{Model: "pair", Targets: []Target{{ProviderID: "a", Model: "m"}, {ProviderID: "b", Model: "m"}}}
	for _, tt := range []struct {
		name  string
		queue time.Duration
		cool  map[coolKey]time.Duration // from t0
		at    time.Duration             // after t0
		off   string                    // a provider of the route that is no candidate now
		want  int
	}{
		{"nothing cools", 30 * time.Second, nil, 0, "", 31},
		{"a's model cools 10.2 s", 30 * time.Second, map[coolKey]time.Duration{{"a", "m"}: 10200 * time.Millisecond}, 0, "", 11},
		{"a cools longer than the queue", 30 * time.Second, map[coolKey]time.Duration{{"a", ""}: 45 * time.Second}, 0, "", 31},
		{"the earliest of two", 30 * time.Second, map[coolKey]time.Duration{{"a", ""}: 20 * time.Second, {"b", "m"}: 5 * time.Second}, 0, "", 5},
		{"a's whole cooldown outlasts its model's", 30 * time.Second, map[coolKey]time.Duration{{"a", ""}: 20 * time.Second, {"a", "m"}: 5 * time.Second}, 0, "", 20},
		{"another model cools", 30 * time.Second, map[coolKey]time.Duration{{"a", "other"}: 5 * time.Second}, 0, "", 31},
		{"a provider off the route cools", 30 * time.Second, map[coolKey]time.Duration{{"c", ""}: 5 * time.Second}, 0, "", 31},
		{"the cooldown already ended", 30 * time.Second, map[coolKey]time.Duration{{"a", "m"}: 5 * time.Second}, 6 * time.Second, "", 31},
		{"less than a second left", 30 * time.Second, map[coolKey]time.Duration{{"a", "m"}: 5 * time.Second}, 4900 * time.Millisecond, "", 1},
		{"a short queue", 300 * time.Millisecond, map[coolKey]time.Duration{{"a", "m"}: 5 * time.Second}, 0, "", 1},
		{"a's Node is gone", 30 * time.Second, map[coolKey]time.Duration{{"a", "m"}: 5 * time.Second, {"b", ""}: 20 * time.Second}, 0, "a", 20},
		{"no candidate cools", 30 * time.Second, map[coolKey]time.Duration{{"a", "m"}: 5 * time.Second}, 0, "a", 31},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cooldown{kick: func() {}}
			defer c.close()
			for k, d := range tt.cool {
				c.start(k, d, t0)
			}
			var cands []pool.Candidate
			for i, tg := range route.Targets {
				if tg.ProviderID != tt.off {
					cands = append(cands, pool.Candidate{Target: &route.Targets[i]})
				}
			}
			if got := coolingRetryAfter(c, tt.queue, cands, t0.Add(tt.at)); got != tt.want {
				t.Errorf("Retry-After %d, want %d", got, tt.want)
			}
		})
	}
}
