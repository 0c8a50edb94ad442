package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
)

// chatCalls counts the Chat Completions calls an upstream received.
func chatCalls(up *upstreamtest.Server, prefix string) int {
	n := 0
	for _, q := range up.Requests() {
		if q.API == "chat" && strings.HasPrefix(q.Prompt, prefix) {
			n++
		}
	}
	return n
}

// refuseFirst is an upstream's script that answers its first call with
// status and Retry-After, and echoes every later one; calls counts them.
func refuseFirst(calls *atomic.Int32, status int, retryAfter string) func(*upstreamtest.Request) upstreamtest.Script {
	return func(q *upstreamtest.Request) upstreamtest.Script {
		if calls.Add(1) == 1 {
			return upstreamtest.Script{Status: status, RetryAfter: retryAfter}
		}
		return upstreamtest.Echo(q)
	}
}

// TestRateLimitedProviderCools: the first provider of a route answers 429
// with Retry-After: 30. That request gets the provider's 429 (nothing is
// replayed), and for the next thirty seconds the provider has no free slot:
// the requests after it go to the route's other provider, and none reaches
// the one that said "not now".
func TestRateLimitedProviderCools(t *testing.T) {
	spareUp := upstreamtest.New(upstreamtest.Config{Models: []string{"up-model"}})
	spareURL := spareUp.Start()
	t.Cleanup(spareUp.Close)
	spare, err := oaadapter.New(oaadapter.Config{ID: "spare", BaseURL: spareURL, Models: []string{"up-model"}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r := newRig(t, rigOpts{
		hosted: []node.Hosted{{Provider: spare}},
		reply: func(q *upstreamtest.Request) upstreamtest.Script {
			if strings.HasPrefix(q.Prompt, "limited") {
				return upstreamtest.Script{Status: http.StatusTooManyRequests, RetryAfter: "30"}
			}
			return upstreamtest.Echo(q)
		},
		mutate: func(cfg *edge.Config) {
			cfg.Nodes[0].Providers = append(cfg.Nodes[0].Providers, nodes.ProviderSpec{ID: "spare", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: 8})
			cfg.Routes = append(cfg.Routes, edge.Route{Model: "pair", Targets: []edge.Target{{ProviderID: "local", Model: "up-model"}, {ProviderID: "spare", Model: "up-model"}}})
			cfg.Metrics = reg
		},
	})
	before := time.Now()
	status, hdr, body := r.post(t, apiKey, chatJSON("pair", "limited 0"))
	after := time.Now()
	if status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "30" {
		t.Fatalf("the refused request: %d Retry-After %q\n%s", status, hdr.Get("Retry-After"), body)
	}
	if local, other := gauge(t, reg, "iop_edge_provider_cooling", "provider", "local"), gauge(t, reg, "iop_edge_provider_cooling", "provider", "spare"); local != 1 || other != 0 {
		t.Fatalf("iop_edge_provider_cooling: local %v, spare %v; want 1, 0", local, other)
	}
	// The operator's view (what the Edge reports to the Hub) says what
	// cools until when: the model rate limited, not the whole provider.
	for _, p := range r.srv.Status().Nodes[0].Providers {
		until := p.CoolingModels["up-model"]
		switch {
		case !p.CoolingUntil.IsZero():
			t.Errorf("%s cools as a whole until %v, want not at all", p.ID, p.CoolingUntil)
		case p.ID == "local" && (len(p.CoolingModels) != 1 || until.Before(before.Add(30*time.Second)) || until.After(after.Add(30*time.Second))):
			t.Errorf("local's models cool %v, want up-model 30 s after the refusal (%v..%v)", p.CoolingModels, before, after)
		case p.ID != "local" && p.CoolingModels != nil:
			t.Errorf("%s's models cool %v, want none", p.ID, p.CoolingModels)
		}
	}
	for i := 1; i <= 10; i++ {
		if status, _, body := r.post(t, apiKey, chatJSON("pair", fmt.Sprint("limited ", i))); status != http.StatusOK {
			t.Fatalf("request %d while the first provider cools: %d\n%s", i, status, body)
		}
	}
	if got := chatCalls(r.upstream, "limited"); got != 1 {
		t.Fatalf("the rate-limited upstream got %d calls, want only the first", got)
	}
	if got := chatCalls(spareUp, "limited"); got != 10 {
		t.Fatalf("the other provider served %d of 10", got)
	}
	r.settled()
}

// TestRateLimitedModelCoolsAlone: a rate limit is the upstream's for one
// model (hosted APIs limit each on its own), so a 429 for one model of a
// provider leaves its other models in admission: their requests are
// served at once, not queued behind the cooldown.
func TestRateLimitedModelCoolsAlone(t *testing.T) {
	r := newRig(t, rigOpts{
		nodeModels:   []string{"up-model", "up-model-2"},
		queueTimeout: 300 * time.Millisecond, // a request held by the cooldown fails fast
		reply: func(q *upstreamtest.Request) upstreamtest.Script {
			if q.Model == "up-model" {
				return upstreamtest.Script{Status: http.StatusTooManyRequests, RetryAfter: "30"}
			}
			return upstreamtest.Echo(q)
		},
		mutate: func(cfg *edge.Config) {
			cfg.Nodes[0].Providers[0].Models = []string{"up-model", "up-model-2"}
			cfg.Routes = append(cfg.Routes,
				edge.Route{Model: "limited", Targets: []edge.Target{{ProviderID: "local", Model: "up-model"}}},
				edge.Route{Model: "spare", Targets: []edge.Target{{ProviderID: "local", Model: "up-model-2"}}})
		},
	})
	if status, _, body := r.post(t, apiKey, chatJSON("limited", "first")); status != http.StatusTooManyRequests {
		t.Fatalf("the rate-limited model: %d\n%s", status, body)
	}
	for i := range 5 {
		if status, _, body := r.post(t, apiKey, chatJSON("spare", fmt.Sprint("other ", i))); status != http.StatusOK {
			t.Fatalf("request %d to the provider's other model: %d\n%s", i, status, body)
		}
	}
	if got := chatCalls(r.upstream, "other"); got != 5 {
		t.Fatalf("the other model's upstream calls: %d, want 5", got)
	}
	// The limited model itself waits out its cooldown: within a queue
	// timeout shorter than it, it is refused as overloaded, never sent.
	if status, _, body := r.post(t, apiKey, chatJSON("limited", "second")); status != http.StatusServiceUnavailable {
		t.Fatalf("the cooling model: %d, want 503 from the queue\n%s", status, body)
	}
	if got := chatCalls(r.upstream, "second"); got != 0 {
		t.Fatalf("the cooling model was called %d times", got)
	}
	r.settled()
}

// TestQueueTimeoutSaysWhenTheCooldownEnds: a request that waited its whole
// queue timeout (2 s) for a model cooling 4 s is refused with a
// Retry-After of the time left on the cooldown (at most 2 s), not the
// queue timeout and a second (3 s); a retry after it is served.
func TestQueueTimeoutSaysWhenTheCooldownEnds(t *testing.T) {
	var calls atomic.Int32
	r := newRig(t, rigOpts{queueTimeout: 2 * time.Second, reply: refuseFirst(&calls, http.StatusTooManyRequests, "4")})
	if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "limited")); status != http.StatusTooManyRequests {
		t.Fatalf("the rate-limited request: %d\n%s", status, body)
	}
	status, hdr, body := r.post(t, apiKey, chatJSON("gpt-local", "queued"))
	if status != http.StatusServiceUnavailable {
		t.Fatalf("the request queued behind the cooldown: %d, want 503 at its queue timeout\n%s", status, body)
	}
	ra, err := strconv.Atoi(hdr.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %q, want the cooldown's 1 or 2 seconds left", hdr.Get("Retry-After"))
	}
	time.Sleep(time.Duration(ra) * time.Second)
	if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "retried")); status != http.StatusOK {
		t.Fatalf("the retry after Retry-After: %d\n%s", status, body)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the upstream got %d calls, want the refused one and the retry", n)
	}
	r.settled()
}

