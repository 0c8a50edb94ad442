package pool

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAdmissionUnderQueue measures a grant (Acquire through Release)
// while a queue of the given depth waits on one provider of capacity 8:
// what admission costs the Edge when it is already overloaded.
func BenchmarkAdmissionUnderQueue(b *testing.B) {
	for _, queued := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			p := New()
			defer p.Close()
			cands := []Candidate{{Key: Key{NodeID: "n", ProviderID: "p"}, Generation: 1, Capacity: 8}}
			req := Request{Candidates: func() []Candidate { return cands }, Timeout: time.Hour}
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for range 8 + queued {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						l, err := p.Acquire(context.Background(), req)
						if err != nil {
							b.Error(err)
							return
						}
						l.Release()
					}
				})
			}
			wg.Wait()
		})
	}
}
