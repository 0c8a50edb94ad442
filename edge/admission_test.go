package edge_test

import (
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/cli"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/syncbuf"
	"github.com/iop-dev/iop/node"
)

// postAnthropic sends an Anthropic Messages API request (path, x-api-key
// unless key is empty, anthropic-version) and returns status, body,
// headers.
func (r *rig) postAnthropic(t *testing.T, path, key, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest("POST", r.url+path, strings.NewReader(body))
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	req.Header.Set("anthropic-version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// post sends a chat request with a key and returns status, headers, body.
func (r *rig) post(t *testing.T, key, body string) (int, http.Header, string) {
	t.Helper()
	return postChat(t, r.url, key, body)
}

// postChat sends a chat request to the Edge at url with a key and returns
// status, headers, body.
func postChat(t *testing.T, url, key, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// do sends method path with the headers (and body, unless empty) and
// returns the answer with its body read.
func (r *rig) do(t *testing.T, method, path, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, r.url+path, rd)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// get sends a GET with the given headers and returns status and body.
func (r *rig) get(t *testing.T, path string, header map[string]string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", r.url+path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func chatJSON(model, prompt string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, prompt)
}

// gate holds upstream answers whose prompt contains "hold" until released.
type gate struct {
	mu      sync.Mutex
	release chan struct{}
	order   []string
}

func newGate() *gate { return &gate{release: make(chan struct{})} }

func (g *gate) reply(q *upstreamtest.Request) upstreamtest.Script {
	g.mu.Lock()
	g.order = append(g.order, q.Prompt)
	g.mu.Unlock()
	if strings.Contains(q.Prompt, "hold") {
		<-g.release
	}
	return upstreamtest.Echo(q)
}

func (g *gate) served() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

func TestPerKeyLimits(t *testing.T) {
	keys := func(c *edge.Config) {
		c.APIKeys = append(c.APIKeys,
			edge.APIKey{Name: "rpm", Hash: edge.HashKey("sk-rpm-0123456789abcdef01234567"), Models: []string{"*"}, RequestsPerMinute: 2},
			edge.APIKey{Name: "tpm", Hash: edge.HashKey("sk-tpm-0123456789abcdef01234567"), Models: []string{"*"}, TokensPerMinute: 20},
			edge.APIKey{Name: "conc", Hash: edge.HashKey("sk-conc-0123456789abcdef0123456"), Models: []string{"*"}, MaxConcurrent: 1},
		)
	}
	reg := prometheus.NewRegistry()
	g := newGate()
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) { keys(c); c.Metrics = reg }, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := g.reply(q)
		sc.Usage = upstreamtest.Usage{InputTokens: 10, OutputTokens: 5}
		return sc
	}})
	defer close(g.release)

	t.Run("requests per minute", func(t *testing.T) {
		for i := range 3 {
			status, h, body := r.post(t, "sk-rpm-0123456789abcdef01234567", chatJSON("gpt-local", "x"))
			want := 200
			if i == 2 {
				want = 429
			}
			if status != want {
				t.Fatalf("request %d: %d %s", i, status, body)
			}
			if status == 429 && (h.Get("Retry-After") == "" || !strings.Contains(body, "rate_limit_exceeded")) {
				t.Fatalf("429 without Retry-After or code: %v %s", h, body)
			}
		}
	})
	t.Run("tokens per minute from reported usage", func(t *testing.T) {
		// 15 tokens per answer against 20 a minute: the second request
		// may overdraw, the third waits for the budget to refill.
		for i, want := range []int{200, 200, 429} {
			if status, _, body := r.post(t, "sk-tpm-0123456789abcdef01234567", chatJSON("gpt-local", "x")); status != want {
				t.Fatalf("request %d: %d %s", i, status, body)
			}
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		done := make(chan int, 1)
		go func() {
			status, _, _ := r.post(t, "sk-conc-0123456789abcdef0123456", chatJSON("gpt-local", "hold conc"))
			done <- status
		}()
		for !contains(g.served(), "hold conc") {
			time.Sleep(time.Millisecond)
		}
		if status, _, body := r.post(t, "sk-conc-0123456789abcdef0123456", chatJSON("gpt-local", "second")); status != 429 {
			t.Fatalf("second concurrent request: %d %s", status, body)
		}
		g.release <- struct{}{}
		if s := <-done; s != 200 {
			t.Fatalf("held request %d", s)
		}
		if status, _, _ := r.post(t, "sk-conc-0123456789abcdef0123456", chatJSON("gpt-local", "after")); status != 200 {
			t.Fatalf("after the first finished: %d", status)
		}
	})
	// Each key's refusals are counted by the limit that refused, apart
	// from the requests it had served, and reach the metrics; their
	// outcome says the Edge's own limit refused, not a provider.
	want := map[string]edge.Usage{
		"rpm":  {Key: "rpm", Requests: 2, InputTokens: 20, OutputTokens: 10, Limited: edge.LimitCounts{Requests: 1}},
		"tpm":  {Key: "tpm", Requests: 2, InputTokens: 20, OutputTokens: 10, Limited: edge.LimitCounts{Tokens: 1}},
		"conc": {Key: "conc", Requests: 2, InputTokens: 20, OutputTokens: 10, Limited: edge.LimitCounts{Concurrent: 1}},
	}
	for _, u := range r.srv.Usage() {
		if w, ok := want[u.Key]; ok {
			if diff := cmp.Diff(w, u); diff != "" {
				t.Errorf("usage for %s (-want +got):\n%s", u.Key, diff)
			}
			delete(want, u.Key)
		}
	}
	if len(want) > 0 {
		t.Errorf("no usage for %v", want)
	}
	r.settled()
	_, text := r.get(t, "/metrics", nil)
	for _, line := range []string{
		`iop_edge_key_limited_total{key="rpm",limit="requests"} 1`,
		`iop_edge_key_limited_total{key="rpm",limit="tokens"} 0`,
		`iop_edge_key_limited_total{key="tpm",limit="tokens"} 1`,
		`iop_edge_key_limited_total{key="conc",limit="concurrent"} 1`,
		`iop_edge_key_requests_total{key="conc"} 2`,
		`iop_edge_requests_total{api="chat",outcome="key_limited",route="gpt-local"} 3`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
	if strings.Contains(text, `outcome="rate_limited"`) {
		t.Errorf("a key's own limit counted as a provider's 429")
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// interactive is the API key of priority 5 that newFullQueueRig adds.
const interactive = "sk-inter-0123456789abcdef012345"

// newFullQueueRig is an Edge of capacity 1 whose upstream answers through
// g, with a priority-5 key (interactive), a minute's queue timeout, its
// metrics registered, and the queue bound by bound.
func newFullQueueRig(t *testing.T, g *gate, bound func(*edge.Config)) *rig {
	return newRig(t, rigOpts{capacity: 1, queueTimeout: time.Minute, reply: g.reply, mutate: func(c *edge.Config) {
		c.APIKeys = append(c.APIKeys, edge.APIKey{Name: "interactive", Hash: edge.HashKey(interactive), Models: []string{"*"}, Priority: 5})
		c.Metrics = prometheus.NewRegistry()
		bound(c)
	}})
}

// TestQueueFull: with Config.MaxQueued requests waiting, a newcomer is
// refused at once with 503 (an Anthropic client's with 529
// overloaded_error) and Retry-After; a newcomer of a higher class takes
// the place of the last in line, which is refused instead; the requests
// left in the queue are served, the higher class first.
func TestQueueFull(t *testing.T) {
	g := newGate()
	r := newFullQueueRig(t, g, func(c *edge.Config) { c.MaxQueued = 2 })
	results := make(chan string, 4)
	var wg sync.WaitGroup
	send := func(key, prompt string) {
		wg.Go(func() {
			status, _, _ := r.post(t, key, chatJSON("gpt-local", prompt))
			results <- fmt.Sprint(prompt, " ", status)
		})
	}
	send(apiKey, "hold slot")
	waitUntil(t, "the slot held", func() bool { return contains(g.served(), "hold slot") })
	for i, prompt := range []string{"first", "second"} {
		send(apiKey, prompt)
		waitUntil(t, prompt+" queued", func() bool { return r.srv.PoolStats().Queued == i+1 })
	}

	status, hdr, body := r.post(t, apiKey, chatJSON("gpt-local", "third"))
	if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "1" || !strings.Contains(body, `"overloaded"`) {
		t.Fatalf("a newcomer to a full queue: %d Retry-After %q\n%s", status, hdr.Get("Retry-After"), body)
	}
	status, body, hdr = r.postAnthropic(t, "/v1/messages", apiKey, `{"model":"gpt-local","max_tokens":5,"messages":[{"role":"user","content":"fourth"}]}`)
	if status != 529 || hdr.Get("Retry-After") != "1" || !strings.Contains(body, `"overloaded_error"`) {
		t.Fatalf("an Anthropic client's newcomer to a full queue: %d Retry-After %q\n%s", status, hdr.Get("Retry-After"), body)
	}

	// A higher class takes the place of the last in line.
	send(interactive, "urgent")
	if got := <-results; got != "second 503" {
		t.Fatalf("got %q, want the last in line (second) refused for the higher class", got)
	}
	if s := r.srv.PoolStats(); s.Queued != 2 || s.QueueFull != 3 {
		t.Fatalf("pool %+v, want 2 queued and 3 refused as full", s)
	}
	close(g.release)
	rest := ended(&wg, results)
	if want := []string{"first 200", "hold slot 200", "urgent 200"}; !slices.Equal(rest, want) {
		t.Fatalf("results %v, want %v", rest, want)
	}
	if got := g.served(); !slices.Equal(got, []string{"hold slot", "urgent", "first"}) {
		t.Fatalf("upstream served %v, want the higher class before the one queued first", got)
	}
	r.settled()
	_, text := r.get(t, "/metrics", nil)
	for _, line := range []string{
		`iop_edge_requests_total{api="chat",outcome="queue_full",route="gpt-local"} 2`,
		`iop_edge_requests_total{api="messages",outcome="queue_full",route="gpt-local"} 1`,
		`iop_edge_queue_max 2`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// TestQueueFullBytes: the queue's bodies together stay within
// MaxQueuedBytes. A newcomer whose body would pass it is refused at once
// (503, Retry-After 1, outcome queue_full); a smaller one still queues;
// a higher class displaces as many of the last in line as its body needs.
func TestQueueFullBytes(t *testing.T) {
	g := newGate()
	r := newFullQueueRig(t, g, func(c *edge.Config) { c.MaxBodyBytes, c.MaxQueuedBytes = 4096, 4096 })
	// body is a request whose prompt is padded by size bytes.
	body := func(prompt string, size int) string {
		if size > 0 {
			prompt += " " + strings.Repeat("x", size)
		}
		return chatJSON("gpt-local", prompt)
	}
	results := make(chan string, 4)
	var wg sync.WaitGroup
	send := func(key, prompt string, size int) {
		wg.Go(func() {
			status, _, _ := r.post(t, key, body(prompt, size))
			results <- fmt.Sprint(prompt, " ", status)
		})
	}
	send(apiKey, "hold", 0)
	waitUntil(t, "the slot held", func() bool { return contains(g.served(), "hold") })
	send(apiKey, "big", 2500)
	waitUntil(t, "big queued", func() bool { return r.srv.PoolStats().Queued == 1 })

	status, hdr, _ := r.post(t, apiKey, body("too-much", 2000))
	if status != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "1" {
		t.Fatalf("a body that would pass the queue's bytes: %d Retry-After %q", status, hdr.Get("Retry-After"))
	}
	send(apiKey, "small", 500)
	waitUntil(t, "small queued", func() bool { return r.srv.PoolStats().Queued == 2 })
	want := int64(len(body("big", 2500)) + len(body("small", 500)))
	if s := r.srv.PoolStats(); s.QueuedBytes != want {
		t.Fatalf("queued bytes %d, want the two bodies' %d", s.QueuedBytes, want)
	}
	_, text := r.get(t, "/metrics", nil)
	for _, line := range []string{fmt.Sprintf("iop_edge_queue_bytes %d", want), "iop_edge_queue_max_bytes 4096"} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}

	// 3000 bytes of a higher class: small alone does not make room, so
	// big goes too.
	send(interactive, "urgent", 3000)
	var displaced []string
	for range 2 {
		displaced = append(displaced, <-results)
	}
	slices.Sort(displaced)
	if w := []string{"big 503", "small 503"}; !slices.Equal(displaced, w) {
		t.Fatalf("displaced %v, want %v", displaced, w)
	}
	close(g.release)
	rest := ended(&wg, results)
	if w := []string{"hold 200", "urgent 200"}; !slices.Equal(rest, w) {
		t.Fatalf("results %v, want %v", rest, w)
	}
	if s := r.srv.PoolStats(); s.QueueFull != 3 || s.Queued != 0 || s.QueuedBytes != 0 {
		t.Fatalf("pool %+v, want 3 refused as full and nothing left queued", s)
	}
	r.settled()
	_, text = r.get(t, "/metrics", nil)
	for _, line := range []string{`iop_edge_requests_total{api="chat",outcome="queue_full",route="gpt-local"} 3`, "iop_edge_queue_bytes 0"} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("metrics lack %s", line)
		}
	}
}

// TestMaxConcurrentCountsQueued: a key's MaxConcurrent counts its
// requests waiting for a slot too, so a key cannot take more of the queue
// than its limit: its second request is refused (429) while its first
// waits, and the queue holds one.
func TestMaxConcurrentCountsQueued(t *testing.T) {
	const conc = "sk-conc-0123456789abcdef0123456"
	g := newGate()
	r := newRig(t, rigOpts{capacity: 1, queueTimeout: time.Minute, reply: g.reply, mutate: func(c *edge.Config) {
		c.APIKeys = append(c.APIKeys, edge.APIKey{Name: "conc", Hash: edge.HashKey(conc), Models: []string{"*"}, MaxConcurrent: 1})
	}})
	var wg sync.WaitGroup
	statuses := make(chan int, 2)
	post := func(key, prompt string) {
		wg.Go(func() {
			status, _, _ := r.post(t, key, chatJSON("gpt-local", prompt))
			statuses <- status
		})
	}
	post(apiKey, "hold")
	waitUntil(t, "the slot held", func() bool { return contains(g.served(), "hold") })
	post(conc, "waiting")
	waitUntil(t, "conc's first request queued", func() bool { return r.srv.PoolStats().Queued == 1 })
	status, hdr, body := r.post(t, conc, chatJSON("gpt-local", "second"))
	if status != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(body, "concurrent") {
		t.Fatalf("conc's second request while its first waits: %d Retry-After %q\n%s", status, hdr.Get("Retry-After"), body)
	}
	if s := r.srv.PoolStats(); s.Queued != 1 {
		t.Fatalf("queued %d, want only conc's first", s.Queued)
	}
	close(g.release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("a held or queued request ended %d", s)
		}
	}
}

// ended waits for wg's requests and returns what they sent on results,
// sorted.
func ended(wg *sync.WaitGroup, results chan string) []string {
	wg.Wait()
	close(results)
	var out []string
	for res := range results {
		out = append(out, res)
	}
	slices.Sort(out)
	return out
}

// TestLeastLoadedRoute: a least_loaded route spreads held requests over
// its providers (two of the same capacity: one each), where an ordered
// one would put both on its first.
func TestLeastLoadedRoute(t *testing.T) {
	g := newGate()
	r := newRig(t, rigOpts{reply: g.reply, mutate: func(c *edge.Config) {
		c.Routes = append(c.Routes,
			edge.Route{Model: "spread", Strategy: edge.LeastLoaded, Targets: []edge.Target{{ProviderID: "local", Model: "up-model"}, {ProviderID: "chat-only", Model: "up-model"}}},
			edge.Route{Model: "fallback", Targets: []edge.Target{{ProviderID: "local", Model: "up-model"}, {ProviderID: "chat-only", Model: "up-model"}}})
	}})
	inFlight := func() map[string]int {
		out := map[string]int{}
		for _, n := range r.srv.Nodes() {
			for _, p := range n.Providers {
				if p.InFlight > 0 {
					out[p.ID] = p.InFlight
				}
			}
		}
		return out
	}
	var wg sync.WaitGroup
	hold := func(model string, n int) {
		for i := range n {
			prompt := fmt.Sprintf("hold %s %d", model, i)
			wg.Go(func() {
				if status, _, body := r.post(t, apiKey, chatJSON(model, prompt)); status != 200 {
					t.Errorf("%s: %d %s", prompt, status, body)
				}
			})
			waitUntil(t, prompt+" at the upstream", func() bool { return contains(g.served(), prompt) })
		}
	}
	hold("spread", 2)
	if got := inFlight(); got["local"] != 1 || got["chat-only"] != 1 {
		t.Errorf("least_loaded: in flight %v, want one on each provider", got)
	}
	hold("fallback", 2) // ordered: local first while it has room
	if got := inFlight(); got["local"] != 3 || got["chat-only"] != 1 {
		t.Errorf("ordered after least_loaded: in flight %v, want local 3, chat-only 1", got)
	}
	close(g.release)
	wg.Wait()
	r.settled()
}

func TestPriorityClasses(t *testing.T) {
	keys := func(c *edge.Config) {
		c.APIKeys = append(c.APIKeys,
			edge.APIKey{Name: "batch", Hash: edge.HashKey("sk-batch-0123456789abcdef012345"), Models: []string{"*"}, Priority: 0},
			edge.APIKey{Name: "interactive", Hash: edge.HashKey("sk-inter-0123456789abcdef012345"), Models: []string{"*"}, Priority: 5},
		)
	}
	g := newGate()
	r := newRig(t, rigOpts{capacity: 1, queueTimeout: time.Minute, mutate: keys, reply: g.reply})
	var wg sync.WaitGroup
	wg.Go(func() { r.post(t, apiKey, chatJSON("gpt-local", "hold slot")) })
	for !contains(g.served(), "hold slot") {
		time.Sleep(time.Millisecond)
	}
	var mu sync.Mutex
	var failed []string
	queue := func(key, prompt string) {
		before := r.srv.PoolStats().Queued
		wg.Go(func() {
			if status, _, body := r.post(t, key, chatJSON("gpt-local", prompt)); status != 200 {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s: %d %s", prompt, status, body))
				mu.Unlock()
			}
		})
		for r.srv.PoolStats().Queued == before {
			time.Sleep(time.Millisecond)
		}
	}
	queue("sk-batch-0123456789abcdef012345", "batch 1")
	queue("sk-batch-0123456789abcdef012345", "batch 2")
	queue("sk-inter-0123456789abcdef012345", "interactive")
	g.release <- struct{}{}
	wg.Wait()
	got := g.served()[1:]
	if strings.Join(got, ",") != "interactive,batch 1,batch 2" {
		t.Fatalf("served %v, want the higher class first, then FIFO (failed: %q)", got, failed)
	}
	r.settled()
}

// TestLowClassNotStarved: a queued request of the lowest class climbs,
// within its queue timeout, above the highest class's requests that come
// after it. With the keys ten classes apart and a 3 s queue timeout, the
// derived aging step is 150 ms: after 1.8 s of waiting the batch request
// ranks above a fresh interactive one. (Under a fixed 10 s step it would
// climb one class in five queue timeouts: every later interactive request
// overtook it until it was refused.)
func TestLowClassNotStarved(t *testing.T) {
	const batch, interactive = "sk-batch-0123456789abcdef012345", "sk-inter-0123456789abcdef012345"
	g := newGate()
	r := newRig(t, rigOpts{capacity: 1, queueTimeout: 3 * time.Second, reply: g.reply, mutate: func(c *edge.Config) {
		c.APIKeys = append(c.APIKeys,
			edge.APIKey{Name: "batch", Hash: edge.HashKey(batch), Models: []string{"*"}, Priority: 0},
			edge.APIKey{Name: "interactive", Hash: edge.HashKey(interactive), Models: []string{"*"}, Priority: 10})
	}})
	var wg sync.WaitGroup
	statuses := make(chan string, 3)
	post := func(key, prompt string) {
		before := r.srv.PoolStats().Queued
		wg.Go(func() {
			status, _, _ := r.post(t, key, chatJSON("gpt-local", prompt))
			statuses <- fmt.Sprintf("%s %d", prompt, status)
		})
		waitUntil(t, prompt+" queued", func() bool { return r.srv.PoolStats().Queued > before })
	}
	wg.Go(func() {
		status, _, _ := r.post(t, interactive, chatJSON("gpt-local", "hold slot"))
		statuses <- fmt.Sprintf("hold slot %d", status)
	})
	waitUntil(t, "the slot held", func() bool { return contains(g.served(), "hold slot") })
	post(batch, "batch")
	time.Sleep(1800 * time.Millisecond) // twelve steps: class 12
	post(interactive, "interactive")
	close(g.release)
	if got := ended(&wg, statuses); strings.Join(got, ",") != "batch 200,hold slot 200,interactive 200" {
		t.Fatalf("outcomes %v", got)
	}
	if got := g.served()[1:]; strings.Join(got, ",") != "batch,interactive" {
		t.Fatalf("served %v after the held slot, want the aged batch request first", got)
	}
	r.settled()
}

func TestLongContextCapacity(t *testing.T) {
	g := newGate()
	r := newRig(t, rigOpts{capacity: 4, queueTimeout: 50 * time.Millisecond, reply: g.reply, mutate: func(c *edge.Config) {
		c.Nodes[0].Providers[0].LongContextCapacity = 1
		c.LongContextTokens = 2000 // about 8 KB of request body
	}})
	long := strings.Repeat("x", 10000)
	var wg sync.WaitGroup
	wg.Go(func() { r.post(t, apiKey, chatJSON("gpt-local", "hold "+long)) })
	for len(g.served()) == 0 {
		time.Sleep(time.Millisecond)
	}
	status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "second "+long))
	if status != 503 || !strings.Contains(body, "queue timeout") {
		t.Fatalf("second long-context request: %d %s", status, body)
	}
	if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "short")); status != 200 {
		t.Fatalf("short request beside a full long-context slot: %d %s", status, body)
	}
	// A screenshot's base64 is long, but an image costs a model
	// edge.ImageTokens whatever its bytes: the request is not a long one.
	shot := `{"model":"gpt-local","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo` + strings.Repeat("A", 40000) + `"}}]}]}`
	if est := edge.EstimateTokens([]byte(shot)); est >= 2000 {
		t.Fatalf("a screenshot estimated at %d tokens", est)
	}
	if status, _, body := r.post(t, apiKey, shot); status != 200 {
		t.Fatalf("a screenshot beside a full long-context slot: %d %s", status, body)
	}
	var lc int
	for _, n := range r.srv.Nodes() {
		for _, p := range n.Providers {
			if p.ID == "local" {
				lc = p.LongContextInFlight
			}
		}
	}
	if lc != 1 {
		t.Fatalf("long-context in flight %d", lc)
	}
	close(g.release)
	wg.Wait()
	r.settled()
}