// TestQueueRetryAfterSkipsAGoneNode: both providers of a route cool, p1
// for 3 s and p2 for 30 s, and then p1's Node shuts down. A request
// refused at its 2 s queue timeout is told to come back after the
// timeout and a second, not when p1's cooldown ends: p1's Node is gone,
// so that end gives back no slot.
func TestQueueRetryAfterSkipsAGoneNode(t *testing.T) {
	var calls atomic.Int32
	r := newDrainRig(t, func(q *upstreamtest.Request) upstreamtest.Script {
		switch calls.Add(1) {
		case 1:
			return upstreamtest.Script{Status: http.StatusTooManyRequests, RetryAfter: "3"}
		case 2:
			return upstreamtest.Script{Status: http.StatusTooManyRequests, RetryAfter: "30"}
		}
		return upstreamtest.Echo(q)
	}, "n1", "n2")
	cfg := r.cfg
	cfg.Epoch++
	cfg.QueueTimeout = 2 * time.Second
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	// The route prefers p1; once it cools, p2 is asked.
	for _, id := range []string{"n1", "n2"} {
		if status, body, err := r.chat(false); err != nil || status != http.StatusTooManyRequests || r.served(id, false) != 1 {
			t.Fatalf("the request refused by %s: %d %v\n%s", id, status, err, body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.rt["n1"].Shutdown(ctx); err != nil {
		t.Fatalf("n1's Shutdown: %v", err)
	}
	waitUntil(t, "n1 disconnected", func() bool { n, _ := r.srv.Registry().Node("n1"); return !n.Connected })

	status, hdr, body := postChat(t, r.url, apiKey, chatJSON("m", "queued"))
	if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "3" {
		t.Fatalf("the request queued behind p2's cooldown: %d Retry-After %q, want 503 and 3 (the queue timeout and a second)\n%s",
			status, hdr.Get("Retry-After"), body)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the upstreams got %d calls, want the two refused ones", n)
	}
}

// TestOverloadedProviderCoolsAndQueues: a route's only provider answers
// 503 with Retry-After: 2 (a model still loading, say). The next request
// is not sent to it at once, to meet the same refusal: it waits in the
// queue until the cooldown ends and is then served.
func TestOverloadedProviderCoolsAndQueues(t *testing.T) {
	var calls atomic.Int32
	r := newRig(t, rigOpts{queueTimeout: 20 * time.Second, reply: refuseFirst(&calls, http.StatusServiceUnavailable, "2")})
	if status, hdr, body := r.post(t, apiKey, chatJSON("gpt-local", "loading")); status != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "2" {
		t.Fatalf("the refused request: %d Retry-After %q\n%s", status, hdr.Get("Retry-After"), body)
	}
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", r.url+"/v1/chat/completions", strings.NewReader(chatJSON("gpt-local", "after")))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	waitUntil(t, "the next request queued while the provider cools", func() bool { return r.srv.PoolStats().Queued == 1 })
	if n := calls.Load(); n != 1 {
		t.Fatalf("the upstream got %d calls while it cooled", n)
	}
	if status := <-done; status != http.StatusOK {
		t.Fatalf("the queued request: %d", status)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the upstream got %d calls, want 2", n)
	}
	r.settled()
}
