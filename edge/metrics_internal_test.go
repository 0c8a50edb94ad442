package edge

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestChildrenMakesEachOnce: concurrent first uses of a key make its
// child once, and every caller gets that one. The first make waits until
// every caller has started and has had time to find the key missing and
// queue for the lock, so a get that did not look again under the lock
// would make the child again.
func TestChildrenMakesEachOnce(t *testing.T) {
	const callers = 16
	var started sync.WaitGroup
	started.Add(callers)
	var made atomic.Int64
	c := children[routeSeries, *int]{newChild: func(routeSeries) *int {
		if made.Add(1) == 1 {
			started.Wait()
			time.Sleep(20 * time.Millisecond)
		}
		return new(int)
	}}
	keys := []routeSeries{{"a", apiChat}, {"a", apiMessages}, {"b", apiChat}}
	got := make([][]*int, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			started.Done()
			for i, k := range keys {
				v := c.get(k)
				mu.Lock()
				got[i] = append(got[i], v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := made.Load(); n != int64(len(keys)) {
		t.Fatalf("made %d children for %d keys", n, len(keys))
	}
	for i, vs := range got {
		for _, v := range vs {
			if v != vs[0] {
				t.Fatalf("key %v: callers got different children", keys[i])
			}
		}
	}
}
