//go:build linux

package faulttest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/syncbuf"
	"github.com/iop-dev/iop/internal/testproxy"
)

// The process scenarios run the real daemons from examples/ (built once
// per test binary) against a fake upstream in this process.

var bins struct {
	once       sync.Once
	dir        string
	edge, node string
	err        error
}

func binaries(t *testing.T) (edgeBin, nodeBin string) {
	t.Helper()
	bins.once.Do(func() {
		bins.dir, bins.err = os.MkdirTemp("", "iop-faulttest-")
		if bins.err != nil {
			return
		}
		// go test puts its own toolchain's bin first on the PATH, so
		// this is the go that is running the test.
		goBin, err := exec.LookPath("go")
		if err != nil {
			bins.err = err
			return
		}
		for _, b := range []struct{ out, pkg string }{{"edge", "./examples/edge"}, {"node", "./examples/node"}} {
			cmd := exec.Command(goBin, "build", "-o", filepath.Join(bins.dir, b.out), b.pkg)
			// The repository's root, from this package's directory (the
			// test's working directory), which -trimpath builds keep.
			cmd.Dir = filepath.Join("..", "..")
			if out, err := cmd.CombinedOutput(); err != nil {
				bins.err = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		bins.edge, bins.node = filepath.Join(bins.dir, "edge"), filepath.Join(bins.dir, "node")
	})
	if bins.err != nil {
		t.Fatal(bins.err)
	}
	return bins.edge, bins.node
}

func init() {
	cleanupBinaries = func() {
		if bins.dir != "" {
			os.RemoveAll(bins.dir)
		}
	}
}

// proc is a daemon process.
type proc struct {
	cmd  *exec.Cmd
	out  *syncbuf.Buffer
	done chan struct{}
}

func startProc(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, out: &syncbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL) })
	return p
}

// signal sends sig and waits for the process to exit.
func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cluster is an Edge daemon with two Node daemons (n1, n2), each hosting
// one provider of capacity 60 in front of the fake upstream.
type cluster struct {
	t        *testing.T
	edgeBin  string
	nodeBin  string
	dir      string
	api      string
	nodes    string
	up       *upstreamtest.Server
	env      []string
	edge     *proc
	procs    map[string]*proc
	client   *http.Client
	nodeDial map[string]string // node id -> address it dials (the Edge or a proxy)
	// edgeGrace is the Edge daemon's -shutdown-grace ("" means 20s).
	edgeGrace string
	// edgeStarted: the Edge daemon came up once; a restart keeps its
	// ports (the Nodes dial them).
	edgeStarted bool
}

func newCluster(t *testing.T, reply func(*upstreamtest.Request) upstreamtest.Script) *cluster {
	t.Helper()
	edgeBin, nodeBin := binaries(t)
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"up-model"}, Reply: reply})
	up.Start()
	c := &cluster{t: t, edgeBin: edgeBin, nodeBin: nodeBin, dir: t.TempDir(), api: freePort(t), nodes: freePort(t), up: up,
		env:    []string{"IOP_FT_KEY=" + apiKey, "IOP_FT_NODE_TOKEN=" + nodeToken},
		procs:  map[string]*proc{},
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}}, nodeDial: map[string]string{}}
	c.writeEdgeYAML()
	t.Cleanup(func() {
		for _, p := range c.procs {
			p.signal(syscall.SIGKILL)
		}
		if c.edge != nil {
			c.edge.signal(syscall.SIGKILL)
		}
		up.Close()
		c.client.CloseIdleConnections()
	})
	return c
}

// startEdge starts the Edge daemon and waits until its API answers. The
// cluster's ports were free when it chose them, but a process may have
// taken one since (outgoing connections of tests running beside this one
// take ports from the same range): a first start refused so is tried
// again on fresh ports. A daemon that exits otherwise fails the test at
// once, with its output.
func (c *cluster) startEdge() {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		c.edge = startProc(c.t, c.edgeBin, c.env, "-config", filepath.Join(c.dir, "edge.yaml"), "-shutdown-grace", cmp.Or(c.edgeGrace, "20s"))
		err := c.waitEdge()
		if err == nil {
			c.edgeStarted = true
			return
		}
		out := c.edge.out.String()
		if c.edgeStarted || attempt == 3 || !strings.Contains(out, "address already in use") {
			c.t.Fatalf("the edge API is not up: %v\n%s", err, lastLines(out, 20))
		}
		c.t.Logf("edge start %d: a port was taken since it was chosen; trying fresh ports", attempt)
		c.api, c.nodes = freePort(c.t), freePort(c.t)
		c.writeEdgeYAML()
	}
}

