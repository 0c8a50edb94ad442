// Command gateway measures, side by side in one run on loopback, a client
// talking to a fake model server (upstreamtest) six ways:
//
//	direct       client -> upstream
//	proxy        client -> httputil.ReverseProxy -> upstream
//	proxy x2     client -> ReverseProxy (front) -> ReverseProxy (back) -> upstream
//	relay        client -> byte relay -> upstream
//	proxy+relay  client -> ReverseProxy (rproxy) -> byte relay (rrelay) -> upstream
//	iop          client -> Edge -> Node -> upstream
//
// Each role runs in its own process (upstream, proxy, front, back, relay,
// rproxy, rrelay, Edge, Node; the client is this process), plaintext. For
// non-streamed requests and for streams of 200 chunks it prints throughput
// at a fixed concurrency, p50 and p99 at concurrency 1, time to first
// chunk, the amortized added cost per streamed chunk, and every figure of
// iop as a ratio to direct, to proxy and to proxy x2.
//
// The other paths are references. Proxy x2 is what a second hop costs when
// both hops are stdlib HTTP: it has as many processes and connections on
// the request's way as iop has. The byte relay copies each connection's
// bytes to a connection of its own to the upstream and back, and does
// nothing else (no parsing, one connection per client connection), so
// relay is what a second process by itself costs on this machine, and
// proxy+relay is a ReverseProxy's work plus that cost: the reference for
// a gateway that puts two processes between the client and the upstream
// and does a net/http proxy's work in them. Its ratio to proxy is printed
// beside iop's, labelled floor: a two-process path does better only where
// its processes together spend less than a ReverseProxy and a byte relay.
//
// With -placement split (Linux, 2 CPUs or more) the processes are pinned
// the way the roles are deployed: CPU 0 is the gateway machine (client,
// proxy, front, rproxy, Edge), CPU 1 the model machine (upstream, and
// back, relay, rrelay and Node, which run beside it). The default,
// shared, pins nothing; -gomaxprocs1 runs the processes it names (edge,node
// say) with GOMAXPROCS=1 there. -gogc sets GOGC for the processes it names
// (edge=800,node=800 say); the others keep the bench's own environment.
// -gc runs every role with GODEBUG=gctrace=1 and prints each process's GC
// cycles per 1,000 requests.
//
//	go run ./internal/bench/gateway [-c 32] [-d 5s] [-tls] [-mode all|plain|stream] [-placement shared|split] [-gomaxprocs1 edge,node] [-gogc edge=800,node=800] [-gc]
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
)

const (
	key       = "sk-bench-0123456789abcdef0123456789ab"
	nodeToken = "bench-node-token-0123456789abcdef"
	chunks    = 200
)