func TestQueuedRequestsFailAtOnceWhenProvidersGoOffline(t *testing.T) {
	g := newGate()
	r := newRig(t, rigOpts{capacity: 1, queueTimeout: time.Hour, reply: g.reply})
	var wg sync.WaitGroup
	wg.Go(func() { r.post(t, apiKey, chatJSON("gpt-local", "hold slot")) })
	for !contains(g.served(), "hold slot") {
		time.Sleep(time.Millisecond)
	}
	queued := make(chan string, 1)
	wg.Go(func() {
		status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "queued"))
		queued <- fmt.Sprint(status, " ", body)
	})
	for r.srv.PoolStats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	gen, _ := r.srv.Registry().Current("box")
	r.srv.Registry().Disconnect("box", gen, "test")
	got := <-queued // with a one-hour queue timeout, only re-evaluation ends it
	if !strings.HasPrefix(got, "503") || strings.Contains(got, "queue timeout") {
		t.Fatalf("queued request after its provider went offline: %s", got)
	}
	close(g.release)
	wg.Wait()
	// The Node reconnects: capacity and admission come back together.
	for {
		if _, ok := r.srv.Registry().Current("box"); ok {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "after reconnect")); status != 200 {
		t.Fatalf("after reconnect: %d %s", status, body)
	}
	r.settled()
}

