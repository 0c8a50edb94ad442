package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

// recorder keeps a tunnelled answer.
type recorder struct {
	status int
	body   strings.Builder
}

func (r *recorder) WriteHead(status int, _ http.Header) error { r.status = status; return nil }
func (r *recorder) Write(p []byte) (int, error)               { return r.body.Write(p) }

// The raw tunnel: a client's request in the upstream's own format is
// relayed as it is (the Edge has already put the provider's model name in
// it), and the answer comes back unchanged, here a buffered Chat
// Completions answer. A path outside Routes is refused before any I/O.
func Example_tunnel() {
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"qwen3-8b"}, Reply: func(*upstreamtest.Request) upstreamtest.Script {
		return upstreamtest.Script{Text: []string{"Hi!"}}
	}})
	url := srv.Start()
	defer srv.Close()

	a, err := openai.New(openai.Config{ID: "vllm", BaseURL: url})
	if err != nil {
		fmt.Println(err)
		return
	}
	var rec recorder
	err = a.Tunnel(context.Background(), &execution.TunnelRequest{ProviderID: "vllm", Method: "POST", Path: "/v1/chat/completions",
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   strings.NewReader(`{"model":"qwen3-8b","messages":[{"role":"user","content":"hello"}]}`)}, &rec)
	fmt.Println(rec.status, err, strings.Contains(rec.body.String(), `"content":"Hi!"`))

	err = a.Tunnel(context.Background(), &execution.TunnelRequest{ProviderID: "vllm", Method: "POST", Path: "/admin/shutdown"}, &rec)
	fmt.Println(err != nil, len(srv.Requests()))
	// Output:
	// 200 <nil> true
	// true 1
}
