package nodes_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/node"
)

// Tunnel benchmarks compare the same exchange fetched directly from the
// upstream and relayed through Edge registry -> Node -> upstream, in one
// run, on loopback, plaintext, all in this process:
//
//	go test -run '^$' -bench Tunnel -benchtime 5x ./edge/nodes

// benchUpstream serves, on POST /v1/chat/completions:
//   - ?kind=bulk: 100 MB of bytes;
//   - otherwise an SSE stream of n chunks ("data: <unix-nanos> ...\n\n"),
//     back to back or gap apart.
type benchUpstream struct {
	kind string
	n    int
	gap  time.Duration
}

const bulkSize = 100 << 20

func (u *benchUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" { // the Node's health check
		io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
		return
	}
	io.Copy(io.Discard, r.Body)
	f := w.(http.Flusher)
	if u.kind == "bulk" {
		w.Header().Set("Content-Type", "application/octet-stream")
		buf := bytes.Repeat([]byte("0123456789abcdef"), 2048)
		for sent := 0; sent < bulkSize; sent += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	f.Flush()
	pad := strings.Repeat("x", 64)
	for i := range u.n {
		if u.gap > 0 && i > 0 {
			time.Sleep(u.gap)
		}
		fmt.Fprintf(w, "data: %d %s\n\n", time.Now().UnixNano(), pad)
		f.Flush()
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

type benchRig struct {
	url  string
	reg  *nodes.Registry
	gen  uint64
	stop func()
}

func newBenchRig(b *testing.B, up *benchUpstream) *benchRig {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	hs := &http.Server{Handler: up}
	go hs.Serve(ln)
	url := "http://" + ln.Addr().String()
	a, err := openai.New(openai.Config{ID: "llm", BaseURL: url})
	if err != nil {
		b.Fatal(err)
	}
	st, _ := nodes.NewStaticStore([]nodes.Record{{ID: "n1", TokenHash: nodes.HashToken(token), Providers: []nodes.ProviderSpec{{ID: "llm", Adapter: "openai", Category: execution.CategoryLocal, Capacity: 64}}}})
	reg, _ := nodes.New(nodes.Config{Store: st, Epoch: 1})
	eln, _ := net.Listen("tcp", "127.0.0.1:0")
	go reg.Serve(eln)
	rt, _ := node.New(node.Config{EdgeAddr: eln.Addr().String(), NodeID: "n1", Token: token, Providers: []node.Hosted{{Provider: a}}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { rt.Run(ctx) })
	var gen uint64
	for {
		if g, ok := reg.Current("n1"); ok {
			gen = g
			break
		}
		time.Sleep(time.Millisecond)
	}
	return &benchRig{url: url, reg: reg, gen: gen, stop: func() {
		cancel()
		wg.Wait()
		reg.Close()
		hs.Close()
	}}
}

func (r *benchRig) direct(b *testing.B) io.ReadCloser {
	resp, err := http.Post(r.url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		b.Fatal(err)
	}
	return resp.Body
}

func (r *benchRig) tunnel(b *testing.B) io.ReadCloser {
	tn, err := r.reg.OpenTunnel(context.Background(), "n1", r.gen, &nodes.TunnelRequest{ProviderID: "llm", Method: "POST", Path: "/v1/chat/completions", Target: "m",
		Header: http.Header{"Content-Type": {"application/json"}}, Body: strings.NewReader(`{"model":"m"}`)})
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := tn.Response(context.Background()); err != nil {
		b.Fatal(err)
	}
	return tn
}

func BenchmarkTunnelBulk(b *testing.B) {
	rig := newBenchRig(b, &benchUpstream{kind: "bulk"})
	defer rig.stop()
	for _, path := range []string{"direct", "tunnel"} {
		b.Run(path, func(b *testing.B) {
			b.SetBytes(bulkSize)
			for range b.N {
				var body io.ReadCloser
				if path == "direct" {
					body = rig.direct(b)
				} else {
					body = rig.tunnel(b)
				}
				n, err := io.Copy(io.Discard, body)
				body.Close()
				if err != nil || n != bulkSize {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
		})
	}
}

// BenchmarkTunnelSSE streams 20,000 chunks back to back per op; ns/chunk is
// the figure (subtract direct from tunnel for the added cost).
func BenchmarkTunnelSSE(b *testing.B) {
	const chunks = 20000
	rig := newBenchRig(b, &benchUpstream{n: chunks})
	defer rig.stop()
	for _, path := range []string{"direct", "tunnel"} {
		b.Run(path, func(b *testing.B) {
			start := time.Now()
			for range b.N {
				var body io.ReadCloser
				if path == "direct" {
					body = rig.direct(b)
				} else {
					body = rig.tunnel(b)
				}
				got := countEvents(body)
				body.Close()
				if got != chunks+1 {
					b.Fatalf("%d events", got)
				}
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*chunks), "ns/chunk")
		})
	}
}

func countEvents(r io.Reader) int {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	return n
}

// BenchmarkTunnelChunkDelay streams 500 chunks 1 ms apart; each carries its
// send time, and p50-us is the median of (arrival - send).
func BenchmarkTunnelChunkDelay(b *testing.B) {
	rig := newBenchRig(b, &benchUpstream{n: 500, gap: time.Millisecond})
	defer rig.stop()
	for _, path := range []string{"direct", "tunnel"} {
		b.Run(path, func(b *testing.B) {
			var delays []time.Duration
			for range b.N {
				var body io.ReadCloser
				if path == "direct" {
					body = rig.direct(b)
				} else {
					body = rig.tunnel(b)
				}
				sc := bufio.NewScanner(body)
				for sc.Scan() {
					line := sc.Text()
					f := strings.Fields(strings.TrimPrefix(line, "data: "))
					if len(f) < 2 {
						continue
					}
					ns, err := strconv.ParseInt(f[0], 10, 64)
					if err == nil {
						delays = append(delays, time.Since(time.Unix(0, ns)))
					}
				}
				body.Close()
			}
			slices.Sort(delays)
			b.ReportMetric(float64(delays[len(delays)/2].Nanoseconds())/1e3, "p50-us")
			b.ReportMetric(float64(delays[len(delays)*99/100].Nanoseconds())/1e3, "p99-us")
		})
	}
}
