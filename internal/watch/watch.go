// Package watch is a set of callbacks told that something changed: each
// is added with a stop function, and all are called outside the set's
// lock, so that one may add or stop watchers, or take the owner's locks,
// from inside its callback.
package watch

import "sync"

// Set is a set of watchers. The zero value is ready to use.
type Set struct {
	mu   sync.Mutex
	next uint64
	fns  map[uint64]func()
}

// Add registers fn until stop is called; stop may be called more than
// once. fn is called by Notify, on Notify's goroutine, and must not
// block.
func (s *Set) Add(fn func()) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns == nil {
		s.fns = map[uint64]func(){}
	}
	s.next++
	id := s.next
	s.fns[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.fns, id)
		s.mu.Unlock()
	}
}

// Notify calls every registered fn, outside the set's lock. A watcher
// added while it runs may or may not be called this time.
func (s *Set) Notify() {
	s.mu.Lock()
	fns := make([]func(), 0, len(s.fns))
	for _, fn := range s.fns {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
