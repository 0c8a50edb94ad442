package upstream

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/h1"
)

type discardTunnel struct{}

func (discardTunnel) WriteHead(int, http.Header) error { return nil }
func (discardTunnel) Write(p []byte) (int, error)      { return len(p), nil }

// BenchmarkTunnel relays one exchange with a real loopback upstream,
// through each transport NewClient may pick: net/http's and h1's. Compare
// them side by side in one run (-bench Tunnel): ns/op is the whole
// exchange, both ends in this process. "default" is NewClient's own
// client, which calls h1 without going through http.Client.
func BenchmarkTunnel(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"up","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("token ", 60) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":60,"total_tokens":100}}`)
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"token "}}]}` + "\n\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		body.ReadFrom(r.Body)
		if r.URL.Path != "/v1/stream" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", fmt.Sprint(len(answer)))
			w.Write(answer)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for range 200 {
			w.Write(chunk)
			f.Flush()
		}
	}))
	defer srv.Close()
	body := []byte(`{"model":"up","messages":[{"role":"user","content":"` + strings.Repeat("hello ", 150) + `"}]}`)
	routes := []Route{{Method: http.MethodPost, Path: "/v1/chat/completions"}, {Method: http.MethodPost, Path: "/v1/stream"}}
	transports := []struct {
		name string
		rt   func() http.RoundTripper
	}{
		{"net-http", func() http.RoundTripper {
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.MaxIdleConnsPerHost = 256
			return tr
		}},
		{"h1", func() http.RoundTripper { return &h1.Transport{MaxIdleConnsPerHost: 256} }},
		// default is what a Node's adapter gets with no HTTPClient: h1,
		// called without http.Client.
		{"default", nil},
	}
	for _, stream := range []bool{false, true} {
		for _, tc := range transports {
			name := tc.name + "/whole"
			path := "/v1/chat/completions"
			if stream {
				name, path = tc.name+"/stream200", "/v1/stream"
			}
			b.Run(name, func(b *testing.B) {
				var hc *http.Client
				if tc.rt != nil {
					hc = &http.Client{Transport: tc.rt()}
				}
				c, err := NewClient(srv.URL, hc)
				if err != nil {
					b.Fatal(err)
				}
				defer c.HTTP.CloseIdleConnections()
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					w := discardTunnel{}
					for pb.Next() {
						req := &execution.TunnelRequest{Method: http.MethodPost, Path: path,
							Header: http.Header{"Content-Type": {"application/json"}}, Body: bytes.NewReader(body)}
						if err := c.Tunnel(context.Background(), routes, req, w); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