func TestMetricsAndHealth(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		sc := upstreamtest.Echo(q)
		sc.Usage = upstreamtest.Usage{InputTokens: 7, OutputTokens: 3, CachedTokens: 2}
		return sc
	}, mutate: func(c *edge.Config) { c.Metrics = reg }})
	r.post(t, apiKey, chatJSON("gpt-local", "one"))
	r.post(t, apiKey, `{"model":"gpt-local","stream":true,"messages":[{"role":"user","content":"two"}]}`)
	r.post(t, "sk-wrong", chatJSON("gpt-local", "x"))
	areq, _ := http.NewRequest("POST", r.url+"/v1/messages", strings.NewReader(`{"model":"via-anthropic","max_tokens":5,"messages":[{"role":"user","content":"three"}]}`))
	areq.Header.Set("x-api-key", apiKey)
	areq.Header.Set("anthropic-version", "2023-06-01")
	aresp, err := http.DefaultClient.Do(areq)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, aresp.Body)
	aresp.Body.Close()
	if aresp.StatusCode != 200 {
		t.Fatalf("messages: %d", aresp.StatusCode)
	}
	r.settled()
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`iop_edge_requests_total{api="chat",outcome="ok",route="gpt-local"} 2`,
		`iop_edge_requests_total{api="chat",outcome="unauthenticated",route="unknown"} 1`,
		`iop_edge_requests_total{api="messages",outcome="ok",route="via-anthropic"} 1`,
		// 7 for each Chat answer (prompt_tokens, its cached_tokens among
		// them) and 9 for the Anthropic one (input_tokens and the cache
		// reads it leaves out).
		`iop_edge_tokens_total{direction="input",key="alice"} 23`,
		// Of which read from the prompt caches: 2 in each.
		`iop_edge_key_cached_input_tokens_total{key="alice"} 6`,
		`iop_edge_node_connected{node="box"} 1`,
		`iop_edge_node_draining{node="box"} 0`,
		`iop_edge_in_flight{node="box",provider="local"} 0`,
		`iop_edge_queue_depth 0`,
		`iop_edge_queue_max 1024`, // DefaultMaxQueued
		`iop_edge_key_requests_total{key="alice"} 3`,
		// Only the streamed request has a first event: a whole answer's
		// first byte is its last.
		`iop_edge_time_to_first_token_seconds_count{api="chat",route="gpt-local"} 1`,
		`iop_edge_tunnel_bytes_total{direction="downstream"}`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(text, "req_") || strings.Contains(text, apiKey) {
		t.Errorf("a request id or a key leaked into the metrics")
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200} {
		resp, _ := http.Get(r.url + path)
		if resp.StatusCode != want {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
		resp.Body.Close()
	}
	gen, _ := r.srv.Registry().Current("box")
	r.srv.Registry().Disconnect("box", gen, "test")
	resp, _ = http.Get(r.url + "/readyz")
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("readyz with no provider: %d", resp.StatusCode)
	}
}

