package faulttest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire"
)

func streamScript(chunks int, delay time.Duration) func(*upstreamtest.Request) upstreamtest.Script {
	return func(r *upstreamtest.Request) upstreamtest.Script {
		text := make([]string, chunks)
		for i := range text {
			text[i] = fmt.Sprintf("chunk-%d ", i)
		}
		return upstreamtest.Script{Text: text, ChunkDelay: delay}
	}
}

// TestHeartbeatPause: the Node's connection is paused past the heartbeat
// wait. Both sides close it with heartbeat_timeout, the Edge fences it
// (every stream on it ends with an error event), the Node reconnects and
// new requests succeed.
func TestHeartbeatPause(t *testing.T) {
	hb := &wire.HeartbeatProfile{Interval: 100 * time.Millisecond, Timeout: 300 * time.Millisecond}
	r := newRig(t, rigOpts{reply: streamScript(400, 5*time.Millisecond), heartbeat: hb})
	r.startNode()
	sub := r.srv.Registry().Subscribe()
	defer sub.Close()
	before, _ := r.srv.Registry().Current("n1")

	var tally Tally
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			tally.Add(Chat(ctx, r.client, r.url, apiKey, "m", fmt.Sprint("paused ", i), true, 0))
		})
	}
	waitUntil(t, "the streams running", func() bool { return r.inFlight() == 20 })
	r.proxy.Pause()
	// The Edge fences the connection for a heartbeat timeout.
	var reason string
	for reason == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		ev, err := sub.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("no disconnect event: %v", err)
		}
		if ev.Kind == nodes.EventDisconnected && ev.Generation == before {
			reason = ev.Reason
		}
	}
	if !strings.Contains(reason, "heartbeat") {
		t.Fatalf("disconnect reason %q", reason)
	}
	wg.Wait()
	r.proxy.Resume()
	waitUntil(t, "the node back on a new generation", func() bool { g, ok := r.srv.Registry().Current("n1"); return ok && g != before })
	r.waitAvailable()
	after := r.load(10, true, apiKey, prompt("after"))
	checkTally(t, "heartbeat pause", &tally)
	checkTally(t, "after the pause", after)
	if after.ByOutcome[Complete] != 10 || tally.ByOutcome[Failed]+tally.ByOutcome[Refused] != 20 {
		t.Errorf("during: %v, after: %v", tally.ByOutcome, after.ByOutcome)
	}
	leaked := r.settled()
	if leaked != 0 {
		t.Errorf("%d leases leaked", leaked)
	}
	during := tally.ByOutcome
	var merged Tally
	merged.Merge(&tally)
	merged.Merge(after)
	record(t, RowOf("connection paused past the heartbeat wait", &merged, leaked, fmt.Sprintf("reason %s; the 20 in flight: %d error events, %d error statuses; 10 after the reconnect complete",
		reason, during[Failed], during[Refused])))
}

