package edge

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestChildrenMakesEachOnce: concurrent first uses of a key make its
// child once, and every caller gets that one.
func TestChildrenMakesEachOnce(t *testing.T) {
	var made atomic.Int64
	c := children[routeSeries, *int]{newChild: func(routeSeries) *int {
		made.Add(1)
		return new(int)
	}}
	keys := []routeSeries{{"a", apiChat}, {"a", apiMessages}, {"b", apiChat}}
	got := make([][]*int, len(keys))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
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