// posts sends chat requests on goroutines of their own and collects each
// one's outcome as "prompt: status body".
type posts struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	done []string
}

func (p *posts) post(t *testing.T, r *rig, prompt string) {
	p.wg.Go(func() {
		status, _, body := r.post(t, apiKey, chatJSON("gpt-local", prompt))
		p.mu.Lock()
		p.done = append(p.done, fmt.Sprintf("%s: %d %s", prompt, status, body))
		p.mu.Unlock()
	})
}

// ended reports how many have an outcome.
func (p *posts) ended() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.done)
}

// wait waits for every request and fails the test for any but a 200.
func (p *posts) wait(t *testing.T) {
	t.Helper()
	p.wg.Wait()
	for _, d := range p.done {
		if !strings.Contains(d, ": 200 ") {
			t.Error(d)
		}
	}
}

// TestReloadBindsTheQueue: a reload that lowers a provider's capacity
// binds the requests already queued, not only the ones that arrive after
// it. A request queued under capacity 2 must not take the slot one of two
// running requests frees once the capacity is 1.
func TestReloadBindsTheQueue(t *testing.T) {
	g := newGate()
	r := newRig(t, rigOpts{capacity: 2, queueTimeout: time.Minute, reply: g.reply})
	var p posts
	p.post(t, r, "hold a")
	p.post(t, r, "hold b")
	for !contains(g.served(), "hold a") || !contains(g.served(), "hold b") {
		time.Sleep(time.Millisecond)
	}
	p.post(t, r, "queued")
	for r.srv.PoolStats().Queued != 1 {
		time.Sleep(time.Millisecond)
	}
	if err := r.srv.Reload(r.config(1)); err != nil {
		t.Fatal(err)
	}
	before := r.srv.PoolStats()
	g.release <- struct{}{} // one of the two ends; its release decides the queued one's fate
	for r.srv.PoolStats().Released == before.Released {
		time.Sleep(time.Millisecond)
	}
	if st := r.srv.PoolStats(); st.Granted != before.Granted || st.Queued != 1 {
		t.Fatalf("after one of two ended under capacity 1: %+v, want the queued request still queued", st)
	}
	g.release <- struct{}{}
	p.wait(t)
	if got := g.served(); len(got) != 3 || got[2] != "queued" {
		t.Fatalf("served %v", got)
	}
	r.settled()
}