// TestSlowReader: one client reads a byte every 100 ms while 200 other
// streams run on the same Node connection. The slow stream holds at most
// one window at the Edge and the others all complete; their throughput is
// reported against a run without the slow client.
func TestSlowReader(t *testing.T) {
	fast := streamScript(200, time.Millisecond)
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if strings.HasPrefix(q.Prompt, "slow reader") {
			// Far more than the socket buffers and the stream window hold.
			text := make([]string, 4000)
			for i := range text {
				text[i] = strings.Repeat("s", 1000)
			}
			return upstreamtest.Script{Text: text}
		}
		return fast(q)
	}})
	r.startNode()
	run := func(withSlow bool) (*Tally, time.Duration, int) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var slowDone sync.WaitGroup
		if withSlow {
			slowDone.Go(func() {
				Chat(ctx, r.client, r.url, apiKey, "m", "slow reader "+strings.Repeat("x", 2000), true, 100*time.Millisecond)
			})
			waitUntil(t, "the slow stream admitted", func() bool { return r.inFlight() == 1 })
		}
		start := time.Now()
		tally := r.load(200, true, apiKey, prompt("fast"))
		elapsed := time.Since(start)
		maxBuf := 0
		if st, ok := r.srv.Registry().SessionStats("n1"); ok {
			maxBuf = st.MaxStreamBuffered
		}
		cancel()
		slowDone.Wait()
		return tally, elapsed, maxBuf
	}
	base, baseTime, _ := run(false)
	tally, slowTime, maxBuf := run(true)
	checkTally(t, "without the slow client", base)
	checkTally(t, "with the slow client", tally)
	if tally.ByOutcome[Complete] != 200 {
		t.Fatalf("outcomes with the slow client: %v", tally.ByOutcome)
	}
	if maxBuf > wire.DefaultStreamWindow {
		t.Fatalf("a stream buffered %d bytes, above the %d window", maxBuf, wire.DefaultStreamWindow)
	}
	leaked := r.settled()
	record(t, RowOf("slow reader beside 200 streams", tally, leaked,
		fmt.Sprintf("200 streams in %v vs %v alone (%.2fx); slow stream buffered <= %d B (window %d)",
			slowTime.Round(time.Millisecond), baseTime.Round(time.Millisecond), float64(slowTime)/float64(baseTime), maxBuf, wire.DefaultStreamWindow)))
}

// TestOverload: ten times the configured capacity. The queue holds its
// bound, refusals are 503 (capacity) or 429 (a key's limit) with
// Retry-After, nothing is lost and memory stays bounded.
func TestOverload(t *testing.T) {
	r := newRig(t, rigOpts{capacity: 4, queueTimeout: 300 * time.Millisecond,
		reply: func(*upstreamtest.Request) upstreamtest.Script {
			return upstreamtest.Script{Text: []string{"ok"}, TTFT: 200 * time.Millisecond}
		}})
	r.startNode()
	heap0 := heapInuse()
	var tally Tally
	var maxQueued atomic.Int64
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				if q := int64(r.srv.PoolStats().Queued); q > maxQueued.Load() {
					maxQueued.Store(q)
				}
			}
		}
	})
	var wg sync.WaitGroup
	for round := range 5 {
		for i := range 40 {
			key := apiKey
			if i%10 == 0 {
				key = limitedKey
			}
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				res := Chat(ctx, r.client, r.url, key, "m", fmt.Sprintf("load %d %d", round, i), i%2 == 0, 0)
				if res.Outcome == Refused && res.RetryAfter == "" {
					res.Outcome, res.Detail = Lost, fmt.Sprintf("%d without Retry-After", res.Status)
				}
				tally.Add(res)
			})
		}
		wg.Wait()
	}
	close(stop)
	watch.Wait()
	checkTally(t, "overload", &tally)
	if tally.Statuses[503] == 0 || tally.Statuses[200] == 0 {
		t.Fatalf("statuses %v", tally.Statuses)
	}
	if q := maxQueued.Load(); q > 40 {
		t.Fatalf("queue depth reached %d for 40 concurrent requests", q)
	}
	leaked := r.settled()
	grew := int64(heapInuse()) - int64(heap0)
	if grew > 64<<20 {
		t.Fatalf("heap grew by %d bytes", grew)
	}
	record(t, RowOf("10x capacity offered (4 slots, 40 concurrent x5)", &tally, leaked,
		fmt.Sprintf("statuses %v; max queue %d; heap change %+d KiB", tally.Statuses, maxQueued.Load(), grew>>10)))
}

