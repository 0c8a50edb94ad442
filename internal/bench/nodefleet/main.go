// Command nodefleet measures an Edge's node registry under a fleet of real
// Nodes: N node.Runtime instances, each with its own TCP session, in this
// process, registered to one Edge running in a child process on loopback
// (plaintext). It prints the Edge's Go memory per connected Node
// (HeapInuse + StackInuse after GC), the time to register every Node, the
// time for all to be ready again after the Edge is killed and restarted
// (a new boot epoch), and the Edge's CPU share while the fleet idles with
// heartbeats at the default 30 s / 45 s profile.
//
//	go run ./internal/bench/nodefleet -nodes 10000 -idle 2m
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/node"
)

const token = "fleet-token-0123456789abcdef0123"

func main() {
	role := flag.String("role", "", "internal: edge (child process)")
	n := flag.Int("nodes", 10000, "number of Nodes")
	idle := flag.Duration("idle", 2*time.Minute, "idle period for the CPU measurement")
	addr := flag.String("addr", "127.0.0.1:0", "edge listen address (edge role)")
	epoch := flag.Uint("epoch", 1, "boot epoch (edge role)")
	flag.Parse()
	raiseFileLimit()
	if *role == "edge" {
		runEdge(*addr, uint32(*epoch), *n)
		return
	}
	orchestrate(*n, *idle)
}

func raiseFileLimit() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}

func records(n int) []nodes.Record {
	out := make([]nodes.Record, n)
	for i := range out {
		out[i] = nodes.Record{
			ID:        fmt.Sprintf("node-%05d", i),
			TokenHash: nodes.HashToken(token),
			Providers: []nodes.ProviderSpec{{ID: "llm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m"}, Capacity: 4}},
		}
	}
	return out
}

// runEdge is the child process: a registry that answers "mem" and
// "ready" on stdin.
func runEdge(addr string, epoch uint32, n int) {
	store, err := nodes.NewStaticStore(records(n))
	if err != nil {
		log.Fatal(err)
	}
	reg, err := nodes.New(nodes.Config{Store: store, Epoch: epoch, MaxPending: 2048, RegisterTimeout: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	var ln net.Listener
	for range 100 { // the previous edge's port may linger briefly
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening", ln.Addr())
	go reg.Serve(ln)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "mem":
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Println("mem", ms.HeapInuse+ms.StackInuse, countReady(reg), runtime.NumGoroutine())
		case "ready":
			fmt.Println("ready", countReady(reg))
		}
	}
}

func countReady(reg *nodes.Registry) int {
	c := 0
	for _, s := range reg.Snapshot() {
		if s.Connected {
			c++
		}
	}
	return c
}

type edgeProc struct {
	cmd  *exec.Cmd
	in   *bufio.Writer
	out  *bufio.Scanner
	addr string
}

func startEdge(addr string, epoch, n int) *edgeProc {
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(exe, "-role", "edge", "-addr", addr, "-epoch", strconv.Itoa(epoch), "-nodes", strconv.Itoa(n))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	e := &edgeProc{cmd: cmd, in: bufio.NewWriter(stdin), out: bufio.NewScanner(stdout)}
	e.out.Scan()
	f := strings.Fields(e.out.Text())
	if len(f) != 2 || f[0] != "listening" {
		log.Fatalf("edge said %q", e.out.Text())
	}
	e.addr = f[1]
	return e
}

func (e *edgeProc) ask(q string) []string {
	e.in.WriteString(q + "\n")
	e.in.Flush()
	e.out.Scan()
	return strings.Fields(e.out.Text())
}

// cpuSeconds reads the process's user+system CPU time from /proc.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func orchestrate(n int, idle time.Duration) {
	fmt.Printf("nodefleet: %d Nodes (one process, one TCP session each) -> one Edge (child process), loopback, plaintext, GOMAXPROCS=%d\n", n, runtime.GOMAXPROCS(0))
	e := startEdge("127.0.0.1:0", 1, n)
	base := e.ask("mem")
	baseBytes, _ := strconv.ParseFloat(base[1], 64)

	ctx, cancel := context.WithCancel(context.Background())
	runtimes := make([]*node.Runtime, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		p := executiontest.New("llm", "m")
		rt, err := node.New(node.Config{
			EdgeAddr: e.addr, NodeID: fmt.Sprintf("node-%05d", i), Token: token,
			Providers: []node.Hosted{{Provider: p}}, RegisterTimeout: time.Minute,
		})
		if err != nil {
			log.Fatal(err)
		}
		runtimes[i] = rt
		wg.Go(func() { rt.Run(ctx) })
	}
	waitAll(runtimes, 0)
	regTime := time.Since(start)
	mem := e.ask("mem")
	memBytes, _ := strconv.ParseFloat(mem[1], 64)
	perNode := (memBytes - baseBytes) / float64(n)
	fmt.Printf("register all:            %v (%s Nodes ready on the Edge)\n", regTime.Round(time.Millisecond), mem[2])
	fmt.Printf("edge memory per Node:    %.1f KiB (HeapInuse+StackInuse after GC; %s goroutines)\n", perNode/1024, mem[3])

	pid := e.cmd.Process.Pid
	c0, t0 := cpuSeconds(pid), time.Now()
	time.Sleep(idle)
	c1, t1 := cpuSeconds(pid), time.Now()
	fmt.Printf("edge CPU while idle:     %.2f%% of one core over %v (heartbeats 30 s / 45 s)\n", 100*(c1-c0)/t1.Sub(t0).Seconds(), idle)

	gens := make([]uint64, n)
	for i, rt := range runtimes {
		gens[i] = rt.Status().Generation
	}
	e.cmd.Process.Kill()
	e.cmd.Wait()
	killed := time.Now()
	e2 := startEdge(e.addr, 2, n)
	waitAll(runtimes, 1)
	fmt.Printf("all ready after restart: %v from the kill (new epoch 2; default backoff 1 s x1.6, jitter 0.2)\n", time.Since(killed).Round(time.Millisecond))
	for i, rt := range runtimes {
		if g := rt.Status().Generation; g>>32 != 2 || g == gens[i] {
			log.Fatalf("node %d generation %#x after restart", i, g)
		}
	}
	cancel()
	wg.Wait()
	e2.cmd.Process.Kill()
	e2.cmd.Wait()
}

// waitAll waits until every runtime is ready on an epoch above minEpoch.
func waitAll(rts []*node.Runtime, minEpoch uint64) {
	for {
		ready := 0
		for _, rt := range rts {
			if st := rt.Status(); st.State == node.StateReady && st.Generation>>32 > minEpoch {
				ready++
			}
		}
		if ready == len(rts) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