// waitEdge waits until the Edge daemon's API answers /healthz, and fails
// when the daemon exits first or 30 s pass.
func (c *cluster) waitEdge() error {
	deadline := time.Now().Add(30 * time.Second)
	probe := &http.Client{Timeout: 2 * time.Second} // whatever holds the port must not hold the wait
	defer probe.CloseIdleConnections()
	for {
		resp, err := probe.Get("http://" + c.api + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-c.edge.done:
			return fmt.Errorf("the daemon exited (%v)", c.edge.cmd.ProcessState)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("no answer on /healthz within 30 s")
		}
	}
}

// writeEdgeYAML writes the Edge daemon's edge.yaml for the cluster's
// ports.
func (c *cluster) writeEdgeYAML() {
	edgeYAML := fmt.Sprintf(`api: {listen: %q}
nodes_listen: %q
state_dir: state
limits: {queue_timeout: 5s, request_timeout: 60s}
api_keys:
  - {name: load, key: {env: IOP_FT_KEY}, models: ["*"]}
nodes:
  - id: n1
    token: {env: IOP_FT_NODE_TOKEN}
    providers: [{id: p1, adapter: openai, category: local, models: [up-model], capacity: 60}]
  - id: n2
    token: {env: IOP_FT_NODE_TOKEN}
    providers: [{id: p2, adapter: openai, category: local, models: [up-model], capacity: 60}]
routes:
  - {model: m, targets: [{provider: p1, model: up-model}, {provider: p2, model: up-model}]}
  - {model: m1, targets: [{provider: p1, model: up-model}]}
`, c.api, c.nodes)
	if err := os.WriteFile(filepath.Join(c.dir, "edge.yaml"), []byte(edgeYAML), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// startAll starts the Edge and the Nodes ids, each dialing the Edge directly,
// and waits until every one is connected.
func (c *cluster) startAll(ids ...string) {
	c.t.Helper()
	c.startEdge()
	for _, id := range ids {
		c.startNode(id, "")
	}
	waitUntil(c.t, strings.Join(ids, ", ")+" connected", func() bool {
		for _, id := range ids {
			if !c.connected(id) {
				return false
			}
		}
		return true
	})
}

// startNode starts node id dialing addr ("" means the Edge directly).
func (c *cluster) startNode(id, addr string) {
	c.t.Helper()
	if addr == "" {
		addr = c.nodes
	}
	provider := "p" + strings.TrimPrefix(id, "n")
	yaml := fmt.Sprintf(`edge: %q
node_id: %s
token: {env: IOP_FT_NODE_TOKEN}
plaintext: true
providers:
  - {id: %s, adapter: openai, base_url: %q, models: [up-model]}
`, addr, id, provider, c.up.URL())
	path := filepath.Join(c.dir, id+".yaml")
	os.WriteFile(path, []byte(yaml), 0o600)
	c.procs[id] = startProc(c.t, c.nodeBin, c.env, "-config", path)
}

func (c *cluster) metrics() Metrics {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := Scrape(ctx, "http://"+c.api)
	if err != nil {
		return Metrics{}
	}
	return m
}

func (c *cluster) connected(id string) bool {
	return c.metrics()[`iop_edge_node_connected{node="`+id+`"}`] == 1
}

func (c *cluster) generation(id string) float64 {
	return c.metrics()[`iop_edge_node_generation{node="`+id+`"}`]
}

// settled waits for the Edge to hold no lease and queue nothing, and
// returns what it still holds otherwise.
func (c *cluster) settled() int {
	deadline := time.Now().Add(20 * time.Second)
	var held float64
	for time.Now().Before(deadline) {
		m := c.metrics()
		held = m.Sum("iop_edge_in_flight{") + m["iop_edge_queue_depth"]
		if held == 0 {
			return 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	return int(held)
}

func (c *cluster) load(n int, model string, stream bool, tally *Tally) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			tally.Add(Chat(ctx, c.client, "http://"+c.api, apiKey, model, fmt.Sprintf("load %d", i), stream, 0))
		})
	}
	return &wg
}

