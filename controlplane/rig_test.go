package controlplane_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/backoff"
	"github.com/iop-dev/iop/internal/testpki"
	"github.com/iop-dev/iop/node"
)

// net/http lingers half a second on a connection it closes after refusing
// an oversized body; that goroutine belongs to the standard library.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("net/http.(*conn).closeWriteAndWait"))
}

const (
	operatorToken = "op-token-0123456789abcdef0123456789"
	nodeToken     = "node-token-0123456789abcdef0123"
	apiKey        = "sk-test-0123456789abcdef0123456789abcdef"
)

func edgeToken(id string) string { return "edge-token-" + id + "-0123456789abcdef" }

var fast = backoff.Config{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}

// hubRig is a Hub (Edge listener and operator HTTP server on loopback).
type hubRig struct {
	t    *testing.T
	hub  *controlplane.Hub
	addr string // Edge listener
	url  string // operator HTTP
	stop func()
}

func startHub(t *testing.T, addr string, mutate func(*controlplane.Config)) *hubRig {
	t.Helper()
	cfg := controlplane.Config{
		Edges: []controlplane.EdgeRecord{
			{ID: "e1", TokenHash: controlplane.HashToken(edgeToken("e1"))},
			{ID: "e2", TokenHash: controlplane.HashToken(edgeToken("e2"))},
			{ID: "e3", TokenHash: controlplane.HashToken(edgeToken("e3"))}, // configured, never connects
		},
		Operators:    []controlplane.Operator{{Name: "alice", TokenHash: controlplane.HashToken(operatorToken)}},
		ProbeTimeout: 500 * time.Millisecond,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	hub, err := controlplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	for range 100 { // a restarted Hub takes its old port back
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	return serveHub(t, hub, ln)
}

// serveHub serves hub's Edge listener on ln and its operator API on a
// fresh port.
func serveHub(t *testing.T, hub *controlplane.Hub, ln net.Listener) *hubRig {
	t.Helper()
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	hs := &http.Server{Handler: hub.Handler(), ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { hub.ServeEdges(ln) })
	wg.Go(func() { hs.Serve(hl) })
	r := &hubRig{t: t, hub: hub, addr: ln.Addr().String(), url: "http://" + hl.Addr().String()}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			hs.Close()
			hub.Close()
			wg.Wait()
		})
	}
	t.Cleanup(r.stop)
	return r
}

// edgeRig is an Edge with one Node (started on demand) hosting an
// OpenAI-format provider in front of a fake upstream, linked to a Hub.
type edgeRig struct {
	t        *testing.T
	id       string
	srv      *edge.Server
	url      string
	nodeAddr string
	upstream *upstreamtest.Server
	cfg      edge.Config
	source   func() (edge.Config, error)
	nodeTLS  *tls.Config // the Node's side of a mutual-TLS link; nil: plaintext

	mu        sync.Mutex
	stopNode  context.CancelFunc
	nodeDone  chan struct{}
	stopExtra context.CancelFunc
	extraDone chan struct{}
	stopLink  context.CancelFunc
	linkDone  chan struct{}
}

// edgeOption changes an Edge rig before its Edge starts.
type edgeOption func(*edgeRig)

// withNodeCertificate links the Edge and its Node over mutual TLS, the
// Node's client certificate expiring after left.
func withNodeCertificate(left time.Duration) edgeOption {
	return func(r *edgeRig) {
		ca := testpki.NewCA(r.t, "edge CA")
		r.cfg.NodeTLS = &tls.Config{Certificates: []tls.Certificate{ca.Issue(r.t, testpki.Leaf{})}, ClientCAs: ca.Pool, ClientAuth: tls.RequireAndVerifyClientCert}
		r.nodeTLS = &tls.Config{RootCAs: ca.Pool, ServerName: "127.0.0.1",
			Certificates: []tls.Certificate{ca.Issue(r.t, testpki.Leaf{NotAfter: time.Now().Add(left)})}}
	}
}

func startEdge(t *testing.T, id, hubAddr string, reply func(*upstreamtest.Request) upstreamtest.Script, opts ...edgeOption) *edgeRig {
	t.Helper()
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"up-model"}, Reply: reply})
	up.Start()
	t.Cleanup(up.Close)
	nodeID := "n-" + id
	cfg := edge.Config{
		Epoch: 1,
		Nodes: []nodes.Record{{ID: nodeID, TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "p-" + id, Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"up-model"}, Capacity: 4, LongContextCapacity: 1},
		}}},
		APIKeys:      []edge.APIKey{{Name: "k", Hash: edge.HashKey(apiKey), Models: []string{"*"}}},
		Routes:       []edge.Route{{Model: "m", Targets: []edge.Target{{ProviderID: "p-" + id, Model: "up-model"}}}},
		QueueTimeout: 300 * time.Millisecond,
	}
	r := &edgeRig{t: t, id: id, upstream: up, cfg: cfg}
	for _, o := range opts {
		o(r)
	}
	cfg = r.cfg
	cfg.ConfigSource = func() (edge.Config, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.source != nil {
			return r.source()
		}
		return r.cfg, nil
	}
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = srv
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	r.url = "http://" + apiLn.Addr().String()
	r.nodeAddr = nodeLn.Addr().String()
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	if hubAddr != "" {
		r.link(hubAddr)
	}
	t.Cleanup(func() {
		r.stopExtraNode()
		r.stopNodeRuntime()
		r.unlink()
		srv.Close()
		wg.Wait()
	})
	return r
}

