package edge_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
)

// The Edge's API mounted in a server of your own. Nodes would connect
// through ServeNodes; this one has none yet, so the route lists but cannot
// answer.
func ExampleServer_Handler() {
	key := "sk-example-0123456789abcdef0123456789"
	srv, err := edge.New(edge.Config{
		Epoch: 1, // from nodes.NextEpoch in a real daemon
		Nodes: []nodes.Record{{ID: "gpu-box", TokenHash: nodes.HashToken("node-token-0123456789abcdef"), Providers: []nodes.ProviderSpec{
			{ID: "vllm", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"qwen2.5-7b"}, Capacity: 4},
		}}},
		APIKeys: []edge.APIKey{{Name: "alice", Hash: edge.HashKey(key), Models: []string{"*"}}},
		Routes:  []edge.Route{{Model: "qwen", Targets: []edge.Target{{ProviderID: "vllm", Model: "qwen2.5-7b"}}}},
	})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()

	req, _ := http.NewRequest("GET", ts.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, _ := http.DefaultClient.Do(req)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Print(string(body))
	// Output: {"data":[{"created":0,"id":"qwen","object":"model","owned_by":"iop"}],"object":"list"}
}