// TestUpstreamFailures: an error mid-stream, a hang before headers (only
// the hard deadline ends it), malformed JSON and malformed SSE from the
// upstream. Each request gets exactly one terminal in its API's shape.
func TestUpstreamFailures(t *testing.T) {
	r := newRig(t, rigOpts{requestTimeout: 1500 * time.Millisecond, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		switch {
		case strings.Contains(q.Prompt, "midstream"):
			return upstreamtest.Script{Text: []string{"a", "b", "c", "d", "e"}, ErrorAfter: 2}
		case strings.Contains(q.Prompt, "hang"):
			return upstreamtest.Script{HangBeforeHeaders: true}
		case strings.Contains(q.Prompt, "badjson"):
			return upstreamtest.Script{Raw: `{"choices":[{"message":`}
		case strings.Contains(q.Prompt, "badsse"):
			return upstreamtest.Script{Raw: "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {broken\n\n"}
		case strings.Contains(q.Prompt, "status500"):
			return upstreamtest.Script{Status: 500}
		}
		return upstreamtest.Echo(q)
	}})
	r.startNode()
	var all Tally
	notes := []string{}
	for _, c := range []struct {
		prompt string
		stream bool
	}{
		{"midstream", true}, {"midstream", false}, {"hang", true}, {"hang", false},
		{"badjson", false}, {"badsse", true}, {"status500", true}, {"status500", false}, {"fine", true},
	} {
		tally := r.load(5, c.stream, apiKey, prompt(c.prompt))
		checkTally(t, c.prompt, tally)
		notes = append(notes, fmt.Sprintf("%s/%v: %v", c.prompt, map[bool]string{true: "stream", false: "json"}[c.stream], tally.Statuses))
		all.Merge(tally)
		if c.prompt == "hang" && tally.ByOutcome[Complete] != 0 {
			t.Fatalf("a hung upstream produced an answer")
		}
	}
	leaked := r.settled()
	if leaked != 0 {
		t.Fatalf("%d leases leaked", leaked)
	}
	record(t, RowOf("upstream failures (mid-stream, hang, bad JSON/SSE, 500)", &all, leaked, strings.Join(notes, "; ")))
}

// TestConnectionFaults: the Node's connection reset (RST) or half-closed
// under load, and added latency: every stream ends with one terminal, the
// Node reconnects, leases come back.
func TestConnectionFaults(t *testing.T) {
	for _, fault := range []string{"reset", "half-close", "latency"} {
		t.Run(fault, func(t *testing.T) {
			r := newRig(t, rigOpts{reply: streamScript(300, 5*time.Millisecond)})
			r.startNode()
			before, _ := r.srv.Registry().Current("n1")
			var tally Tally
			var wg sync.WaitGroup
			for i := range 30 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
					defer cancel()
					tally.Add(Chat(ctx, r.client, r.url, apiKey, "m", fmt.Sprint(fault, " ", i), true, 0))
				})
			}
			waitUntil(t, "the streams running", func() bool { return r.inFlight() == 30 })
			switch fault {
			case "reset":
				r.proxy.Reset()
			case "half-close":
				r.proxy.HalfClose()
			case "latency":
				r.proxy.SetDelay(2 * time.Millisecond)
			}
			wg.Wait()
			r.proxy.SetDelay(0)
			checkTally(t, fault, &tally)
			if fault != "latency" {
				waitUntil(t, "the node back", func() bool { g, ok := r.srv.Registry().Current("n1"); return ok && g != before })
			}
			r.waitAvailable()
			after := r.load(10, true, apiKey, prompt("after "+fault))
			checkTally(t, "after "+fault, after)
			leaked := r.settled()
			if leaked != 0 || after.ByOutcome[Complete] != 10 {
				t.Fatalf("leaked %d, after %v", leaked, after.ByOutcome)
			}
			var merged Tally
			merged.Merge(&tally)
			merged.Merge(after)
			record(t, RowOf("node connection "+fault+" during 30 streams", &merged, leaked,
				fmt.Sprintf("during: %v; 10/10 after", tally.ByOutcome)))
		})
	}
}

