package edge_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// refusingNode registers id at the Edge's Node listener as a hand-driven
// Node whose one provider is ready, and refuses every stream the Edge
// opens to it unread (wire.ResetRefused), as a Node past its GOAWAY does,
// until the test ends. It returns the count of streams it refused.
func refusingNode(t *testing.T, addr, id, provider string) *atomic.Int32 {
	t.Helper()
	return scriptedNode(t, addr, id, provider, nil)
}

// scriptedNode is refusingNode with a script: answer, when not nil, gets
// each stream the Edge opens (n counts them from 0) and reports whether
// it took it; a stream it did not take is refused and counted.
func scriptedNode(t *testing.T, addr, id, provider string, answer func(n int, st *wire.Stream) bool) *atomic.Int32 {
	t.Helper()
	sess, err := wire.Dial(ctx(t), "tcp", addr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	st, err := sess.OpenStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(m any) *iopv1.Envelope {
		t.Helper()
		if err := st.WriteMessage(nodewire.Msg(m)); err != nil {
			t.Fatal(err)
		}
		env, err := st.ReadMessage(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	reg := ask(&iopv1.RegisterRequest{NodeId: id, Credential: []byte(nodeToken)}).GetRegisterResponse()
	if !reg.GetAccepted() {
		t.Fatalf("registration of %s: %v", id, reg)
	}
	ready := ask(&iopv1.NodeReadyRequest{Generation: reg.GetGeneration(), Revision: reg.GetConfig().GetRevision(), Providers: []*iopv1.ProviderSnapshot{
		{ProviderId: provider, Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 4},
	}})
	if !ready.GetNodeReadyResponse().GetAccepted() {
		t.Fatalf("ready of %s: %v", id, ready)
	}
	var refused atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			s, err := sess.AcceptStream(context.Background())
			if err != nil {
				return // the session ended
			}
			if answer == nil || !answer(n, s) {
				// Counted before the reset leaves: the Edge may answer
				// its client, and the test read the count, before this
				// goroutine runs again.
				refused.Add(1)
				s.Reset(wire.ResetRefused)
			}
		}
	}()
	t.Cleanup(func() { sess.Close(); <-done })
	return &refused
}

// waitAvailable waits until the Edge's registry offers provider on node.
func waitAvailable(t *testing.T, r *rig, node, provider string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, ok := r.srv.Registry().Available(node, provider); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s never became available", provider, node)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestCountTokensSkipsARefusingNode: count_tokens goes to its route's
// next Anthropic provider when the first one's Node refused the tunnel
// unopened (the request never reached it), instead of falling back to the
// Edge's estimate.
func TestCountTokensSkipsARefusingNode(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		c.Nodes = append(c.Nodes, nodes.Record{ID: "refuser", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "refused-claude", Adapter: "anthropic", Category: execution.CategoryAPI, Models: []string{"up-model"}, Capacity: 4},
		}})
		c.Routes = append(c.Routes, edge.Route{Model: "two-claudes", Targets: []edge.Target{
			{ProviderID: "refused-claude", Model: "up-model"}, {ProviderID: "claude", Model: "up-model"},
		}})
	}})
	refused := refusingNode(t, r.nodeAddr, "refuser", "refused-claude")
	waitAvailable(t, r, "refuser", "refused-claude")
	status, body, h := r.postAnthropic(t, "/v1/messages/count_tokens", apiKey, `{"model":"two-claudes","messages":[{"role":"user","content":"hello"}]}`)
	var ct struct {
		InputTokens int `json:"input_tokens"`
	}
	json.Unmarshal([]byte(body), &ct)
	if status != 200 || ct.InputTokens == 0 || h.Get("X-IOP-Token-Count") != "" {
		t.Fatalf("count_tokens: %d %s, X-IOP-Token-Count %q; want the second provider's count", status, body, h.Get("X-IOP-Token-Count"))
	}
	if n := refused.Load(); n != 1 {
		t.Fatalf("the refusing Node saw %d tunnels, want 1", n)
	}
	if calls := r.calls(); len(calls) != 1 || calls[0].API != "count_tokens" {
		t.Fatalf("upstream calls %v, want one count_tokens", calls)
	}
}

// TestStoredResponseOnARefusingNode: reading a stored response whose
// Node refuses the tunnel unopened (a draining Node) is a 503 with
// Retry-After, which clients retry, not a 502.
func TestStoredResponseOnARefusingNode(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		c.Nodes = append(c.Nodes, nodes.Record{ID: "scripted", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "scripted-oa", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: 4},
		}})
		c.Routes = append(c.Routes, edge.Route{Model: "via-scripted", Targets: []edge.Target{{ProviderID: "scripted-oa", Model: "up-model"}}})
	}})
	// The first stream is a Responses request, answered whole; every
	// later one is refused.
	refused := scriptedNode(t, r.nodeAddr, "scripted", "scripted-oa", func(n int, st *wire.Stream) bool {
		if n > 0 {
			return false
		}
		defer st.Close()
		// The request (its message, then its body to the Edge's end),
		// read whole before answering, as the Node does.
		if env, err := st.ReadMessage(context.Background()); err != nil || env.GetProviderTunnelRequest() == nil {
			t.Errorf("the scripted Node's first stream: %v %v", env, err)
			return true
		}
		io.Copy(io.Discard, st)
		st.WriteMessage(nodewire.Msg(&iopv1.ProviderTunnelResponse{Status: 200, Headers: []*iopv1.Header{{Name: "Content-Type", Value: "application/json"}}}))
		st.Write([]byte(`{"id":"resp_scripted","object":"response","status":"completed","model":"up-model","output":[],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`))
		st.WriteMessage(nodewire.Msg(&iopv1.ProviderTunnelEnd{Ok: true}))
		st.CloseWrite()
		return true
	})
	waitAvailable(t, r, "scripted", "scripted-oa")
	auth := map[string]string{"Authorization": "Bearer " + apiKey, "Content-Type": "application/json"}
	resp, body := r.do(t, "POST", "/v1/responses", `{"model":"via-scripted","input":"hello"}`, auth)
	if resp.StatusCode != 200 || !strings.Contains(body, "resp_scripted") {
		t.Fatalf("the Responses request: %d %s", resp.StatusCode, body)
	}
	resp, got := r.do(t, "GET", "/v1/responses/resp_scripted", "", auth)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the stored response on a refusing Node: %d, Retry-After %q\n%s", resp.StatusCode, resp.Header.Get("Retry-After"), got)
	}
	if n := refused.Load(); n != 1 {
		t.Fatalf("the scripted Node refused %d streams, want 1 (the read)", n)
	}
}