func main() {
	role := flag.String("role", "", "internal: upstream | proxy | relay | edge | node")
	arg := flag.String("arg", "", "internal: the address the role needs")
	conc := flag.Int("c", 32, "concurrency for throughput")
	dur := flag.Duration("d", 5*time.Second, "duration of each throughput run")
	n1 := flag.Int("n", 1000, "requests per path at concurrency 1")
	cpuprofile := flag.String("cpuprofile", "", "internal: write a CPU profile for the role")
	tlsDir := flag.String("tlsdir", "", "internal: the bench PKI of a -tls run")
	useTLS := flag.Bool("tls", false, "TLS on every hop (client, proxy, Edge, Edge-Node link, upstream) instead of plaintext")
	mode := flag.String("mode", "all", "throughput runs: all | plain (non-streamed only) | stream (streams only), for profiling one")
	placement := flag.String("placement", "shared", "shared (no process pinned) | split (CPU 0: client, proxy, Edge; CPU 1: upstream, Node)")
	oneP := flag.String("gomaxprocs1", "", "comma-separated processes to run with GOMAXPROCS=1 (of "+strings.Join(procNames, ", ")+"); split placement runs every one so")
	gogcFlag := flag.String("gogc", "", "GOGC for some processes, as name=value pairs (edge=800,node=800; value a percentage or off); the others keep the bench's environment")
	gcCount := flag.Bool("gc", false, "count every process's garbage collection cycles (the roles run with GODEBUG=gctrace=1, read from their stderr) and print them per 1,000 requests")
	flag.Parse()
	if *role != "" {
		runRole(*role, *arg, *conc, *cpuprofile, loadPKI(*tlsDir))
		return
	}
	if *mode != "all" && *mode != "plain" && *mode != "stream" {
		log.Fatalf("-mode %q: want all, plain or stream", *mode)
	}
	if *placement != "shared" && *placement != "split" {
		log.Fatalf("-placement %q: want shared or split", *placement)
	}
	if *placement == "split" && runtime.NumCPU() < 2 {
		log.Fatalf("-placement split needs 2 CPUs, this machine has %d", runtime.NumCPU())
	}
	one := map[string]bool{}
	for _, name := range strings.Split(*oneP, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if err := knownProc(name); err != nil {
			log.Fatalf("-gomaxprocs1: %v", err)
		}
		one[name] = true
	}
	gogc, err := parseGOGC(*gogcFlag)
	if err != nil {
		log.Fatalf("-gogc: %v", err)
	}
	dir := ""
	if *useTLS {
		d, err := os.MkdirTemp("", "gateway-bench-pki")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		makePKI(d)
		dir = d
	}
	orchestrate(launcher{conc: *conc, tlsDir: dir, oneP: one, gogc: gogc, gc: *gcCount}, *dur, *n1, *mode, *placement)
}

// parseGOGC reads -gogc: comma-separated name=value pairs, each naming
// one of procNames once, each value "off" or a percentage (0 or more).
func parseGOGC(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want name=value", pair)
		}
		if err := knownProc(name); err != nil {
			return nil, err
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("process %q named twice", name)
		}
		// Digits only, as the runtime documents GOGC (ParseUint takes no
		// sign, so "+800" is refused too).
		if _, err := strconv.ParseUint(value, 10, 31); value != "off" && err != nil {
			return nil, fmt.Errorf("%s=%q: want a percentage (0 or more) or off", name, value)
		}
		out[name] = value
	}
	return out, nil
}

// procNames are the processes the bench starts besides itself.
var procNames = []string{"upstream", "proxy", "front", "back", "relay", "rproxy", "rrelay", "edge", "node"}

// knownProc refuses a name that is not one of procNames.
func knownProc(name string) error {
	if !slices.Contains(procNames, name) {
		return fmt.Errorf("no process %q (want some of %s)", name, strings.Join(procNames, ", "))
	}
	return nil
}

// --- roles ---------------------------------------------------------------

func listen() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening", ln.Addr())
	return ln
}

func reply(q *upstreamtest.Request) upstreamtest.Script {
	if strings.Contains(q.Prompt, "stream") {
		text := make([]string, chunks)
		for i := range text {
			text[i] = "tok "
		}
		return upstreamtest.Script{Text: text, Usage: upstreamtest.Usage{InputTokens: 10, OutputTokens: chunks}}
	}
	return upstreamtest.Script{Text: []string{"Hello", " from", " the", " bench."}, Usage: upstreamtest.Usage{InputTokens: 10, OutputTokens: 4}}
}