// TestImpossibleUsageIsNotBooked: a provider that reports a negative or
// absurd token count (a bug, or a hostile upstream) has it dropped: the
// answer reaches the client, no reported count is booked against the key
// (it is charged by estimate, as an answer without usage is), and the
// token counters (which cannot go down) are left as they were.
func TestImpossibleUsageIsNotBooked(t *testing.T) {
	usages := []string{
		`{"prompt_tokens": -5, "completion_tokens": 3}`,
		`{"prompt_tokens": 4, "completion_tokens": -1}`,
		`{"prompt_tokens": 9223372036854775807, "completion_tokens": 9223372036854775807}`,
	}
	var mu sync.Mutex
	next := 0
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) { c.Metrics = prometheus.NewRegistry() }, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		mu.Lock()
		u := usages[next%len(usages)]
		next++
		mu.Unlock()
		if q.Stream {
			return upstreamtest.Script{Raw: `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
				`data: {"choices":[],"usage":` + u + "}\n\n" + "data: [DONE]\n\n"}
		}
		return upstreamtest.Script{Raw: `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":` + u + `}`}
	}})
	for range usages {
		if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "x")); status != 200 || !strings.Contains(body, `"hi"`) {
			t.Fatalf("whole answer: %d %s", status, body)
		}
		if body := r.streamChat(t, "gpt-local"); !strings.Contains(string(body), `"hi"`) || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("stream:\n%s", body)
		}
	}
	r.settled()
	if u := r.usageOf("alice"); u.Requests != 2*int64(len(usages)) || u.InputTokens != 0 || u.OutputTokens != 0 || u.EstimatedTokens == 0 {
		t.Fatalf("usage %+v: impossible counts were booked", u)
	}
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("metrics %d:\n%s", resp.StatusCode, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "iop_edge_tokens_total{") && !strings.HasSuffix(line, " 0") {
			t.Errorf("metrics booked impossible usage: %s", line)
		}
	}
}

// TestImpossibleAnthropicPartsAreNotBooked: an Anthropic answer's input is
// the sum of three counts. One of them out of range makes the usage
// impossible, whatever the sum: a negative count hidden by a larger one,
// or two huge ones that wrap around int64 to a believable total. Whole
// and streamed, passed through (a Messages client) and translated (a
// Chat client), nothing reported is booked and the answer is charged by
// estimate.
func TestImpossibleAnthropicPartsAreNotBooked(t *testing.T) {
	usages := []string{
		`"input_tokens": -1000, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 1500, "output_tokens": 3`,
		`"input_tokens": 9223372036854775807, "cache_read_input_tokens": 2, "cache_creation_input_tokens": 9223372036854775807, "output_tokens": 3`,
	}
	var mu sync.Mutex
	next := 0
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		mu.Lock()
		u := usages[next/4%len(usages)] // four requests for each usage
		next++
		mu.Unlock()
		if q.Stream {
			return upstreamtest.Script{Raw: "event: message_start\n" +
				`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"up-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}` + "\n\n" +
				"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
				"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}` + "\n\n" +
				"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
				"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{` + u + `}}` + "\n\n" +
				"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"}
		}
		return upstreamtest.Script{Raw: `{"id":"msg_2","type":"message","role":"assistant","model":"up-model","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{` + u + `}}`}
	}})
	for range usages {
		for _, stream := range []bool{false, true} {
			status, b, _ := r.postAnthropic(t, "/v1/messages", apiKey,
				fmt.Sprintf(`{"model":"via-anthropic","max_tokens":50,"stream":%t,"messages":[{"role":"user","content":"x"}]}`, stream))
			if status != 200 || !strings.Contains(b, `"hi"`) {
				t.Fatalf("messages, stream %t: %d %s", stream, status, b)
			}
		}
		if status, _, body := r.post(t, apiKey, chatJSON("via-anthropic", "x")); status != 200 || !strings.Contains(body, `"hi"`) {
			t.Fatalf("chat, whole: %d %s", status, body)
		}
		if body := r.streamChat(t, "via-anthropic"); !strings.Contains(string(body), `"hi"`) || !strings.Contains(string(body), "[DONE]") {
			t.Fatalf("chat, stream:\n%s", body)
		}
	}
	r.settled()
	if u := r.usageOf("alice"); u.Requests != 4*int64(len(usages)) || u.InputTokens != 0 || u.OutputTokens != 0 || u.EstimatedTokens == 0 {
		t.Fatalf("usage %+v: impossible counts were booked", u)
	}
}