// link connects the Edge to a Hub.
func (r *edgeRig) link(hubAddr string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.mu.Lock()
	r.stopLink, r.linkDone = cancel, done
	r.mu.Unlock()
	go func() {
		defer close(done)
		r.srv.ConnectControlPlane(ctx, controlplane.ConnectorConfig{HubAddr: hubAddr, EdgeID: r.id, Token: edgeToken(r.id), Backoff: fast})
	}()
}

func (r *edgeRig) unlink() {
	r.mu.Lock()
	cancel, done := r.stopLink, r.linkDone
	r.stopLink, r.linkDone = nil, nil
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// startNode starts the Edge's Node; it stays up until stopNodeRuntime.
func (r *edgeRig) startNode() {
	_, cancel, done := r.runNode()
	r.mu.Lock()
	r.stopNode, r.nodeDone = cancel, done
	r.mu.Unlock()
}

// startExtraNode starts a second runtime with the same node id and token
// (a duplicate); stopExtraNode ends it.
func (r *edgeRig) startExtraNode() *node.Runtime {
	rt, cancel, done := r.runNode()
	r.mu.Lock()
	r.stopExtra, r.extraDone = cancel, done
	r.mu.Unlock()
	return rt
}

func (r *edgeRig) stopExtraNode() {
	r.mu.Lock()
	cancel, done := r.stopExtra, r.extraDone
	r.stopExtra, r.extraDone = nil, nil
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

func (r *edgeRig) runNode() (*node.Runtime, context.CancelFunc, chan struct{}) {
	p, err := oaadapter.New(oaadapter.Config{ID: "p-" + r.id, BaseURL: r.upstream.URL(), Models: []string{"up-model"}})
	if err != nil {
		r.t.Fatal(err)
	}
	rt, err := node.New(node.Config{EdgeAddr: r.nodeAddr, NodeID: "n-" + r.id, Token: nodeToken, TLS: r.nodeTLS,
		Providers: []node.Hosted{{Provider: p}}, Backoff: node.Backoff(fast)})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		rt.Run(ctx)
	}()
	return rt, cancel, done
}

func (r *edgeRig) stopNodeRuntime() {
	r.mu.Lock()
	cancel, done := r.stopNode, r.nodeDone
	r.stopNode, r.nodeDone = nil, nil
	r.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// waitFor polls cond until it holds; it synchronizes with asynchronous
// state, it does not measure time.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nodeView returns a Node's view at the Hub.
func nodeView(h *controlplane.Hub, edgeID, nodeID string) (controlplane.NodeView, bool) {
	e, ok := h.Edge(edgeID)
	if !ok {
		return controlplane.NodeView{}, false
	}
	for _, n := range e.Nodes {
		if n.ID == nodeID {
			return n, true
		}
	}
	return controlplane.NodeView{}, false
}

// eventLog collects Hub events in the background.
type eventLog struct {
	mu     sync.Mutex
	events []controlplane.Event
	resync int
	stop   func()
}

func watchEvents(t *testing.T, h *controlplane.Hub) *eventLog {
	l := &eventLog{}
	sub := h.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := sub.Next(ctx)
			if err == controlplane.ErrResync {
				l.mu.Lock()
				l.resync++
				l.mu.Unlock()
				continue
			}
			if err != nil {
				return
			}
			l.mu.Lock()
			l.events = append(l.events, ev)
			l.mu.Unlock()
		}
	}()
	l.stop = func() {
		cancel()
		sub.Close()
		<-done
	}
	t.Cleanup(l.stop)
	return l
}

func (l *eventLog) count(kind controlplane.EventKind, edgeID, nodeID string) int {
	return len(l.of(kind, edgeID, nodeID))
}

// of returns the events of kind for edgeID (and nodeID, unless empty).
func (l *eventLog) of(kind controlplane.EventKind, edgeID, nodeID string) []controlplane.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []controlplane.Event
	for _, e := range l.events {
		if e.Kind == kind && e.EdgeID == edgeID && (nodeID == "" || e.NodeID == nodeID) {
			out = append(out, e)
		}
	}
	return out
}

// holdRequest sends a chat request whose prompt, "hold", the test's
// upstream holds, and returns where its status arrives (0: no answer);
// it returns once the upstream has the request.
func holdRequest(t *testing.T, e *edgeRig) <-chan int {
	t.Helper()
	held := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hold"}]}`))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			held <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	waitFor(t, "the held request at the upstream", func() bool {
		return slices.ContainsFunc(e.upstream.Requests(), func(q *upstreamtest.Request) bool { return q.Prompt == "hold" })
	})
	return held
}

// commandStream posts an operator command with token, asking for its
// phases as SSE, and returns the answer (closed with the test).
func commandStream(t *testing.T, ctx context.Context, hubURL, token, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", hubURL+"/api/edges/e1/commands", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}