func (c *cluster) upstreamChats() int {
	n := 0
	for _, q := range c.up.Requests() {
		if q.API == "chat" {
			n++
		}
	}
	return n
}

// boundedProcess checks the Edge's goroutines and heap against a
// baseline taken when it was idle.
func (c *cluster) boundedProcess(t *testing.T, baseGoroutines float64) string {
	t.Helper()
	// The clients' idle keep-alive connections each hold an Edge
	// goroutine; they are not the scenario's.
	c.client.CloseIdleConnections()
	var g, heap float64
	deadline := time.Now().Add(10 * time.Second)
	for {
		m := c.metrics()
		g, heap = m["go_goroutines"], m["go_memstats_heap_inuse_bytes"]
		if g <= baseGoroutines+20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if g > baseGoroutines+20 {
		t.Errorf("edge goroutines %v after the scenario, %v before", g, baseGoroutines)
	}
	if heap > 256<<20 {
		t.Errorf("edge heap in use %v bytes", heap)
	}
	return fmt.Sprintf("edge goroutines %v->%v, heap %.1f MiB", baseGoroutines, g, heap/(1<<20))
}

func chunks(n int, d time.Duration) func(*upstreamtest.Request) upstreamtest.Script {
	return streamScript(n, d)
}

// TestNodeKilled: a Node daemon killed with SIGKILL during 100 concurrent
// streams; every client gets exactly one terminal, the Node restarts and
// its capacity is back.
func TestNodeKilled(t *testing.T) {
	c := newCluster(t, chunks(150, 20*time.Millisecond))
	c.startAll("n1", "n2")
	base := c.metrics()["go_goroutines"]
	var tally Tally
	wg := c.load(100, "m", true, &tally)
	waitUntil(t, "100 streams at the upstream", func() bool { return c.upstreamChats() >= 100 })
	c.procs["n1"].signal(syscall.SIGKILL)
	wg.Wait()
	checkTally(t, "node killed", &tally)
	c.startNode("n1", "")
	waitUntil(t, "n1 back", func() bool { return c.connected("n1") })
	var after Tally
	c.load(120, "m", false, &after).Wait()
	checkTally(t, "after the restart", &after)
	if after.ByOutcome[Complete] != 120 {
		t.Fatalf("capacity not restored: %v", after.ByOutcome)
	}
	leaked := c.settled()
	if leaked != 0 {
		t.Fatalf("%d leases held", leaked)
	}
	note := c.boundedProcess(t, base)
	record(t, RowOf("node SIGKILL during 100 streams (daemons)", &tally, leaked,
		fmt.Sprintf("%d complete (n2), %d error events/statuses (n1); after restart 120/120 complete at full capacity; %s",
			tally.ByOutcome[Complete], tally.ByOutcome[Failed]+tally.ByOutcome[Refused], note)))
}

// TestNodeVanished: n1's machine vanishes without closing its TCP
// connection (the proxy blackholes it), then n1 comes back as a new
// process: the Edge accepts it through probe-then-fence, well before the
// 45 s heartbeat wait would have ended the old connection.
func TestNodeVanished(t *testing.T) {
	c := newCluster(t, chunks(2000, 20*time.Millisecond))
	c.startEdge()
	c.startNode("n2", "")
	proxy := testproxy.New(t, c.nodes)
	c.startNode("n1", proxy.Addr())
	waitUntil(t, "n1 connected", func() bool { return c.connected("n1") })
	gen := c.generation("n1")
	var tally Tally
	wg := c.load(10, "m1", true, &tally)
	waitUntil(t, "10 streams on n1", func() bool { return c.upstreamChats() >= 10 })
	proxy.Blackhole()
	c.procs["n1"].signal(syscall.SIGKILL) // its side closes; nothing reaches the Edge
	start := time.Now()
	c.startNode("n1", "")
	waitUntil(t, "the new n1 accepted", func() bool { return c.connected("n1") && c.generation("n1") != gen })
	took := time.Since(start)
	wg.Wait()
	checkTally(t, "vanished node", &tally)
	logs := c.edge.out.String()
	if !strings.Contains(logs, "reason=superseded") || strings.Contains(logs, "heartbeat_timeout") {
		t.Fatalf("the old connection was not fenced by the probe (accepted after %v):\n%s", took, lastLines(logs, 30))
	}
	leaked := c.settled()
	record(t, RowOf("node vanished (blackholed), back as a new process (daemons)", &tally, leaked,
		fmt.Sprintf("new process accepted after %v (probe timeout 5s, heartbeat wait 45s); old generation fenced as superseded; streams on it ended with error events",
			took.Round(100*time.Millisecond))))
}

// TestEdgeRestarted: the Edge daemon restarted (SIGTERM, then started
// again) under load: requests in flight finish, both Nodes register again
// within their backoff, and new requests succeed.
func TestEdgeRestarted(t *testing.T) {
	c := newCluster(t, chunks(50, 20*time.Millisecond))
	c.startAll("n1", "n2")
	g1, g2 := c.generation("n1"), c.generation("n2")
	var tally Tally
	wg := c.load(40, "m", true, &tally)
	waitUntil(t, "40 streams at the upstream", func() bool { return c.upstreamChats() >= 40 })
	c.edge.signal(syscall.SIGTERM)
	wg.Wait()
	checkTally(t, "in flight during the restart", &tally)
	start := time.Now()
	c.startEdge()
	waitUntil(t, "both nodes back", func() bool { return c.connected("n1") && c.connected("n2") })
	took := time.Since(start)
	if c.generation("n1") <= g1 || c.generation("n2") <= g2 {
		t.Fatalf("generations did not move past the old boot: %v %v", c.generation("n1"), c.generation("n2"))
	}
	var after Tally
	c.load(40, "m", true, &after).Wait()
	checkTally(t, "after the restart", &after)
	if after.ByOutcome[Complete] != 40 {
		t.Fatalf("after the restart: %v", after.ByOutcome)
	}
	leaked := c.settled()
	var merged Tally
	merged.Merge(&tally)
	merged.Merge(&after)
	record(t, RowOf("edge restarted under load (daemons)", &merged, leaked,
		fmt.Sprintf("in flight: %v; nodes re-registered %v after the new edge started; new generations above the old boot's; 40/40 after",
			tally.ByOutcome, took.Round(100*time.Millisecond))))
}

// TestNodeStopped: a Node daemon stopped with SIGTERM during 20 streams
// drains: the Edge sends it nothing new (requests meanwhile go to the
// other Node, none fails), the streams it holds finish, and it exits 0.
func TestNodeStopped(t *testing.T) {
	c := newCluster(t, chunks(50, 20*time.Millisecond))
	c.startAll("n1", "n2")
	var held Tally
	streams := c.load(20, "m1", true, &held) // m1: n1's provider only
	waitUntil(t, "20 streams at the upstream", func() bool { return c.upstreamChats() >= 20 })
	stopped := make(chan struct{})
	go func() { c.procs["n1"].signal(syscall.SIGTERM); close(stopped) }()
	waitUntil(t, "n1 draining", func() bool {
		return c.metrics()[`iop_edge_node_draining{node="n1"}`] == 1
	})
	var during Tally
	c.load(20, "m", false, &during).Wait()
	streams.Wait()
	<-stopped
	checkTally(t, "streams held by the stopped node", &held)
	checkTally(t, "requests during its drain", &during)
	if held.ByOutcome[Complete] != 20 || during.ByOutcome[Complete] != 20 {
		t.Fatalf("held %v, during %v: %v %v", held.ByOutcome, during.ByOutcome, held.Details, during.Details)
	}
	if code := c.procs["n1"].cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("n1 exited %d:\n%s", code, lastLines(c.procs["n1"].out.String(), 10))
	}
	waitUntil(t, "n1 gone from the edge", func() bool { return !c.connected("n1") })
	leaked := c.settled()
	var all Tally
	all.Merge(&held)
	all.Merge(&during)
	record(t, RowOf("node stopped (SIGTERM) during 20 streams (daemons)", &all, leaked,
		"the node drained: 20/20 streams it held finished; 20/20 requests on the shared route served during the drain; exit 0"))
}

