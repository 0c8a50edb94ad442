// Package feed is the subscriber side of an event fan-out: a bounded
// buffer per subscriber that never blocks the publisher. A subscriber that
// falls behind loses its buffer and is told once to resync from a fresh
// view; events published while that resync is pending are dropped too
// (the view covers them).
package feed

import (
	"context"
	"sync"
)

// Sub is one subscriber's buffer.
type Sub[E any] struct {
	size      int
	errResync error
	errClosed error
	wake      chan struct{}

	mu     sync.Mutex
	buf    []E
	resync bool
	closed bool
}

// NewSub returns a buffer of size events. Next and Poll report a resync
// with errResync and the end with errClosed, so each publisher keeps its
// own error values.
func NewSub[E any](size int, errResync, errClosed error) *Sub[E] {
	return &Sub[E]{size: size, errResync: errResync, errClosed: errClosed, wake: make(chan struct{}, 1)}
}

// Push delivers e, or marks a resync when the buffer is full. It never
// blocks.
func (s *Sub[E]) Push(e E) {
	s.mu.Lock()
	if !s.closed {
		if len(s.buf) >= s.size {
			clear(s.buf)
			s.buf = s.buf[:0]
			s.resync = true
		} else if !s.resync {
			s.buf = append(s.buf, e)
		}
	}
	s.mu.Unlock()
	s.signal()
}

// Shut ends the subscription: Next returns errClosed once the buffer is
// drained.
func (s *Sub[E]) Shut() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

func (s *Sub[E]) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Poll returns the next event if one is waiting; ok is false when none is
// (err is then nil).
func (s *Sub[E]) Poll() (e E, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.resync:
		s.resync = false
		return e, false, s.errResync
	case len(s.buf) > 0:
		e = s.buf[0]
		var zero E
		s.buf[0] = zero
		s.buf = s.buf[1:]
		if len(s.buf) == 0 {
			s.buf = nil
		}
		return e, true, nil
	case s.closed:
		return e, false, s.errClosed
	}
	return e, false, nil
}

// Next returns the next event, waiting until one arrives or ctx ends. It
// returns errResync once after events were dropped, and errClosed after
// Shut.
func (s *Sub[E]) Next(ctx context.Context) (E, error) {
	for {
		e, ok, err := s.Poll()
		if ok || err != nil {
			return e, err
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			var zero E
			return zero, ctx.Err()
		}
	}
}
