// Command soak runs an Edge, a Node and a fake upstream in this process at
// a steady load for a long time (a quarter of it Anthropic Messages
// requests translated to the Chat Completions upstream, the rest
// untranslated) and prints, at every interval, the heap in use, the
// goroutine count, the requests answered and lost, and the leases the
// Edge holds: a leak shows as a line that keeps climbing. It is not run
// in CI.
//
//	go run ./internal/bench/soak -d 30m -c 32 -every 30s
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/faulttest"
	"github.com/iop-dev/iop/node"
)

const (
	apiKey    = "sk-soak-0123456789abcdef0123456789abcdef"
	nodeToken = "node-token-soak-0123456789abcdef"
)

func main() {
	dur := flag.Duration("d", 30*time.Minute, "how long to run")
	conc := flag.Int("c", 32, "concurrent clients")
	every := flag.Duration("every", 30*time.Second, "report interval")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *dur)
	defer cancel()
	if err := run(ctx, *conc, *every); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, conc int, every time.Duration) error {
	// A mix of answers: short, long streams, mid-stream errors, 500s.
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"up-model"}, Reply: func(q *upstreamtest.Request) upstreamtest.Script {
		switch rand.IntN(20) {
		case 0:
			return upstreamtest.Script{Text: []string{"a", "b", "c"}, ErrorAfter: 1}
		case 1:
			return upstreamtest.Script{Status: 500}
		case 2, 3, 4:
			text := make([]string, 100)
			for i := range text {
				text[i] = "token "
			}
			return upstreamtest.Script{Text: text, ChunkDelay: time.Millisecond}
		}
		return upstreamtest.Echo(q)
	}})
	up.Start()
	defer up.Close()
	srv, err := edge.New(edge.Config{Epoch: 1,
		Nodes: []nodes.Record{{ID: "n1", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "up", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: conc}}}},
		APIKeys: []edge.APIKey{{Name: "soak", Hash: edge.HashKey(apiKey), Models: []string{"*"}}},
		Routes:  []edge.Route{{Model: "m", Targets: []edge.Target{{ProviderID: "up", Model: "up-model"}}}},
	})
	if err != nil {
		return err
	}
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	defer func() { srv.Close(); wg.Wait() }()
	pr, _ := oaadapter.New(oaadapter.Config{ID: "up", BaseURL: up.URL(), Models: []string{"up-model"}})
	rt, err := node.New(node.Config{EdgeAddr: nodeLn.Addr().String(), NodeID: "n1", Token: nodeToken, Providers: []node.Hosted{{Provider: pr}}})
	if err != nil {
		return err
	}
	nctx, ncancel := context.WithCancel(context.Background())
	var nwg sync.WaitGroup
	nwg.Go(func() { rt.Run(nctx) })
	defer func() { ncancel(); nwg.Wait() }()
	for {
		if _, ok := srv.Registry().Available("n1", "up"); ok {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	url := "http://" + apiLn.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc * 2}}
	var answered, lost atomic.Int64
	var lwg sync.WaitGroup
	for i := range conc {
		lwg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				prompt := fmt.Sprintf("soak %d %d", i, n)
				var res faulttest.Result
				if n%4 == 3 {
					// Anthropic Messages to the Chat Completions provider:
					// the translate path, decoded and rendered.
					res = faulttest.Messages(rctx, client, url, apiKey, "m", prompt, n%8 == 3)
				} else {
					res = faulttest.Chat(rctx, client, url, apiKey, "m", prompt, n%2 == 0, 0)
				}
				cancel()
				if ctx.Err() != nil {
					return
				}
				if res.Outcome == faulttest.Lost {
					lost.Add(1)
				} else {
					answered.Add(1)
				}
			}
		})
	}
	fmt.Printf("%-10s %12s %11s %10s %6s %7s\n", "elapsed", "heap_inuse", "goroutines", "answered", "lost", "leases")
	start := time.Now()
	report := func() {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		leases := 0
		if n, ok := srv.Registry().Node("n1"); ok && len(n.Providers) > 0 {
			leases = n.Providers[0].InFlight
		}
		fmt.Printf("%-10s %9.1f MiB %11d %10d %6d %7d\n", time.Since(start).Round(time.Second), float64(ms.HeapInuse)/(1<<20),
			runtime.NumGoroutine(), answered.Load(), lost.Load(), leases)
	}
	report()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			lwg.Wait()
			client.CloseIdleConnections()
			report()
			if lost.Load() > 0 {
				fmt.Fprintln(os.Stderr, "soak: requests lost:", lost.Load())
				os.Exit(1)
			}
			return nil
		case <-t.C:
			report()
		}
	}
}
