package edge

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// cooldown keeps providers that said "not now" out of admission for the
// delay they asked for. A provider whose upstream answered 503 or 529
// (overloaded, a model still loading) cools as a whole; one that answered
// 429 (rate limited), or whose run failed as rate limited, cools for the
// model it was asked for only, since hosted APIs limit each model on its
// own. While a provider or model cools, admission gives it no free slot,
// so the requests after the refused one go to the route's other providers
// or wait in the queue for it (within their queue timeout) instead of
// meeting the same refusal. The refused request itself is answered with
// the provider's refusal, as before: nothing is replayed. When a cooldown
// ends, admission re-evaluates its queue.
type cooldown struct {
	n       atomic.Int32 // entries in until: admission's check is free while 0
	kick    func()       // re-evaluates admission's queue
	changed func()       // told when a key begins cooling or a cooldown ends; nil: no one

	mu      sync.Mutex
	until   map[coolKey]time.Time // end of each cooldown
	timer   *time.Timer           // fires at the earliest end
	closed  bool
	running sync.WaitGroup // timer callbacks under way
}

// coolKey is what cools: one model of a provider (the upstream's model
// name, from the configuration), or the whole provider (model "").
type coolKey struct{ provider, model string }

// Cooldown bounds: a refusal without Retry-After cools its provider for
// defaultCooldown; a longer Retry-After is honoured up to maxCooldown, so
// that a provider asking for an hour still gets tried again soon.
const (
	defaultCooldown = time.Second
	maxCooldown     = time.Minute
)

// cooldownFor is how long a provider's refusal cools it: its Retry-After
// in seconds (an HTTP date is not honoured: the clocks may differ), within
// [defaultCooldown, maxCooldown].
func cooldownFor(retryAfter string) time.Duration {
	n, err := strconv.Atoi(retryAfter)
	if err != nil || n < 1 {
		return defaultCooldown
	}
	if n >= int(maxCooldown/time.Second) {
		return maxCooldown
	}
	return max(time.Duration(n)*time.Second, defaultCooldown)
}

// start cools k until now+d, or leaves a later end in place. A key that
// was not cooling at now is a change (changed is called); a later end for
// one already cooling is not.
func (c *cooldown) start(k coolKey, d time.Duration, now time.Time) {
	end := now.Add(d)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	cur, ok := c.until[k]
	if ok && !cur.Before(end) {
		c.mu.Unlock()
		return
	}
	if c.until == nil {
		c.until = map[coolKey]time.Time{}
	}
	if !ok {
		c.n.Add(1)
	}
	c.until[k] = end
	c.scheduleLocked(now)
	c.mu.Unlock()
	if (!ok || !now.Before(cur)) && c.changed != nil {
		c.changed()
	}
}

// cooling reports whether provider cools now, as a whole or for model.
func (c *cooldown) cooling(provider, model string) bool {
	if c.n.Load() == 0 {
		return false // the usual case: no clock read, no lock
	}
	return c.coolingAt(provider, model, time.Now())
}

// coolingAt reports whether provider cools at now, as a whole or for
// model.
func (c *cooldown) coolingAt(provider, model string, now time.Time) bool {
	return !c.endAt(provider, model, now).IsZero()
}

// endAt returns when provider stops cooling for model (the later of its
// whole cooldown and that model's), or the zero time when it does not
// cool at now.
func (c *cooldown) endAt(provider, model string, now time.Time) time.Time {
	if c.n.Load() == 0 {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.until[coolKey{provider, ""}]
	if m := c.until[coolKey{provider, model}]; m.After(end) {
		end = m
	}
	if !now.Before(end) {
		return time.Time{}
	}
	return end
}

// ends returns provider's cooldowns at now: when the whole provider's
// ends (zero when it does not cool) and, for each model cooling on its
// own, when that one ends (nil when none does).
func (c *cooldown) ends(provider string, now time.Time) (whole time.Time, models map[string]time.Time) {
	if c.n.Load() == 0 {
		return time.Time{}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, end := range c.until {
		switch {
		case k.provider != provider || !now.Before(end):
		case k.model == "":
			whole = end
		default:
			if models == nil {
				models = map[string]time.Time{}
			}
			models[k.model] = end
		}
	}
	return whole, models
}

// any reports whether provider cools now, as a whole or for any model.
func (c *cooldown) any(provider string) bool {
	whole, models := c.ends(provider, time.Now())
	return !whole.IsZero() || len(models) > 0
}

// scheduleLocked sets the timer to the earliest end after now.
func (c *cooldown) scheduleLocked(now time.Time) {
	var next time.Time
	for _, end := range c.until {
		if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	if next.IsZero() {
		return
	}
	wait := max(next.Sub(now), 0)
	if c.timer == nil {
		c.timer = time.AfterFunc(wait, c.expire)
		return
	}
	c.timer.Reset(wait)
}

// expire drops the cooldowns that ended, schedules the next end and lets
// admission serve the requests that waited for them.
func (c *cooldown) expire() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.running.Add(1) // before close can wait: close takes mu first
	defer c.running.Done()
	now := time.Now()
	ended := false
	for k, end := range c.until {
		if !now.Before(end) {
			delete(c.until, k)
			c.n.Add(-1)
			ended = true
		}
	}
	c.scheduleLocked(now)
	c.mu.Unlock()
	if ended {
		c.kick()
		if c.changed != nil {
			c.changed()
		}
	}
}

// close stops the timer and waits for a callback under way.
func (c *cooldown) close() {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	c.running.Wait()
}