// TestAnthropicClientFaults: an Anthropic Messages client in front of a
// Chat Completions upstream (the translated path) through the same
// failures, and a Node connection reset mid-stream: one terminal each, in
// Anthropic's shape.
func TestAnthropicClientFaults(t *testing.T) {
	r := newRig(t, rigOpts{requestTimeout: 1500 * time.Millisecond, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		switch {
		case strings.Contains(q.Prompt, "midstream"):
			return upstreamtest.Script{Text: []string{"a", "b", "c", "d"}, ErrorAfter: 2}
		case strings.Contains(q.Prompt, "hang"):
			return upstreamtest.Script{HangBeforeHeaders: true}
		case strings.Contains(q.Prompt, "badsse"):
			return upstreamtest.Script{Raw: "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {broken\n\n"}
		case strings.Contains(q.Prompt, "badjson"):
			return upstreamtest.Script{Raw: `{"choices":[`}
		case strings.Contains(q.Prompt, "long"):
			text := make([]string, 300)
			for i := range text {
				text[i] = "t "
			}
			return upstreamtest.Script{Text: text, ChunkDelay: 5 * time.Millisecond}
		}
		return upstreamtest.Echo(q)
	}})
	r.startNode()
	var all Tally
	var notes []string
	run := func(name string, n int, stream bool, during func()) {
		var tally Tally
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				tally.Add(Messages(ctx, r.client, r.url, apiKey, "m", fmt.Sprintf("%s %d", name, i), stream))
			})
		}
		if during != nil {
			during()
		}
		wg.Wait()
		checkTally(t, "anthropic "+name, &tally)
		notes = append(notes, fmt.Sprintf("%s/%v: %v", name, map[bool]string{true: "stream", false: "json"}[stream], tally.ByOutcome))
		all.Merge(&tally)
	}
	for _, c := range []struct {
		name   string
		stream bool
	}{{"fine", true}, {"fine", false}, {"midstream", true}, {"midstream", false}, {"hang", true}, {"hang", false}, {"badsse", true}, {"badjson", false}} {
		run(c.name, 5, c.stream, nil)
	}
	before, _ := r.srv.Registry().Current("n1")
	run("long", 10, true, func() {
		waitUntil(t, "the streams running", func() bool { return r.inFlight() == 10 })
		r.proxy.Reset()
	})
	waitUntil(t, "the node back", func() bool { g, ok := r.srv.Registry().Current("n1"); return ok && g != before })
	leaked := r.settled()
	if leaked != 0 {
		t.Fatalf("%d leases leaked", leaked)
	}
	record(t, RowOf("Anthropic client, translated path: failures and a reset", &all, leaked, strings.Join(notes, "; ")))
}