// TestAnthropicCacheTokensBooked: an Anthropic answer's input_tokens
// leaves out the prompt tokens the cache read and wrote. The Edge books
// all three as input, whole or streamed, as the adapters count it, so a
// key's token budget is not slipped past by caching a long prompt; the
// cache reads are its cached input.
func TestAnthropicCacheTokensBooked(t *testing.T) {
	const usage = `"input_tokens": 10, "cache_read_input_tokens": 200, "cache_creation_input_tokens": 3000`
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if q.Stream {
			return upstreamtest.Script{Raw: "event: message_start\n" +
				`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"up-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{` + usage + `,"output_tokens":1}}}` + "\n\n" +
				"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
				"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}` + "\n\n" +
				"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
				"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}` + "\n\n" +
				"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"}
		}
		return upstreamtest.Script{Raw: `{"id":"msg_2","type":"message","role":"assistant","model":"up-model","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{` + usage + `,"output_tokens":7}}`}
	}})
	for _, stream := range []bool{false, true} {
		status, b, _ := r.postAnthropic(t, "/v1/messages", apiKey,
			fmt.Sprintf(`{"model":"via-anthropic","max_tokens":50,"stream":%t,"messages":[{"role":"user","content":"x"}]}`, stream))
		if status != 200 || !strings.Contains(b, `"hi"`) {
			t.Fatalf("stream %t: %d %s", stream, status, b)
		}
		r.settled()
		want := edge.Usage{Key: "alice", Requests: 1, InputTokens: 3210, OutputTokens: 7, CachedInputTokens: 200}
		if stream {
			want = edge.Usage{Key: "alice", Requests: 2, InputTokens: 2 * 3210, OutputTokens: 2 * 7, CachedInputTokens: 2 * 200}
		}
		if got := r.usageOf("alice"); got != want {
			t.Fatalf("stream %t: usage %+v, want %+v", stream, got, want)
		}
	}
}

// TestCumulativeStreamUsageBookedOnce: a stream's usage events are
// totals so far, not increments. A Chat stream with continuous usage
// stats (vLLM's continuous_usage_stats) repeats the usage on every chunk,
// and an Anthropic stream may total its output in more than one
// message_delta; only the last snapshot is booked.
func TestCumulativeStreamUsageBookedOnce(t *testing.T) {
	chunk := func(text string, completion int) string {
		return fmt.Sprintf(`data: {"choices":[{"index":0,"delta":{"content":%q}}],"usage":{"prompt_tokens":5,"completion_tokens":%d}}`+"\n\n", text, completion)
	}
	r := newRig(t, rigOpts{reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if q.API == "messages" {
			return upstreamtest.Script{Raw: "event: message_start\n" +
				`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"up-model","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":11,"output_tokens":1}}}` + "\n\n" +
				"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
				"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}` + "\n\n" +
				"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":3}}` + "\n\n" +
				"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
				"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}` + "\n\n" +
				"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"}
		}
		return upstreamtest.Script{Raw: chunk("a", 1) + chunk("b", 2) + chunk("c", 3) +
			`data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}` + "\n\n" + "data: [DONE]\n\n"}
	}})
	if body := r.streamChat(t, "gpt-local"); !strings.Contains(string(body), `"c"`) || !strings.Contains(string(body), "[DONE]") {
		t.Fatalf("chat stream:\n%s", body)
	}
	r.settled()
	if got, want := r.usageOf("alice"), (edge.Usage{Key: "alice", Requests: 1, InputTokens: 5, OutputTokens: 3}); got != want {
		t.Fatalf("chat: usage %+v, want %+v", got, want)
	}
	resp := r.openMessagesStream(t, "via-anthropic")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "message_stop") {
		t.Fatalf("messages stream: %d %s", resp.StatusCode, b)
	}
	r.settled()
	if got, want := r.usageOf("alice"), (edge.Usage{Key: "alice", Requests: 2, InputTokens: 5 + 11, OutputTokens: 3 + 7}); got != want {
		t.Fatalf("messages: usage %+v, want %+v", got, want)
	}
}

// TestRefusedByCapacityIsNotRateCounted: a request the Edge refuses for
// want of a slot (503) is not counted against its key's requests per
// minute, so the retry its Retry-After invites is not refused with a
// 429. (LiteLLM #39309 is the same bug for its concurrency limit.)
func TestRefusedByCapacityIsNotRateCounted(t *testing.T) {
	const key = "sk-rpm-0123456789abcdef01234567"
	g := newGate()
	r := newRig(t, rigOpts{capacity: 1, queueTimeout: 30 * time.Millisecond, reply: g.reply, mutate: func(c *edge.Config) {
		c.APIKeys = append(c.APIKeys, edge.APIKey{Name: "rpm", Hash: edge.HashKey(key), Models: []string{"*"}, RequestsPerMinute: 2})
	}})
	held := make(chan int, 1)
	go func() {
		status, _, _ := r.post(t, key, chatJSON("gpt-local", "hold a"))
		held <- status
	}()
	for !contains(g.served(), "hold a") {
		time.Sleep(time.Millisecond)
	}
	if status, h, body := r.post(t, key, chatJSON("gpt-local", "b")); status != 503 || h.Get("Retry-After") == "" {
		t.Fatalf("with the only slot taken: %d %v %s", status, h, body)
	}
	close(g.release)
	if s := <-held; s != 200 {
		t.Fatalf("held request: %d", s)
	}
	// Two requests a minute: the held one and this one. The refused one
	// took nothing.
	if status, _, body := r.post(t, key, chatJSON("gpt-local", "c")); status != 200 {
		t.Fatalf("after the refusal: %d %s", status, body)
	}
	if status, _, body := r.post(t, key, chatJSON("gpt-local", "d")); status != 429 {
		t.Fatalf("third request served in the minute: %d %s", status, body)
	}
	r.settled()
	if u := r.usageOf("rpm"); u.Requests != 2 {
		t.Fatalf("usage %+v", u)
	}
}

