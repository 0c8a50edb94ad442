package edge_test

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/iop-dev/iop/execution/upstreamtest"
)

// BenchmarkGateway measures whole exchanges through a real Edge and Node in
// one process, on loopback: an OpenAI-compatible chat request from a
// net/http client, tunnelled to a fake upstream, answered whole or as a
// 50-chunk stream; and (translated50) an Anthropic Messages stream
// request served by the Chat Completions upstream, translated both ways. Its allocations per exchange (client, Edge, Node and
// upstream together) are the figure to watch across changes; the
// multi-process bench (internal/bench/gateway) gives the throughput and
// latency ratios.
func BenchmarkGateway(b *testing.B) {
	const chunks = 50
	r := newRig(b, rigOpts{capacity: 64, reply: func(q *upstreamtest.Request) upstreamtest.Script {
		if q.Stream {
			text := make([]string, chunks)
			for i := range text {
				text[i] = "tok "
			}
			return upstreamtest.Script{Text: text, Usage: upstreamtest.Usage{InputTokens: 10, OutputTokens: chunks}}
		}
		return upstreamtest.Script{Text: []string{"Hello", " there."}, Usage: upstreamtest.Usage{InputTokens: 10, OutputTokens: 2}}
	}})
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for _, kind := range []string{"whole", "stream50", "translated50"} {
		stream, path := kind != "whole", "/v1/chat/completions"
		body := `{"model":"gpt-local","stream":` + strconv.FormatBool(stream) + `,"messages":[{"role":"user","content":"hi"}]}`
		if kind == "translated50" {
			path, body = "/v1/messages", `{"model":"gpt-local","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
		}
		name := kind
		exchange := func() {
			req, _ := http.NewRequest(http.MethodPost, r.url+path, strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("Content-Type", "application/json")
			if kind == "translated50" {
				req.Header.Set("anthropic-version", "2023-06-01")
			}
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			if stream {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					// A Chat chunk, or an Anthropic text delta.
					if t := sc.Text(); strings.HasPrefix(t, "data: {") && (kind != "translated50" || strings.Contains(t, `"text_delta"`)) {
						n++
					}
				}
			} else {
				io.Copy(io.Discard, resp.Body)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || stream && n < chunks {
				b.Fatalf("status %d, %d chunks", resp.StatusCode, n)
			}
		}
		for _, par := range []bool{false, true} {
			sub := name + "/sequential"
			if par {
				sub = name + "/parallel"
			}
			b.Run(sub, func(b *testing.B) {
				b.ReportAllocs()
				if !par {
					for b.Loop() {
						exchange()
					}
					return
				}
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						exchange()
					}
				})
			})
		}
	}
}
