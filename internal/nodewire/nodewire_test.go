package nodewire

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// pairs yields the given name/value pairs in order.
func pairs(kv ...string) func(func(string, string) bool) {
	return func(yield func(string, string) bool) {
		for i := 0; i+1 < len(kv); i += 2 {
			if !yield(kv[i], kv[i+1]) {
				return
			}
		}
	}
}

func TestHeaders(t *testing.T) {
	flat := func(kv ...string) []string { return kv }
	for _, tc := range []struct {
		name string
		kv   []string
		hint int
	}{
		{"empty", nil, 3},
		{"within hint", flat("A", "1", "B", "2"), 2},
		{"beyond hint", flat("A", "1", "B", "2", "C", "3", "A", "4", "D", "5"), 2},
		{"no hint", flat("A", "1", "B", "2"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := Headers(pairs(tc.kv...), tc.hint)
			var got []string
			for _, h := range hs {
				got = append(got, h.GetName(), h.GetValue())
			}
			if diff := cmp.Diff(tc.kv, got); diff != "" {
				t.Fatalf("pairs (-want +got):\n%s", diff)
			}
			// Every pair is its own message, even where arrays were shared.
			for i := range hs {
				for j := range i {
					if hs[i] == hs[j] {
						t.Fatalf("pairs %d and %d share one message", j, i)
					}
				}
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { Headers(pairs("A", "1", "B", "2", "C", "3"), 3) }); n > 2 {
		t.Fatalf("%v allocations for three pairs with hint 3, want 2", n)
	}
}