// TestRaisedCapacityWaitsForTheNode: a reload that raises a provider's
// capacity frees slots for the queue, but the Node admits by the
// configuration it has applied. A queued request dispatched before the
// Node has the new capacity would be refused by it (AT_CAPACITY, a 503
// to a client that had waited its turn); it is served instead.
func TestRaisedCapacityWaitsForTheNode(t *testing.T) {
	for i := range 20 {
		g := newGate()
		r := newRig(t, rigOpts{capacity: 1, queueTimeout: time.Minute, reply: g.reply})
		var p posts
		p.post(t, r, "hold a")
		for !contains(g.served(), "hold a") {
			time.Sleep(time.Millisecond)
		}
		p.post(t, r, "hold b")
		p.post(t, r, "hold c")
		for r.srv.PoolStats().Queued != 2 {
			time.Sleep(time.Millisecond)
		}
		if err := r.srv.Reload(r.config(3)); err != nil {
			t.Fatal(err)
		}
		for len(g.served()) < 3 && p.ended() == 0 {
			time.Sleep(time.Millisecond)
		}
		close(g.release)
		p.wait(t)
		if t.Failed() {
			t.Fatalf("round %d", i)
		}
		r.settled()
	}
}

// TestAddedModelWaitsForTheNode: a reload that adds a model to a provider
// (and a route to it) is served once the Node applied it. A request
// dispatched before that would be refused by the Node, which admits by
// the model list it applied; it waits for the acknowledgement instead.
func TestAddedModelWaitsForTheNode(t *testing.T) {
	for i := range 20 {
		r := newRig(t, rigOpts{nodeModels: []string{"up-model", "up-model-2"}})
		cfg := r.config(8)
		for j := range cfg.Nodes[0].Providers {
			if p := &cfg.Nodes[0].Providers[j]; p.ID == "local" {
				p.Models = append(slices.Clone(p.Models), "up-model-2")
			}
		}
		cfg.Routes = append(slices.Clone(cfg.Routes), edge.Route{Model: "gpt-two", Targets: []edge.Target{{ProviderID: "local", Model: "up-model-2"}}})
		if err := r.srv.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		if status, _, body := r.post(t, apiKey, chatJSON("gpt-two", "new model")); status != 200 {
			t.Fatalf("round %d: the added model: %d %s", i, status, body)
		}
		r.settled()
	}
}

// TestModelTheNodeLacksIsNoCandidate: a route to a model the Node does
// not serve on that provider (the Edge lists none for it, the Node's
// allow-list leaves it out) has no candidate once the Node applied the
// configuration: the request is refused at once, not queued for a slot
// that will never come.
func TestModelTheNodeLacksIsNoCandidate(t *testing.T) {
	r := newRig(t, rigOpts{queueTimeout: 5 * time.Second, mutate: func(c *edge.Config) {
		for j := range c.Nodes[0].Providers {
			if p := &c.Nodes[0].Providers[j]; p.ID == "local" {
				p.Models = nil
			}
		}
		c.Routes = append(c.Routes, edge.Route{Model: "gpt-other", Targets: []edge.Target{{ProviderID: "local", Model: "other-model"}}})
	}})
	status, h, body := r.post(t, apiKey, chatJSON("gpt-other", "x"))
	if status != 503 || h.Get("Retry-After") == "" || !strings.Contains(body, "No provider for this model is available") {
		t.Fatalf("a model the Node lacks: %d %s", status, body)
	}
	if status, _, body := r.post(t, apiKey, chatJSON("gpt-local", "x")); status != 200 {
		t.Fatalf("the model it serves: %d %s", status, body)
	}
	if c := r.calls(); len(c) != 1 {
		t.Fatalf("upstream calls %d", len(c))
	}
	r.settled()
}