func runRole(role, arg string, conc int, profile string, pki *benchPKI) {
	stopProfile := startProfile(profile)
	defer stopProfile()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	switch role {
	case "upstream":
		go pki.serveHTTP(listen(), upstreamtest.New(upstreamtest.Config{Models: []string{"up"}, Reply: reply, MaxRecorded: 100}))
	case "proxy":
		target, _ := url.Parse(arg)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.Transport = pki.transport(2 * conc)
		// FlushInterval stays at its default: ReverseProxy flushes
		// text/event-stream answers at once by itself, and a flush per
		// write would slow its whole answers (an extra write each).
		//
		// Full duplex: by default net/http's HTTP/1 server closes a
		// request's body once the answer's head is written, and an
		// upstream that answers before the Transport's last read of that
		// body (its check that nothing follows the declared length) makes
		// the Transport tear the upstream connection down mid-answer
		// (golang/go#40747): a few streams in a thousand were cut, logged
		// as "read error during body copy".
		go pki.serveHTTP(listen(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.NewResponseController(w).EnableFullDuplex()
			rp.ServeHTTP(w, r)
		}))
	case "relay":
		go relay(listen(), arg)
	case "edge":
		var nodeTLS *tls.Config
		if pki != nil {
			nodeTLS = pki.server()
		}
		srv, err := edge.New(edge.Config{
			Epoch:   1,
			NodeTLS: nodeTLS,
			Logger:  roleLogger("edge"),
			Nodes: []nodes.Record{{ID: "bench", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
				{ID: "up", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up"}, Capacity: 4 * conc},
			}}},
			APIKeys: []edge.APIKey{{Name: "bench", Hash: edge.HashKey(key), Models: []string{"*"}}},
			Routes:  []edge.Route{{Model: "bench", Targets: []edge.Target{{ProviderID: "up", Model: "up"}}}},
		})
		if err != nil {
			log.Fatal(err)
		}
		api, nodeLn := listen(), listen()
		if pki != nil {
			go srv.ServeTLS(api, pki.server())
		} else {
			go srv.Serve(api)
		}
		go srv.ServeNodes(nodeLn)
	case "node":
		up, edgeAddr, _ := strings.Cut(arg, ",")
		ocfg := openai.Config{ID: "up", BaseURL: up, Models: []string{"up"}}
		ncfg := node.Config{EdgeAddr: edgeAddr, NodeID: "bench", Token: nodeToken, Logger: roleLogger("node")}
		if pki != nil {
			ocfg.HTTPClient = &http.Client{Transport: pki.transport(256)}
			ncfg.TLS = pki.client()
		}
		a, err := openai.New(ocfg)
		if err != nil {
			log.Fatal(err)
		}
		ncfg.Providers = []node.Hosted{{Provider: a}}
		rt, err := node.New(ncfg)
		if err != nil {
			log.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go rt.Run(ctx)
		defer cancel()
		fmt.Println("listening none")
	}
	<-sig
}

// relay copies the bytes of every connection accepted on ln to a
// connection of its own to target, and back. It copies through a buffer
// with read and write calls, not io.Copy's splice, so that its system
// calls show in the table as every other process's do. With TLS the bytes
// it copies are the TLS records: the client's session is with the
// upstream.
func relay(ln net.Listener, target string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer u.Close()
			go pipe(u, c)
			pipe(c, u)
		}()
	}
}

// pipe copies src to dst until src ends, then half-closes dst, so the
// far side sees the end the near side sent.
func pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			dst.(*net.TCPConn).CloseWrite()
			return
		}
	}
}

// --- orchestration -------------------------------------------------------

type proc struct {
	cmd   *exec.Cmd
	addrs []string
	// gcs counts the process's GC cycles (its gctrace lines) when the
	// launcher counts them; stderrDone closes once its stderr is read.
	gcs        atomic.Int64
	stderrDone chan struct{}
}

// launcher starts the roles' processes.
type launcher struct {
	conc   int
	tlsDir string
	// oneP names the processes that run with GOMAXPROCS=1.
	oneP map[string]bool
	// gogc is the GOGC of the processes it names.
	gogc map[string]string
	// gc runs every process with GODEBUG=gctrace=1 and counts its cycles.
	gc bool
}

