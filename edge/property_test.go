package edge_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

// TestPropertyTerminals sends a thousand requests through the real Edge,
// Node and upstream on concurrent goroutines, each ending a random way
// (success, provider error before or during the answer, client cancel,
// hard deadline) on a raw tunnel, a translation or a normalized run of a
// real command, while the Node is fenced and reconnects, is shut down
// gracefully (a short grace, so that some work finishes and some is cut)
// and restarted, and the configuration is reloaded (capacities, and a
// tight bound on the queue every other time). After everything ended,
// every lease was released exactly once, nothing is in flight or queued,
// and every provider's capacity is the configured one.
func TestPropertyTerminals(t *testing.T) {
	if testing.Short() {
		t.Skip("long property test")
	}
	reply := func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		switch {
		case strings.HasPrefix(q.Prompt, "err"):
			sc.Status = 500
		case strings.HasPrefix(q.Prompt, "mid"):
			sc.ErrorAfter = 1
		case strings.HasPrefix(q.Prompt, "hang"):
			sc.HangBeforeHeaders = true
		case strings.HasPrefix(q.Prompt, "slow"):
			sc.ChunkDelay = 3 * time.Millisecond
		}
		return sc
	}
	var capacity atomic.Int64
	capacity.Store(3)
	r := newRig(t, withCLI(t, 0, rigOpts{capacity: 3, queueTimeout: 200 * time.Millisecond, reply: reply, mutate: func(c *edge.Config) {
		c.RequestTimeout = 400 * time.Millisecond
	}}))
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	var fences, drains, reloads atomic.Int64
	chaos.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(60 * time.Millisecond):
			}
			if i%8 == 5 {
				r.drainNode(time.Duration(i%3) * 15 * time.Millisecond)
				drains.Add(1)
				continue
			}
			if i%4 == 3 {
				if gen, ok := r.srv.Registry().Current("box"); ok {
					r.srv.Registry().Disconnect("box", gen, "chaos")
					fences.Add(1)
				}
				continue
			}
			c := 2 + i%3
			cfg := r.config(c)
			// Most reloads bound the queue tightly, by length or by
			// bytes (about eight bodies), so that requests are also
			// refused or displaced as it fills.
			cfg.MaxQueued = []int{0, 3}[i%2]
			if i%4 == 2 {
				cfg.MaxBodyBytes, cfg.MaxQueuedBytes = 1024, 1024
			}
			if err := r.srv.Reload(cfg); err != nil {
				t.Error(err)
				return
			}
			capacity.Store(int64(c))
			reloads.Add(1)
		}
	})

	kinds := []string{"ok", "ok", "slow", "err", "mid", "hang", "cancel"}
	// A tunnel, a translation, and normalized runs of commands that
	// answer, fail first, or stay silent until a cancel or the deadline.
	models := []string{"gpt-local", "via-anthropic", "gpt-local", "via-anthropic", "via-cat", "via-fail", "via-sleep"}
	var outcomes sync.Map
	count := func(k string) {
		v, _ := outcomes.LoadOrStore(k, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	const n = 1000
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			kind := kinds[rng.IntN(len(kinds))]
			model := models[rng.IntN(len(models))]
			stream := rng.IntN(2) == 0
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if kind == "cancel" {
				kind = "slow"
				d := time.Duration(rng.IntN(20)) * time.Millisecond
				go func() { time.Sleep(d); cancel() }()
			}
			body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":"%s request %d"}]}`, model, stream, kind, i)
			req, _ := http.NewRequestWithContext(ctx, "POST", r.url+"/v1/chat/completions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				count("client gave up")
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case err != nil:
				count("client gave up mid-answer")
			case resp.StatusCode == 200 && stream && strings.Contains(string(b), "[DONE]"):
				count("stream completed")
			case resp.StatusCode == 200 && stream:
				count("stream ended with an error event or cut")
			default:
				count(fmt.Sprint(resp.StatusCode))
			}
		})
	}
	wg.Wait()
	close(stop)
	chaos.Wait()
	r.settled() // every lease released, nothing in flight or queued

	st := r.srv.PoolStats()
	if st.Granted == 0 || st.Granted != st.Released || st.QueuedBytes != 0 {
		t.Fatalf("leases %+v", st)
	}
	for {
		if _, ok := r.srv.Registry().Current("box"); ok {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	want := int(capacity.Load())
	for _, n := range r.srv.Nodes() {
		for _, p := range n.Providers {
			if p.Capacity != want || p.InFlight != 0 || p.Queued != 0 {
				t.Errorf("provider %s after the run: %+v, want capacity %d and nothing in flight", p.ID, p, want)
			}
		}
	}
	outcomes.Range(func(k, v any) bool {
		t.Logf("%-40s %d", k, v.(*atomic.Int64).Load())
		return true
	})
	t.Logf("fences %d, graceful shutdowns %d, reloads %d, leases granted %d, double releases ignored %d, refused by a full queue %d",
		fences.Load(), drains.Load(), reloads.Load(), st.Granted, st.DoubleRelease, st.QueueFull)
	for _, k := range []string{"stream completed", "200", "503", "502"} {
		if _, ok := outcomes.Load(k); !ok {
			t.Errorf("no request ended as %q; the run did not cover it", k)
		}
	}
}
