package edge

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// cooldown keeps providers that said "not now" out of admission for the
// delay they asked for. A provider whose upstream answered 429, 503 or
// 529 (rate limited, overloaded, a model still loading), or whose run
// failed as rate limited, cools: while it does, admission gives it no
// free slot, so the requests after the refused one go to the route's
// other providers or wait in the queue for it (within their queue
// timeout) instead of meeting the same refusal. The refused request
// itself is answered with the provider's refusal, as before: nothing is
// replayed. When a cooldown ends, admission re-evaluates its queue.
type cooldown struct {
	n    atomic.Int32 // entries in until: admission's check is free while 0
	kick func()       // re-evaluates admission's queue

	mu      sync.Mutex
	until   map[string]time.Time // provider id -> end of its cooldown
	timer   *time.Timer          // fires at the earliest end
	closed  bool
	running sync.WaitGroup // timer callbacks under way
}

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

// start cools provider id until now+d, or leaves a later end in place.
func (c *cooldown) start(id string, d time.Duration, now time.Time) {
	end := now.Add(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if cur, ok := c.until[id]; ok && !cur.Before(end) {
		return
	}
	if c.until == nil {
		c.until = map[string]time.Time{}
	}
	if _, ok := c.until[id]; !ok {
		c.n.Add(1)
	}
	c.until[id] = end
	c.scheduleLocked(now)
}

// cooling reports whether provider id cools now.
func (c *cooldown) cooling(id string) bool {
	if c.n.Load() == 0 {
		return false // the usual case: no clock read, no lock
	}
	return c.coolingAt(id, time.Now())
}

// endAt returns when provider id's cooldown ends, or the zero time when
// it does not cool at now.
func (c *cooldown) endAt(id string, now time.Time) time.Time {
	if c.n.Load() == 0 {
		return time.Time{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if end, ok := c.until[id]; ok && now.Before(end) {
		return end
	}
	return time.Time{}
}

// coolingAt reports whether provider id cools at now.
func (c *cooldown) coolingAt(id string, now time.Time) bool {
	return !c.endAt(id, now).IsZero()
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
	for id, end := range c.until {
		if !now.Before(end) {
			delete(c.until, id)
			c.n.Add(-1)
			ended = true
		}
	}
	c.scheduleLocked(now)
	c.mu.Unlock()
	if ended {
		c.kick()
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