// spawn starts a role's process, on CPU cpu only when cpu >= 0, and reads
// the addrs addresses it listens on; name (the role's, or front, back,
// rproxy and rrelay for the reference paths' second processes) picks its
// profile's environment variable and its entries in l.oneP and l.gogc.
func (l launcher) spawn(name, role, arg string, addrs, cpu int) *proc {
	exe, _ := os.Executable()
	args := []string{"-role", role, "-arg", arg, "-c", fmt.Sprint(l.conc), "-tlsdir", l.tlsDir}
	if p := os.Getenv("GATEWAY_PROFILE_" + strings.ToUpper(name)); p != "" {
		args = append(args, "-cpuprofile", p)
	}
	cmd := exec.Command(exe, args...)
	var env []string // set over the bench's own environment (the last of a name wins)
	if l.oneP[name] {
		env = append(env, "GOMAXPROCS=1")
	}
	if v, ok := l.gogc[name]; ok {
		env = append(env, "GOGC="+v)
	}
	if l.gc {
		env = append(env, "GODEBUG="+withGCTrace(os.Getenv("GODEBUG")))
	}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	p := &proc{cmd: cmd}
	var stderr io.Reader
	if l.gc {
		r, err := cmd.StderrPipe()
		if err != nil {
			log.Fatal(err)
		}
		stderr, p.stderrDone = r, make(chan struct{})
	} else {
		cmd.Stderr = os.Stderr
	}
	cmd.SysProcAttr = childAttr() // never outlive the bench where the OS allows
	out, _ := cmd.StdoutPipe()
	start := cmd.Start
	if cpu >= 0 {
		start = func() error { return startOn(cmd, cpu) }
	}
	if err := start(); err != nil {
		log.Fatal(err)
	}
	if stderr != nil {
		go func() {
			defer close(p.stderrDone)
			countGCs(stderr, os.Stderr, &p.gcs)
		}()
	}
	sc := bufio.NewScanner(out)
	for range addrs {
		sc.Scan()
		f := strings.Fields(sc.Text())
		if len(f) != 2 || f[0] != "listening" {
			log.Fatalf("%s said %q", role, sc.Text())
		}
		p.addrs = append(p.addrs, f[1])
	}
	go io.Copy(io.Discard, out)
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	if p.stderrDone != nil {
		<-p.stderrDone // Wait closes the pipe: read it to its end first
	}
	p.cmd.Wait()
}

// withGCTrace returns a GODEBUG value that is godebug with gctrace=1 set
// (a later setting of a name wins).
func withGCTrace(godebug string) string {
	if godebug == "" {
		return "gctrace=1"
	}
	return godebug + ",gctrace=1"
}

// countGCs reads a process's stderr to its end: it counts the runtime's
// gctrace lines ("gc 12 @3.207s 1%: ...") in n and copies every other
// line to out.
func countGCs(r io.Reader, out io.Writer, n *atomic.Int64) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4<<10), 1<<20)
	for sc.Scan() {
		if gcTraceLine(sc.Text()) {
			n.Add(1)
			continue
		}
		fmt.Fprintln(out, sc.Text())
	}
	io.Copy(io.Discard, r) // past a line too long to scan: drained, so the process never blocks on it
}

// gcTraceLine reports whether line is the runtime's trace of one GC
// cycle: "gc", the cycle number, then its start time ("@1.234s").
func gcTraceLine(line string) bool {
	f := strings.Fields(line)
	if len(f) < 3 || f[0] != "gc" || !strings.HasPrefix(f[2], "@") {
		return false
	}
	_, err := strconv.ParseUint(f[1], 10, 64)
	return err == nil
}

type path struct {
	name  string
	url   string
	model string
	auth  bool
	// fails counts the path's failed requests, which are left out of
	// every figure.
	fails *atomic.Int64
}

