// Package backoff computes reconnect delays the way gRPC does: exponential
// from a base delay, capped, with symmetric jitter, reset after a success.
package backoff

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults from gRPC's connection backoff.
const (
	DefaultBase       = time.Second
	DefaultMultiplier = 1.6
	DefaultJitter     = 0.2
	DefaultMax        = 120 * time.Second
	// MaxMax bounds Max: a day between attempts is already no retry.
	MaxMax = 24 * time.Hour
)

// Config is a backoff policy. Zero fields take the defaults above.
type Config struct {
	Base       time.Duration
	Multiplier float64
	Jitter     float64
	Max        time.Duration
}

// Backoff yields successive delays. It is not safe for concurrent use.
type Backoff struct {
	cfg     Config
	retries int
	rand    func() float64
}

// Validate reports a field the delays cannot be computed from: a negative
// duration, a Multiplier below 1 or not finite, a Jitter outside [0, 1)
// (NaN included), or a Max above MaxMax. A Base above Max is allowed:
// every delay is then Max.
func (c Config) Validate() error {
	switch {
	case c.Base < 0 || c.Max < 0:
		return errors.New("backoff: Base and Max must not be negative")
	case c.Multiplier != 0 && !(c.Multiplier >= 1 && !math.IsInf(c.Multiplier, 1)):
		return fmt.Errorf("backoff: Multiplier %v is not a finite number of at least 1", c.Multiplier)
	case !(c.Jitter >= 0 && c.Jitter < 1):
		return fmt.Errorf("backoff: Jitter %v is outside [0, 1)", c.Jitter)
	case c.Max > MaxMax:
		return fmt.Errorf("backoff: Max %v is above %v", c.Max, MaxMax)
	}
	return nil
}

// New returns a Backoff for cfg. A field Validate refuses takes its
// default (a Max above MaxMax is MaxMax), so every delay is positive and
// at most Max plus its jitter.
func New(cfg Config) *Backoff {
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	cfg.Max = min(cfg.Max, MaxMax)
	if cfg.Base <= 0 {
		cfg.Base = DefaultBase
	}
	cfg.Base = min(cfg.Base, cfg.Max)
	if !(cfg.Multiplier >= 1) || math.IsInf(cfg.Multiplier, 1) {
		cfg.Multiplier = DefaultMultiplier
	}
	if !(cfg.Jitter > 0 && cfg.Jitter < 1) {
		cfg.Jitter = DefaultJitter
	}
	return &Backoff{cfg: cfg, rand: rand.Float64}
}

// Next returns the delay before the next attempt and advances.
func (b *Backoff) Next() time.Duration {
	d := float64(b.cfg.Base)
	for range b.retries {
		d *= b.cfg.Multiplier
		if d >= float64(b.cfg.Max) {
			d = float64(b.cfg.Max)
			break
		}
	}
	b.retries++
	d *= 1 + b.cfg.Jitter*(2*b.rand()-1)
	return time.Duration(min(d, float64(b.cfg.Max)*(1+b.cfg.Jitter)))
}

// Soon returns the delay before a retry the peer said should succeed
// shortly: d (at most the policy's Max), with the policy's jitter. It does
// not advance: a later Next goes on from where the backoff was.
func (b *Backoff) Soon(d time.Duration) time.Duration {
	f := float64(min(d, b.cfg.Max))
	return time.Duration(f * (1 + b.cfg.Jitter*(2*b.rand()-1)))
}

// Reset starts over from the base delay (after a ready handshake).
func (b *Backoff) Reset() { b.retries = 0 }