// TestUpstreamDied: the first of a route's two providers (first free
// wins, so it takes every request) loses its upstream process: its port
// refuses connections. The Node checks that provider after its first
// failed call instead of at its next health round (a minute here, so
// only that check can find it) and reports it unhealthy; from then on
// the Edge sends everything to the second provider. When the upstream is
// back on its address, the recheck of an unhealthy provider (each 500 ms
// here) restores the first, and it takes the work again.
func TestUpstreamDied(t *testing.T) {
	const model = "up-model"
	upA := upstreamtest.New(upstreamtest.Config{Models: []string{model}})
	urlA := upA.Start()
	defer upA.Close()
	upB := upstreamtest.New(upstreamtest.Config{Models: []string{model}})
	urlB := upB.Start()
	defer upB.Close()
	a, _ := oaadapter.New(oaadapter.Config{ID: "a", BaseURL: urlA, Models: []string{model}})
	b, _ := oaadapter.New(oaadapter.Config{ID: "b", BaseURL: urlB, Models: []string{model}})
	spec := func(id string) nodes.ProviderSpec {
		return nodes.ProviderSpec{ID: id, Adapter: "openai", Category: execution.CategoryLocal, Models: []string{model}, Capacity: 8}
	}
	srv, err := edge.New(edge.Config{Epoch: 1,
		Nodes:   []nodes.Record{{ID: "n1", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{spec("a"), spec("b")}}},
		APIKeys: []edge.APIKey{{Name: "load", Hash: edge.HashKey(apiKey), Models: []string{"*"}}},
		Routes:  []edge.Route{{Model: "m", Targets: []edge.Target{{ProviderID: "a", Model: model}, {ProviderID: "b", Model: model}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	defer wg.Wait()
	defer srv.Close()
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	rt, err := node.New(node.Config{EdgeAddr: nodeLn.Addr().String(), NodeID: "n1", Token: nodeToken,
		Providers: []node.Hosted{{Provider: a}, {Provider: b}}, HealthInterval: time.Minute, UnhealthyInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	nodeDone := make(chan struct{})
	go func() { defer close(nodeDone); rt.Run(ctx) }()
	defer func() { cancel(); <-nodeDone }()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	reg := srv.Registry()
	available := func(id string) bool { _, ok := reg.Available("n1", id); return ok }
	waitUntil(t, "both providers available", func() bool { return available("a") && available("b") })

	var all Tally
	loader := &rig{t: t, url: "http://" + apiLn.Addr().String(), client: client}
	batch := func(n int, what string) *Tally { // eight at a time, streamed and not in turn
		var tally Tally
		for k := range n / 8 {
			tally.Merge(loader.load(8, k%2 == 0, apiKey, prompt(fmt.Sprint(what, k))))
		}
		checkTally(t, what, &tally)
		all.Merge(&tally)
		return &tally
	}
	served := func(up *upstreamtest.Server) int { // chat calls; health checks list models
		n := 0
		for _, q := range up.Requests() {
			if q.API == "chat" {
				n++
			}
		}
		return n
	}

	if tally := batch(16, "before"); tally.ByOutcome[Complete] != 16 || served(upA) != 16 {
		t.Fatalf("before: %v, a served %d of 16", tally.Statuses, served(upA))
	}

	upA.Close()
	a.CloseIdleConnections() // the next call dials, and is refused
	var down Tally
	for available("a") {
		if down.Requests >= 1000 {
			t.Fatalf("a still admitted after %d requests to its dead upstream: %v", down.Requests, down.Statuses)
		}
		down.Merge(loader.load(1, false, apiKey, prompt(fmt.Sprint("down ", down.Requests))))
	}
	checkTally(t, "down", &down)
	all.Merge(&down)
	if down.ByOutcome[Refused] == 0 {
		t.Fatalf("a was reported unhealthy before any call failed: %v", down.Statuses)
	}
	bBefore := served(upB)
	if tally := batch(40, "after"); tally.ByOutcome[Complete] != 40 || served(upB)-bBefore != 40 {
		t.Fatalf("after a was reported: %v, b served %d of 40", tally.Statuses, served(upB)-bBefore)
	}

	ln, err := net.Listen("tcp", strings.TrimPrefix(urlA, "http://"))
	if err != nil {
		t.Fatalf("a's address cannot be served again: %v", err)
	}
	back := &http.Server{Handler: upA}
	wg.Go(func() { back.Serve(ln) })
	defer back.Close()
	waitUntil(t, "a available again", func() bool { return available("a") })
	aBefore := served(upA)
	if tally := batch(16, "back"); tally.ByOutcome[Complete] != 16 || served(upA)-aBefore != 16 {
		t.Fatalf("after a came back: %v, a served %d of 16", tally.Statuses, served(upA)-aBefore)
	}

	leaked := 0
	waitUntil(t, "leases released", func() bool {
		n, _ := reg.Node("n1")
		leaked = srv.PoolStats().Queued
		for _, p := range n.Providers {
			leaked += p.InFlight
		}
		return leaked == 0
	})
	record(t, RowOf("one of two upstreams died, came back", &all, leaked,
		fmt.Sprintf("a's upstream closed: %d request(s) failed %v before the Node reported a unhealthy (its first failed call checked it); then 40/40 served by b; a's upstream back on its address: a healthy again (rechecked each 500ms) and served 16/16",
			down.Requests, down.Statuses)))
}
