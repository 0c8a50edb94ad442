package watch

import "testing"

// TestSet: every watcher added is called by each Notify until its stop,
// a stop called twice does no harm, and a callback may stop watchers and
// add others (Notify holds no lock while it calls them).
func TestSet(t *testing.T) {
	var s Set
	s.Notify() // an empty set
	calls := map[string]int{}
	stopA := s.Add(func() { calls["a"]++ })
	var stopB func()
	stopB = s.Add(func() {
		calls["b"]++
		stopB()                        // stops itself from inside its call
		s.Add(func() { calls["c"]++ }) // and adds another
	})
	s.Notify()
	s.Notify()
	stopA()
	stopA()
	s.Notify()
	if calls["a"] != 2 || calls["b"] != 1 || calls["c"] != 2 {
		t.Fatalf("calls %v, want a 2, b 1, c 2", calls)
	}
}