// TestNodeHangUp: SIGHUP, which reloads the Edge and the Hub, reaches a
// Node daemon during 20 streams. node.yaml is read at start only, so the
// Node says so and goes on: the streams finish, its connection (same
// generation) stays. Before, the signal ended the process at once, as Go
// does by default, and the streams with it.
func TestNodeHangUp(t *testing.T) {
	c := newCluster(t, chunks(50, 20*time.Millisecond))
	c.startAll("n1")
	gen := c.generation("n1")
	var held Tally
	streams := c.load(20, "m1", true, &held)
	waitUntil(t, "20 streams at the upstream", func() bool { return c.upstreamChats() >= 20 })
	n1 := c.procs["n1"]
	n1.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the SIGHUP answered", func() bool { return strings.Contains(n1.out.String(), "read at start only") })
	streams.Wait()
	checkTally(t, "streams across the SIGHUP", &held)
	if held.ByOutcome[Complete] != 20 {
		t.Fatalf("streams across the SIGHUP: %v %v", held.ByOutcome, held.Details)
	}
	if !c.connected("n1") || c.generation("n1") != gen {
		t.Fatalf("n1 after the SIGHUP: connected %v, generation %v (was %v)", c.connected("n1"), c.generation("n1"), gen)
	}
	leaked := c.settled()
	record(t, RowOf("node sent SIGHUP during 20 streams (daemons)", &held, leaked,
		"the node logged that node.yaml is read at start only and went on: 20/20 streams finished, same connection generation"))
}