// TestUnreportedUsageChargedByEstimate: an answer that ends with no usage
// reported (a command-line run; a provider's whole answer or stream that
// carries none; a stream cut short before its usage chunk) is charged to
// its key's TokensPerMinute by the documented estimate, and one cut short
// after a usage snapshot by the output estimated beyond it, so no provider
// and no early disconnect lets a key past its budget. Usage keeps the
// reported counts apart from the estimate; a reported answer is charged
// what it reports, and a provider's refusal nothing.
func TestUnreportedUsageChargedByEstimate(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("cli providers need a Unix host")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	const (
		meter = "sk-meter-0123456789abcdef012345"
		tight = "sk-tight-0123456789abcdef012345"
		chunk = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}` + "\n\n"
		whole = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"no usage here"},"finish_reason":"stop"}]}`
	)
	ev := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	delta := ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}`)
	raw := map[string]string{
		// An Anthropic stream that reports its input and one output token
		// in message_start, then breaks off: the output past that
		// snapshot is estimated.
		"anthropic cut": ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"up-model","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":5,"output_tokens":1}}}`) +
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
			delta + delta + delta,
		"whole":    whole,
		"stream":   chunk + chunk + chunk + "data: [DONE]\n\n",
		"cut":      chunk + chunk, // no terminal: the provider broke off
		"reported": "",
	}
	logBuf := &syncbuf.Buffer{}
	a, err := cli.New(cli.Config{ID: "cli-echo", Argv: []string{sh, "-c", "printf hello-world"}, Models: []string{"cli-model"}})
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, rigOpts{
		hosted: []node.Hosted{{Provider: a}},
		reply: func(q *upstreamtest.Request) upstreamtest.Script {
			switch q.Prompt {
			case "refused":
				return upstreamtest.Script{Status: http.StatusInternalServerError}
			case "reported":
				return upstreamtest.Script{Text: []string{"hi"}, Usage: upstreamtest.Usage{InputTokens: 7, OutputTokens: 3}}
			}
			return upstreamtest.Script{Raw: raw[q.Prompt]}
		},
		mutate: func(cfg *edge.Config) {
			cfg.Nodes[0].Providers = append(cfg.Nodes[0].Providers, nodes.ProviderSpec{ID: "cli-echo", Adapter: "cli", Category: execution.CategoryCLI, Models: []string{"cli-model"}, Capacity: 2})
			cfg.Routes = append(cfg.Routes, edge.Route{Model: "via-cli", Targets: []edge.Target{{ProviderID: "cli-echo", Model: "cli-model"}}})
			cfg.APIKeys = append(cfg.APIKeys,
				edge.APIKey{Name: "meter", Hash: edge.HashKey(meter), Models: []string{"*"}, TokensPerMinute: 1 << 30},
				edge.APIKey{Name: "tight", Hash: edge.HashKey(tight), Models: []string{"*"}, TokensPerMinute: 10},
			)
			cfg.Metrics = prometheus.NewRegistry()
			cfg.AccessLog = true
			cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "edge", Level: hclog.Info, Output: logBuf, JSONFormat: true})
		},
	})
	usage := func(key string) edge.Usage {
		r.settled() // the charge is made before the lease is released
		for _, u := range r.srv.Usage() {
			if u.Key == key {
				return u
			}
		}
		return edge.Usage{Key: key}
	}
	est := func(s string) int64 { return int64(edge.EstimateTokens([]byte(s))) }
	streamBody := func(prompt string) string {
		return fmt.Sprintf(`{"model":"gpt-local","stream":true,"messages":[{"role":"user","content":%q}]}`, prompt)
	}
	before := usage("meter")
	anthropicCut := `{"model":"via-anthropic","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"anthropic cut"}]}`
	if status, body, _ := r.postAnthropic(t, "/v1/messages", meter, anthropicCut); status != 200 || !strings.Contains(body, "event: error") {
		t.Fatalf("Anthropic stream cut short: %d %s", status, body)
	}
	// Three deltas passed, one output token reported.
	if after := usage("meter"); after.InputTokens-before.InputTokens != 5 || after.OutputTokens-before.OutputTokens != 1 || after.EstimatedTokens-before.EstimatedTokens != 2 {
		t.Errorf("Anthropic stream cut short: %+v after %+v, want 5 input and 1 output reported, 2 estimated", after, before)
	}
	wantLogged := []float64{2} // the access log's estimated_tokens, request by request
	for _, c := range []struct {
		name, body string
		want       int64 // estimated tokens charged
	}{
		{"command-line run", chatJSON("via-cli", "x"), est(chatJSON("via-cli", "x")) + est("hello-world")},
		{"whole answer without usage", chatJSON("gpt-local", "whole"), est(chatJSON("gpt-local", "whole")) + est(whole)},
		{"stream without usage", streamBody("stream"), est(streamBody("stream")) + 3},
		{"stream cut short", streamBody("cut"), est(streamBody("cut")) + 2},
		{"usage reported", chatJSON("gpt-local", "reported"), 0},
		{"provider refused", chatJSON("gpt-local", "refused"), 0},
	} {
		wantLogged = append(wantLogged, float64(c.want))
		before := usage("meter")
		status, _, body := r.post(t, meter, c.body)
		if want := map[bool]int{true: 500, false: 200}[c.name == "provider refused"]; status != want {
			t.Fatalf("%s: %d %s", c.name, status, body)
		}
		after := usage("meter")
		if got := after.EstimatedTokens - before.EstimatedTokens; got != c.want {
			t.Errorf("%s: charged %d estimated tokens, want %d", c.name, got, c.want)
		}
		if c.name == "usage reported" && (after.InputTokens-before.InputTokens != 7 || after.OutputTokens-before.OutputTokens != 3) {
			t.Errorf("reported usage booked as %+v after %+v", after, before)
		}
		if c.name != "usage reported" && (after.InputTokens != before.InputTokens || after.OutputTokens != before.OutputTokens) {
			t.Errorf("%s: the estimate leaked into the reported counts: %+v after %+v", c.name, after, before)
		}
	}
	// The access log names each request's estimate, and only where one
	// was charged.
	var logged []float64
	for _, l := range accessLines(t, logBuf) {
		n, ok := l["estimated_tokens"].(float64)
		if _, reported := l["input_tokens"]; ok && reported != (l["model"] == "via-anthropic") {
			t.Errorf("estimated_tokens beside reported usage, or the reverse: %v", l)
		}
		logged = append(logged, n)
	}
	if !slices.Equal(logged, wantLogged) {
		t.Errorf("access log estimated_tokens %v, want %v", logged, wantLogged)
	}
	resp, err := http.Get(r.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`iop_edge_key_estimated_tokens_total{key="meter"} %d`, usage("meter").EstimatedTokens); !strings.Contains(string(b), want+"\n") {
		t.Errorf("metrics lack %s", want)
	}
	// The estimate binds: a run's estimate overdraws a budget of 10 tokens
	// a minute, and the next request is refused for tokens.
	if status, _, body := r.post(t, tight, chatJSON("via-cli", "x")); status != 200 {
		t.Fatalf("first run: %d %s", status, body)
	}
	r.settled()
	if status, h, body := r.post(t, tight, chatJSON("via-cli", "x")); status != 429 || h.Get("Retry-After") == "" || !strings.Contains(body, "tokens") {
		t.Fatalf("second run over the estimated budget: %d %v %s", status, h, body)
	}
}

// TestMetricsToken: with MetricsTokenHash, /metrics needs its bearer
// token (401 without it, or with another), while
// /healthz stays open; a reload that drops the token opens /metrics again.
func TestMetricsToken(t *testing.T) {
	const token = "metrics-token-0123456789abcdef0123"
	var cfg edge.Config
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		c.Metrics = prometheus.NewRegistry()
		c.MetricsTokenHash = edge.HashKey(token)
		cfg = *c
	}})
	for name, h := range map[string]map[string]string{
		"no token":       nil,
		"another token":  {"Authorization": "Bearer " + apiKey},
		"not a bearer":   {"Authorization": "Basic " + token},
		"an empty token": {"Authorization": "Bearer "},
	} {
		if status, body := r.get(t, "/metrics", h); status != http.StatusUnauthorized || strings.Contains(body, "iop_edge") {
			t.Errorf("%s: %d\n%.200s", name, status, body)
		}
	}
	if status, body := r.get(t, "/metrics", map[string]string{"Authorization": "Bearer " + token}); status != 200 || !strings.Contains(body, "iop_edge_queue_depth") {
		t.Fatalf("with the token: %d\n%.200s", status, body)
	}
	if status, _ := r.get(t, "/healthz", nil); status != 200 {
		t.Fatalf("/healthz: %d", status)
	}
	cfg.MetricsTokenHash = [32]byte{}
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if status, body := r.get(t, "/metrics", nil); status != 200 || !strings.Contains(body, "iop_edge_queue_depth") {
		t.Fatalf("after a reload without the token: %d", status)
	}
}
