package edge

import (
	"testing"
	"time"
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
// a longer one short, an ended one lets admission re-evaluate (kick) and
// is forgotten, and nothing is kicked after close.
func TestCooldown(t *testing.T) {
	kicks := make(chan struct{}, 16)
	var c cooldown
	c.kick = func() { kicks <- struct{}{} }
	t0 := time.Now()
	if c.cooling("a") {
		t.Fatal("cooling before any refusal")
	}
	c.start("a", time.Hour, t0)
	c.start("a", time.Second, t0) // shorter: the hour stays
	if !c.coolingAt("a", t0.Add(30*time.Minute)) || c.coolingAt("a", t0.Add(time.Hour)) || c.cooling("b") {
		t.Fatal("cooldown of a: wrong span, or b cooling")
	}
	c.start("b", 20*time.Millisecond, time.Now())
	select {
	case <-kicks:
	case <-time.After(10 * time.Second):
		t.Fatal("no kick when b's cooldown ended")
	}
	if c.cooling("b") || !c.cooling("a") {
		t.Fatal("after b's end: b still cooling, or a not")
	}
	c.mu.Lock()
	n, entries := c.n.Load(), len(c.until)
	c.mu.Unlock()
	if n != 1 || entries != 1 {
		t.Fatalf("after b's end: count %d, entries %d, want 1 (a)", n, entries)
	}
	c.close()
	c.start("c", time.Nanosecond, time.Now())
	time.Sleep(10 * time.Millisecond)
	select {
	case <-kicks:
		t.Fatal("kicked after close")
	default:
	}
}