func orchestrate(l launcher, dur time.Duration, n1 int, mode, placement string) {
	conc := l.conc
	pki := loadPKI(l.tlsDir)
	// gateway and model are the CPUs of the two machines a split placement
	// stands for; -1 pins nothing.
	gateway, model := -1, -1
	where := "processes: upstream, proxy, front, back, relay, rproxy, rrelay, edge, node, client (this one) share the machine, none pinned"
	if placement == "split" {
		gateway, model = 0, 1
		if err := pinSelf(gateway); err != nil {
			log.Fatal(err)
		}
		where = "processes pinned as the roles deploy, GOMAXPROCS 1 each: CPU 0 (the gateway machine) client (this one), proxy, front, rproxy, edge; CPU 1 (the model machine) upstream, back, relay, rrelay, node"
	} else if len(l.oneP) > 0 {
		var names []string
		for _, name := range procNames {
			if l.oneP[name] {
				names = append(names, name)
			}
		}
		where += "; GOMAXPROCS 1 for " + strings.Join(names, ", ")
	}
	if len(l.gogc) > 0 {
		var set []string
		for _, name := range procNames {
			if v, ok := l.gogc[name]; ok {
				set = append(set, name+"="+v)
			}
		}
		where += "; GOGC " + strings.Join(set, ", ")
	}
	up := l.spawn("upstream", "upstream", "", 1, model)
	defer up.stop()
	upURL := pki.scheme() + up.addrs[0]
	px := l.spawn("proxy", "proxy", upURL, 1, gateway)
	defer px.stop()
	back := l.spawn("back", "proxy", upURL, 1, model)
	defer back.stop()
	front := l.spawn("front", "proxy", pki.scheme()+back.addrs[0], 1, gateway)
	defer front.stop()
	rl := l.spawn("relay", "relay", up.addrs[0], 1, model)
	defer rl.stop()
	rrelay := l.spawn("rrelay", "relay", up.addrs[0], 1, model)
	defer rrelay.stop()
	rproxy := l.spawn("rproxy", "proxy", pki.scheme()+rrelay.addrs[0], 1, gateway)
	defer rproxy.stop()
	ed := l.spawn("edge", "edge", "", 2, gateway)
	defer ed.stop()
	nd := l.spawn("node", "node", upURL+","+ed.addrs[1], 1, model)
	defer nd.stop()

	client := &http.Client{Transport: pki.transport(2 * conc)}
	paths := []path{
		{"direct", upURL, "up", false, new(atomic.Int64)},
		{"proxy", pki.scheme() + px.addrs[0], "up", false, new(atomic.Int64)},
		{"proxy x2", pki.scheme() + front.addrs[0], "up", false, new(atomic.Int64)},
		{"relay", pki.scheme() + rl.addrs[0], "up", false, new(atomic.Int64)},
		{"proxy+relay", pki.scheme() + rproxy.addrs[0], "up", false, new(atomic.Int64)},
		{"iop", pki.scheme() + ed.addrs[0], "bench", true, new(atomic.Int64)},
	}
	iopPath := paths[len(paths)-1]
	// Wait for the Node to be ready (the first request through iop works).
	for i := 0; ; i++ {
		_, err := do(client, iopPath, false)
		if err == nil {
			break
		}
		if i > 500 {
			log.Fatalf("edge+node never became ready: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	security := "plaintext"
	if pki != nil {
		security = "TLS on every hop (TLS 1.3 on the Edge-Node link)"
	}
	fmt.Printf("gateway bench: loopback, %s, %d cores; %s\n", security, runtime.NumCPU(), where)
	fmt.Printf("throughput at concurrency %d for %v per path; latency at concurrency 1 over %d requests; streams of %d chunks\n\n", conc, dur, n1, chunks)

	type result struct {
		rps, p50, p99, srps, sp50, ttfc float64
		// What each process used during the throughput rounds, summed
		// over the rounds, and the requests answered in them: [0] for
		// whole answers, [1] for streams.
		use  [2]map[string]usage
		reqs [2]int64
		// rounds are the throughput of each round, in order.
		rounds [2][]float64
	}
	res := map[string]*result{}
	for _, p := range paths {
		do(client, p, false) // warm
		res[p.name] = &result{use: [2]map[string]usage{{}, {}}}
	}
	procs := []struct {
		name string
		p    *proc // nil for the client, this process
	}{{"client", nil}, {"upstream", up}, {"proxy", px}, {"front", front}, {"back", back}, {"relay", rl}, {"rproxy", rproxy}, {"rrelay", rrelay}, {"edge", ed}, {"node", nd}}
	usageNow := func() map[string]usage {
		m := map[string]usage{}
		for _, p := range procs {
			pid, gcs := os.Getpid(), ownGCs
			if p.p != nil {
				pid, gcs = p.p.pid(), p.p.gcs.Load
			}
			if u, ok := procUsage(pid); ok {
				u.gcs = gcs()
				m[p.name] = u
			}
		}
		return m
	}
	// Interleave the paths, several rounds, and keep the best of each: the
	// machine's noise hits all of them alike.
	for round := 0; round < rounds; round++ {
		for _, p := range paths {
			r := res[p.name]
			// measured runs one throughput round and adds what every
			// process used in it to r.use[k].
			measured := func(k int, stream bool) float64 {
				before := usageNow()
				rps, n := throughput(client, p, stream, conc, dur/rounds)
				for name, u := range usageNow() {
					r.use[k][name] = r.use[k][name].add(u.sub(before[name]))
				}
				r.reqs[k] += n
				r.rounds[k] = append(r.rounds[k], rps)
				return rps
			}
			if mode != "stream" {
				r.rps = max(r.rps, measured(0, false))
			}
			if mode != "plain" {
				r.srps = max(r.srps, measured(1, true))
			}
		}
	}
	// Latency at concurrency 1, taken request by request in turn on each
	// path, so that a change in the machine's state (a noisy neighbour, a
	// CPU's clock) weighs on all of them alike.
	// The gateways' own processes serve only their path, so what they
	// use during the c=1 rounds is theirs per request.
	before1 := usageNow()
	lat := latencies(client, paths, false, n1)
	used1 := usageNow()
	slat := latencies(client, paths, true, n1/4)
	for _, p := range paths {
		r := res[p.name]
		r.p50, r.p99 = pct(lat[p.name].total, 50), pct(lat[p.name].total, 99)
		r.sp50, r.ttfc = pct(slat[p.name].total, 50), pct(slat[p.name].first, 50)
	}
	d, x, x2, i := res["direct"], res["proxy"], res["proxy x2"], res["iop"]
	rl1, fl := res["relay"], res["proxy+relay"]
	row := func(name, unit string, get func(*result) float64) {
		fmt.Printf("%-33s %9.1f %9.1f %9.1f %9.1f %11.1f %9.1f %-9s iop/direct %.2f  iop/proxy %.2f  iop/(proxy x2) %.2f  floor: (proxy+relay)/proxy %.2f\n",
			name, get(d), get(x), get(x2), get(rl1), get(fl), get(i), unit, get(i)/get(d), get(i)/get(x), get(i)/get(x2), get(fl)/get(x))
	}
	fmt.Printf("%-33s %9s %9s %9s %9s %11s %9s\n", "", "direct", "proxy", "proxy x2", "relay", "proxy+relay", "iop")
	row("non-streamed throughput", "req/s", func(r *result) float64 { return r.rps })
	row("streamed throughput (200 chunks)", "streams/s", func(r *result) float64 { return r.srps })
	row("non-streamed p50, c=1", "us", func(r *result) float64 { return r.p50 })
	row("non-streamed p99, c=1", "us", func(r *result) float64 { return r.p99 })
	row("time to first chunk p50, c=1", "us", func(r *result) float64 { return r.ttfc })
	row("200-chunk stream p50, c=1", "us", func(r *result) float64 { return r.sp50 })
	fmt.Println()
	fmt.Printf("added p50 at c=1 (non-streamed):   iop %+.0f us over direct; proxy %+.0f us, proxy x2 %+.0f us, relay %+.0f us, proxy+relay %+.0f us\n",
		i.p50-d.p50, x.p50-d.p50, x2.p50-d.p50, rl1.p50-d.p50, fl.p50-d.p50)
	perChunk := func(r *result) float64 { return (r.sp50 - d.sp50) / chunks }
	fmt.Printf("amortized added cost per chunk:    iop %.2f us; proxy %.2f us, proxy x2 %.2f us, relay %.2f us, proxy+relay %.2f us  ((stream p50 - direct stream p50) / %d)\n",
		perChunk(i), perChunk(x), perChunk(x2), perChunk(rl1), perChunk(fl), chunks)
	// The same ratios round by round: each round's paths ran back to
	// back, so the spread of these is the run's own measure of the
	// machine's noise.
	for k, what := range []string{"non-streamed", "streamed"} {
		for _, num := range []*result{i, fl} {
			var parts []string
			var ratios []float64
			for j := range num.rounds[k] {
				if j < len(x.rounds[k]) && x.rounds[k][j] > 0 {
					ratios = append(ratios, num.rounds[k][j]/x.rounds[k][j])
					parts = append(parts, fmt.Sprintf("%.2f", ratios[len(ratios)-1]))
				}
			}
			if len(parts) > 0 {
				name := "iop/proxy"
				if num == fl {
					name = "(proxy+relay)/proxy"
				}
				fmt.Printf("%-19s %s throughput by round: %s (median %.2f)\n", name, what, strings.Join(parts, " "), median(ratios))
			}
		}
	}
	// The processes each path runs through, in the order of procs.
	on := func(path, proc string) bool {
		switch path {
		case "iop":
			return proc == "client" || proc == "upstream" || proc == "edge" || proc == "node"
		case "proxy x2":
			return proc == "client" || proc == "upstream" || proc == "front" || proc == "back"
		case "proxy+relay":
			return proc == "client" || proc == "upstream" || proc == "rproxy" || proc == "rrelay"
		}
		return proc == "client" || proc == "upstream" || proc == path
	}
	perReq := func(p path, k int, get func(usage) float64) (parts []string, total float64) {
		r := res[p.name]
		for _, pr := range procs {
			if u, ok := r.use[k][pr.name]; ok && r.reqs[k] > 0 && on(p.name, pr.name) {
				v := get(u) / float64(r.reqs[k])
				parts = append(parts, fmt.Sprintf("%s %.1f", pr.name, v))
				total += v
			}
		}
		return parts, total
	}
	for k, what := range []string{"non-streamed request", "200-chunk stream"} {
		if d.reqs[k] == 0 {
			continue
		}
		fmt.Printf("\nCPU time per %s at c=%d, by process (us; 10 ms ticks over every round):\n", what, conc)
		for _, p := range paths {
			parts, total := perReq(p, k, func(u usage) float64 { return float64(u.cpu.Microseconds()) })
			fmt.Printf("  %-8s %s; total %.1f (%d requests)\n", p.name, strings.Join(parts, ", "), total, res[p.name].reqs[k])
		}
		fmt.Printf("\nread and write system calls per %s at c=%d, by process (/proc/PID/io; EAGAIN reads count):\n", what, conc)
		for _, p := range paths {
			rd, rt := perReq(p, k, func(u usage) float64 { return float64(u.reads) })
			wr, wt := perReq(p, k, func(u usage) float64 { return float64(u.writes) })
			fmt.Printf("  %-8s reads: %s; total %.1f\n           writes: %s; total %.1f\n", p.name, strings.Join(rd, ", "), rt, strings.Join(wr, ", "), wt)
		}
		fmt.Printf("\ncontext switches per %s at c=%d, by process (every thread, voluntary and not: a voluntary one is a thread that blocked and was woken later):\n", what, conc)
		for _, p := range paths {
			sw, st := perReq(p, k, func(u usage) float64 { return float64(u.switches) })
			fmt.Printf("  %-8s %s; total %.1f\n", p.name, strings.Join(sw, ", "), st)
		}
		if l.gc {
			fmt.Printf("\nGC cycles per 1,000 %ss at c=%d, by process (GODEBUG=gctrace=1):\n", what, conc)
			for _, p := range paths {
				gc, gt := perReq(p, k, func(u usage) float64 { return 1000 * float64(u.gcs) })
				fmt.Printf("  %-8s %s; total %.1f\n", p.name, strings.Join(gc, ", "), gt)
			}
		}
	}
	if len(before1) > 0 {
		fmt.Printf("\nper non-streamed request at c=1, by gateway process (CPU us; context switches of all threads; read and write system calls):\n")
		for _, name := range []string{"proxy", "front", "back", "relay", "rproxy", "rrelay", "edge", "node"} {
			u := used1[name].sub(before1[name])
			fmt.Printf("  %-6s CPU %.1f, switches %.2f, reads %.2f, writes %.2f\n", name, float64(u.cpu.Microseconds())/float64(n1), float64(u.switches)/float64(n1), float64(u.reads)/float64(n1), float64(u.writes)/float64(n1))
		}
	}
	var fails []string
	for _, p := range paths {
		if n := p.fails.Load(); n > 0 {
			fails = append(fails, fmt.Sprintf("%s %d", p.name, n))
		}
	}
	if len(fails) > 0 {
		fmt.Printf("failed requests (not counted in any figure): %s\n", strings.Join(fails, ", "))
	}
}

func body(p path, stream bool) string {
	prompt := "short"
	if stream {
		prompt = "stream please"
	}
	return fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, p.model, stream, prompt)
}

// do sends one request and reads the whole answer; for a stream it
// returns the time of the first data chunk.
func do(c *http.Client, p path, stream bool) (time.Duration, error) {
	req, _ := http.NewRequest("POST", p.url+"/v1/chat/completions", strings.NewReader(body(p, stream)))
	req.Header.Set("Content-Type", "application/json")
	if p.auth {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("%s: %d %s", p.name, resp.StatusCode, b)
	}
	var first time.Duration
	if stream {
		br := bufio.NewReader(resp.Body)
		n := 0
		var err error
		for {
			var line []byte
			line, err = br.ReadSlice('\n')
			if bytes.HasPrefix(line, []byte("data: ")) {
				if n == 0 {
					first = time.Since(start)
				}
				n++
			}
			if err != nil {
				break
			}
		}
		if n < chunks {
			return 0, fmt.Errorf("%s: %d chunks, then %v", p.name, n, err)
		}
		return first, nil
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return first, err
}

// logged counts the failed requests logged, the first few only.
var logged atomic.Int64

// failed counts a failed request of path p and logs the first few.
func failed(p path, err error) {
	p.fails.Add(1)
	if logged.Add(1) <= 3 {
		log.Printf("request failed (not counted): %v", err)
	}
}

// throughput runs conc clients for d and returns the answered requests
// per second and their count.
func throughput(c *http.Client, p path, stream bool, conc int, d time.Duration) (float64, int64) {
	var n atomic.Int64
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				if _, err := do(c, p, stream); err != nil {
					failed(p, err)
					continue
				}
				n.Add(1)
			}
		})
	}
	start := time.Now()
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds(), n.Load()
}

// samples are one path's latencies in microseconds: whole requests, and
// for streams the time to the first chunk.
type samples struct{ total, first []float64 }

// latencies sends n requests on each path, one at a time, taking the paths
// in turn request by request.
func latencies(c *http.Client, paths []path, stream bool, n int) map[string]*samples {
	out := map[string]*samples{}
	for _, p := range paths {
		out[p.name] = &samples{}
	}
	for range n {
		for _, p := range paths {
			t0 := time.Now()
			f, err := do(c, p, stream)
			if err != nil {
				failed(p, err)
				continue
			}
			sm := out[p.name]
			sm.total = append(sm.total, float64(time.Since(t0).Microseconds()))
			sm.first = append(sm.first, float64(f.Microseconds()))
		}
	}
	return out
}

// rounds is how many times the paths take turns in the throughput runs,
// each for the run's duration over rounds.
const rounds = 5

// median returns the median of v (v is reordered).
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

func pct(v []float64, p int) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// roleLogger logs warnings and errors of a role to stderr.
func roleLogger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: os.Stderr})
}