// TestEdgeGraceEnds: the Edge daemon stopped with SIGTERM while 10
// streams run well past its shutdown grace: every client still gets a
// terminal (its API's error event), none is cut off without one, and the
// daemon exits 0.
func TestEdgeGraceEnds(t *testing.T) {
	c := newCluster(t, chunks(100, 100*time.Millisecond)) // 10 s streams
	c.edgeGrace = "300ms"
	c.startAll("n1")
	var tally Tally
	wg := c.load(10, "m1", true, &tally)
	waitUntil(t, "10 streams at the upstream", func() bool { return c.upstreamChats() >= 10 })
	c.edge.signal(syscall.SIGTERM)
	wg.Wait()
	checkTally(t, "streams past the grace", &tally)
	if tally.ByOutcome[Complete] != 0 || tally.ByOutcome[Failed] != 10 {
		t.Fatalf("streams past the grace: %v %v", tally.ByOutcome, tally.Details)
	}
	if code := c.edge.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("edge exited %d:\n%s", code, lastLines(c.edge.out.String(), 10))
	}
	record(t, RowOf("edge stopped (SIGTERM) with streams past its grace (daemons)", &tally, 0,
		"10/10 streams cut when the 300 ms grace ended, each with an error terminal; exit 0"))
}

// headCounter counts the answers whose head reached the client.
type headCounter struct {
	rt http.RoundTripper
	n  atomic.Int32
}

func (h *headCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := h.rt.RoundTrip(r)
	if err == nil {
		h.n.Add(1)
	}
	return resp, err
}

func (h *headCounter) CloseIdleConnections() {
	if c, ok := h.rt.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// TestSecondSignal: a second SIGTERM during a daemon's graceful shutdown
// cuts the grace short: the Node's and then the Edge's 10 s streams end at
// once with an error terminal each (with the default grace they would have
// finished), and both daemons exit 0.
func TestSecondSignal(t *testing.T) {
	for _, role := range []string{"node", "edge"} {
		t.Run(role, func(t *testing.T) {
			c := newCluster(t, chunks(100, 100*time.Millisecond)) // 10 s streams
			c.startAll("n1")
			// Each stream's head must have reached its client before the
			// signals: one cut before it is answered with an error status
			// instead of an error event.
			heads := &headCounter{rt: c.client.Transport}
			c.client = &http.Client{Transport: heads}
			var tally Tally
			wg := c.load(10, "m1", true, &tally)
			waitUntil(t, "10 stream heads at the clients", func() bool { return heads.n.Load() >= 10 })
			p := c.edge
			if role == "node" {
				p = c.procs["n1"]
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
			if role == "node" {
				waitUntil(t, "n1 draining", func() bool { return c.metrics()[`iop_edge_node_draining{node="n1"}`] == 1 })
			} else {
				waitUntil(t, "the edge shutting down", func() bool { return strings.Contains(p.out.String(), "shutting down") })
			}
			p.signal(syscall.SIGTERM) // the second; waits for the exit
			wg.Wait()
			checkTally(t, "streams at the second signal", &tally)
			if tally.ByOutcome[Complete] != 0 || tally.ByOutcome[Failed] != 10 {
				t.Fatalf("streams at the second signal: %v %v", tally.ByOutcome, tally.Details)
			}
			if code := p.cmd.ProcessState.ExitCode(); code != 0 {
				t.Fatalf("%s exited %d:\n%s", role, code, lastLines(p.out.String(), 10))
			}
		})
	}
}

// TestEdgeReloaded: SIGHUP on the Edge daemon under load. A valid
// edge.yaml takes effect for new requests (a key added) while the streams
// in flight finish; a start-only change (api.listen) is logged as waiting
// for a restart and not applied; an invalid edge.yaml is refused with the
// running configuration kept; SIGTERM then lets the streams in flight
// finish and exits 0.
func TestEdgeReloaded(t *testing.T) {
	const lateKey = "sk-ft-late-0123456789abcdefghij"
	c := newCluster(t, chunks(50, 20*time.Millisecond))
	c.env = append(c.env, "IOP_FT_LATE_KEY="+lateKey)
	c.startAll("n1")
	chat := func(key string, stream bool) Result {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return Chat(ctx, c.client, "http://"+c.api, key, "m1", "reload", stream, 0)
	}
	if r := chat(lateKey, false); r.Status != http.StatusUnauthorized {
		t.Fatalf("the late key before the reload: %d %s", r.Status, r.Detail)
	}
	path := filepath.Join(c.dir, "edge.yaml")
	orig, _ := os.ReadFile(path)

	var inFlight Tally
	wg := c.load(20, "m1", true, &inFlight)
	waitUntil(t, "20 streams at the upstream", func() bool { return c.upstreamChats() >= 20 })
	next := strings.Replace(string(orig), "api_keys:\n", "api_keys:\n  - {name: late, key: {env: IOP_FT_LATE_KEY}, models: [\"*\"]}\n", 1)
	next = strings.Replace(next, "api: {listen: "+strconv.Quote(c.api)+"}", "api: {listen: \"127.0.0.1:1\"}", 1)
	os.WriteFile(path, []byte(next), 0o600)
	c.edge.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the late key admitted", func() bool { return chat(lateKey, false).Outcome == Complete })
	wg.Wait()
	checkTally(t, "in flight during the reload", &inFlight)
	if inFlight.ByOutcome[Complete] != 20 {
		t.Fatalf("streams in flight during the reload: %v %v", inFlight.ByOutcome, inFlight.Details)
	}
	if out := c.edge.out.String(); !strings.Contains(out, "take effect only at restart") || !strings.Contains(out, "api.listen") {
		t.Fatalf("the api.listen change was not reported:\n%s", lastLines(out, 10))
	}

	// An invalid edge.yaml: refused, the running configuration stays.
	os.WriteFile(path, []byte(next+"api_keys: [oops\n"), 0o600)
	c.edge.cmd.Process.Signal(syscall.SIGHUP)
	waitUntil(t, "the refused reload logged", func() bool { return strings.Contains(c.edge.out.String(), "reload refused") })
	for _, key := range []string{apiKey, lateKey} {
		if r := chat(key, true); r.Outcome != Complete {
			t.Fatalf("after a refused reload: %v %d %s", r.Outcome, r.Status, r.Detail)
		}
	}

	leaked := c.settled()
	if leaked != 0 {
		t.Fatalf("%d leases or queued requests held after the reloads", leaked)
	}

	// SIGTERM with streams in flight: they finish, the daemon exits 0.
	var draining Tally
	before := c.upstreamChats()
	wg = c.load(10, "m1", true, &draining)
	waitUntil(t, "10 more streams at the upstream", func() bool { return c.upstreamChats() >= before+10 })
	c.edge.signal(syscall.SIGTERM)
	wg.Wait()
	checkTally(t, "in flight at SIGTERM", &draining)
	if draining.ByOutcome[Complete] != 10 || c.edge.cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("graceful shutdown: %v, exit %d\n%s", draining.ByOutcome, c.edge.cmd.ProcessState.ExitCode(), lastLines(c.edge.out.String(), 10))
	}
	var all Tally
	all.Merge(&inFlight)
	all.Merge(&draining)
	record(t, RowOf("edge reloaded (SIGHUP) under load, then SIGTERM (daemons)", &all, leaked,
		"20/20 streams across a reload that added a key (served after it); api.listen change logged as start-only; invalid edge.yaml refused, both keys still served; 10/10 streams finished after SIGTERM, exit 0"))
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// TestDaemonsRefuseStrayArguments: a configuration path given without its
// flag stops the daemon with a usage error (exit 2) instead of running it
// with the default file in its place.
func TestDaemonsRefuseStrayArguments(t *testing.T) {
	edgeBin, nodeBin := binaries(t)
	dir := t.TempDir()
	for _, c := range []struct{ bin, arg string }{{edgeBin, "my-edge.yaml"}, {nodeBin, "my-node.yaml"}} {
		cmd := exec.Command(c.bin, c.arg)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `unexpected argument "`+c.arg+`"`) {
			t.Errorf("%s %s: %v\n%s", filepath.Base(c.bin), c.arg, err, out)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("a refused start wrote %v", ents)
	}
}

// TestCheckCommands: `edge check` and `node check -probe` on the real
// daemons, with the files a cluster runs from: exit 0 and a summary for
// valid files (the Node's provider answering), exit 1 and the reason for
// an invalid one, exit 0 for -h; and nothing written.
func TestCheckCommands(t *testing.T) {
	c := newCluster(t, nil)
	nodeYAML := fmt.Sprintf("edge: %q\nnode_id: n1\ntoken: {env: IOP_FT_NODE_TOKEN}\nplaintext: true\nproviders:\n  - {id: p1, adapter: openai, base_url: %q, models: [up-model]}\n", c.nodes, c.up.URL())
	os.WriteFile(filepath.Join(c.dir, "n1.yaml"), []byte(nodeYAML), 0o600)
	os.WriteFile(filepath.Join(c.dir, "bad.yaml"), []byte(strings.Replace(nodeYAML, c.nodes, "9440", 1)), 0o600)
	for _, tc := range []struct {
		bin  string
		args []string
		code int
		want string
	}{
		{c.edgeBin, []string{"check", "-config", "edge.yaml"}, 0, "edge.yaml is valid."},
		{c.nodeBin, []string{"check", "-config", "n1.yaml", "-probe"}, 0, "probe      p1: ok\n"},
		{c.nodeBin, []string{"check", "-config", "bad.yaml"}, 1, `edge "9440" is not a host:port`},
		{c.edgeBin, []string{"check", "-config", "missing.yaml"}, 1, "missing.yaml"},
		{c.edgeBin, []string{"check", "-h"}, 0, "-config"},
		{c.nodeBin, []string{"check", "-h"}, 0, "-probe"},
	} {
		cmd := exec.Command(tc.bin, tc.args...)
		cmd.Dir, cmd.Env = c.dir, append(os.Environ(), c.env...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %q: exit %d, want %d with %q:\n%s", filepath.Base(tc.bin), tc.args, code, tc.code, tc.want, out)
		}
	}
	if _, err := os.Lstat(filepath.Join(c.dir, "state")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a check wrote the state directory: %v", err)
	}
}
