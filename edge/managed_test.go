package edge_test

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire/iopv1"
)

const upstreamKey = "sk-hosted-upstream-0123456789abcdef"

// managedRig is an Edge in managed mode (mutual TLS with the Edge CA,
// leased credentials) in front of a fake hosted API that requires its key.
type managedRig struct {
	t        *testing.T
	ca       *identity.CA
	srv      *edge.Server
	url      string
	nodeAddr string
	upstream *upstreamtest.Server
	cfg      edge.Config
	leaseKey ed25519.PrivateKey
	state    string // the Node's state directory
}

// newManagedRig starts a managed Edge whose one provider, leased, calls
// a fake upstream; reply, when given, scripts the upstream's answers.
func newManagedRig(t *testing.T, reply ...func(*upstreamtest.Request) upstreamtest.Script) *managedRig {
	t.Helper()
	ca, err := identity.NewCA("iop.test", 0)
	if err != nil {
		t.Fatal(err)
	}
	ucfg := upstreamtest.Config{Models: []string{"up-model"}, APIKey: upstreamKey}
	if len(reply) > 0 {
		ucfg.Reply = reply[0]
	}
	up := upstreamtest.New(ucfg)
	up.Start()
	t.Cleanup(up.Close)
	t.Setenv("IOP_TEST_UPSTREAM_KEY", upstreamKey)

	certPEM, keyPEM, err := ca.Issue(identity.KindEdge, "edge-1", identity.Options{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := tls.X509KeyPair(certPEM, keyPEM)
	_, lk, _ := ed25519.GenerateKey(nil)
	r := &managedRig{t: t, ca: ca, upstream: up, leaseKey: lk, state: t.TempDir()}
	r.cfg = edge.Config{
		Epoch: 1,
		Nodes: []nodes.Record{{ID: "n1", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "hosted", Adapter: "openai", Category: execution.CategoryAPI, Models: []string{"up-model"}, Capacity: 2, Credential: "upstream-key"},
		}}},
		APIKeys:     []edge.APIKey{{Name: "alice", Hash: edge.HashKey(apiKey), Models: []string{"*"}}},
		Routes:      []edge.Route{{Model: "gpt", Targets: []edge.Target{{ProviderID: "hosted", Model: "up-model"}}}},
		Credentials: []edge.Credential{{ID: "upstream-key", Revision: 1, Secret: execution.EnvCredential("IOP_TEST_UPSTREAM_KEY")}},
		Leases:      &edge.LeaseSigner{KeyID: "edge-1-lease", Key: lk, TTL: 30 * time.Second},
		Managed:     &edge.Managed{TrustDomain: "iop.test"},
		NodeTLS:     &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool()},
	}
	r.srv, r.url, r.nodeAddr = serveEdge(t, r.cfg)
	return r
}

// serveEdge starts an Edge for cfg with its API and Node listeners on
// loopback until cleanup, and returns it with the API's URL and the Node
// address.
func serveEdge(t testing.TB, cfg edge.Config) (srv *edge.Server, url, nodeAddr string) {
	t.Helper()
	srv, err := edge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apiLn, _ := net.Listen("tcp", "127.0.0.1:0")
	nodeLn, _ := net.Listen("tcp", "127.0.0.1:0")
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	return srv, "http://" + apiLn.Addr().String(), nodeLn.Addr().String()
}

// nodeCert issues a client certificate from ca for a node id.
func nodeCert(t *testing.T, ca *identity.CA, id string, opt identity.Options) tls.Certificate {
	t.Helper()
	c, k, err := ca.Issue(identity.KindNode, id, opt)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// runNode starts a Node registering as n1 with the given client
// certificates and lease opener (nil: none); it stops at cleanup.
func (r *managedRig) runNode(certs []tls.Certificate, leases *credentiallease.Opener, localKey string) *node.Runtime {
	r.t.Helper()
	cfg := oaadapter.Config{ID: "hosted", BaseURL: r.upstream.URL(), Models: []string{"up-model"}, Category: execution.CategoryAPI}
	if localKey != "" {
		r.t.Setenv("IOP_TEST_LOCAL_KEY", localKey)
		cfg.Credential = execution.EnvCredential("IOP_TEST_LOCAL_KEY")
	}
	p, err := oaadapter.New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	rt, err := node.New(node.Config{EdgeAddr: r.nodeAddr, NodeID: "n1", Token: nodeToken,
		TLS:       &tls.Config{RootCAs: r.ca.Pool(), ServerName: "127.0.0.1", Certificates: certs},
		Providers: []node.Hosted{{Provider: p}}, Leases: leases,
		Backoff: node.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rt.Run(ctx) }()
	r.t.Cleanup(func() { cancel(); <-done })
	return rt
}

// opener builds the Node's lease opener from files in its state
// directory, pinning the Edge's lease key.
func (r *managedRig) opener(pinned ed25519.PublicKey) *credentiallease.Opener {
	r.t.Helper()
	key, err := credentiallease.LoadOrCreateNodeKey(filepath.Join(r.state, "lease.key"))
	if err != nil {
		r.t.Fatal(err)
	}
	rc, err := credentiallease.OpenReplayFile(filepath.Join(r.state, "replay"))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { rc.Close() })
	op, err := credentiallease.NewOpener(credentiallease.OpenerConfig{NodeID: "n1", Key: key,
		EdgeKeys: map[string]ed25519.PublicKey{"edge-1-lease": pinned}, Replay: rc})
	if err != nil {
		r.t.Fatal(err)
	}
	return op
}

func (r *managedRig) chat(prompt string) (int, string) {
	status, _, body := (&rig{url: r.url}).post(r.t, apiKey, chatJSON("gpt", prompt))
	return status, body
}

func (r *managedRig) upstreamCalls() int {
	n := 0
	for _, q := range r.upstream.Requests() {
		if q.API == "chat" {
			n++
		}
	}
	return n
}

// TestManagedLeasedCredential: a hosted-API key reaches the Node only as a
// lease for each call; the Node's own local key is never used, not even
// as a fallback, and revocation and rotation take effect at once.
func TestManagedLeasedCredential(t *testing.T) {
	r := newManagedRig(t)
	// A wrong local key on the Node: any fallback to it would get a 401.
	rt := r.runNode([]tls.Certificate{nodeCert(t, r.ca, "n1", identity.Options{})}, r.opener(r.leaseKey.Public().(ed25519.PublicKey)), "sk-wrong-local-key-0123456789")
	waitUntil(t, "the leased provider available over mutual TLS", func() bool { _, ok := r.srv.Registry().Available("n1", "hosted"); return ok })
	for i := range 3 {
		if status, body := r.chat("hello"); status != 200 {
			t.Fatalf("call %d: %d %s", i, status, body)
		}
	}
	if r.upstreamCalls() != 3 {
		t.Fatalf("upstream calls %d", r.upstreamCalls())
	}
	for _, q := range r.upstream.Requests() {
		if q.Header.Get("Authorization") != "Bearer "+upstreamKey {
			t.Fatalf("the upstream saw %q", q.Header.Get("Authorization"))
		}
	}

	// Revoked: the Edge issues no lease and the request is refused
	// before reaching the Node; the upstream is not called.
	cfg := r.cfg
	cfg.Credentials = []edge.Credential{{ID: "upstream-key", Revision: 1, Secret: execution.EnvCredential("IOP_TEST_UPSTREAM_KEY"), Revoked: true}}
	first := rt.Status().Revision
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if status, _ := r.chat("revoked"); status != 503 {
		t.Fatalf("a revoked credential: %d", status)
	}
	if r.upstreamCalls() != 3 {
		t.Fatalf("a revoked credential reached the upstream")
	}
	// The Node holds the revocation too.
	waitUntil(t, "the node applied the revocation", func() bool { return rt.Status().Revision > first })
	// Rotated: revision 2 with a new value the provider now requires.
	// The call right after the reload is not refused by the Node, which
	// may still hold the revocation: the Edge holds it until the Node has
	// applied the policy that lifts it (revision 2 is now the minimum).
	r.upstream.SetAPIKey("sk-rotated-0123456789abcdef")
	t.Setenv("IOP_TEST_UPSTREAM_KEY", "sk-rotated-0123456789abcdef")
	cfg.Credentials = []edge.Credential{{ID: "upstream-key", Revision: 2, Secret: execution.EnvCredential("IOP_TEST_UPSTREAM_KEY")}}
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if status, body := r.chat("rotated"); status != 200 {
		t.Fatalf("after rotation: %d %s", status, body)
	}
	reqs := r.upstream.Requests()
	if got := reqs[len(reqs)-1].Header.Get("Authorization"); got != "Bearer sk-rotated-0123456789abcdef" {
		t.Fatalf("after rotation the upstream saw %q", got)
	}
}

// TestRevocationReachesQueuedRequests: a request waiting for a slot when
// its credential is revoked is refused at once (503: its provider is no
// candidate any more), not dispatched when a slot frees with a lease for
// the revoked credential. The lease was issued from the configuration
// the request was admitted under: the Node then used the revoked key, or
// refused it (502) once it held the revocation.
func TestRevocationReachesQueuedRequests(t *testing.T) {
	g := newGate()
	r := newManagedRig(t, g.reply)
	r.runNode([]tls.Certificate{nodeCert(t, r.ca, "n1", identity.Options{})}, r.opener(r.leaseKey.Public().(ed25519.PublicKey)), "")
	waitUntil(t, "the leased provider available", func() bool { _, ok := r.srv.Registry().Available("n1", "hosted"); return ok })
	readyz := func() int {
		resp, err := http.Get(r.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := readyz(); code != 200 {
		t.Fatalf("readyz with the provider online: %d", code)
	}
	var wg sync.WaitGroup
	statuses := make(chan string, 3)
	post := func(prompt string) {
		wg.Go(func() {
			status, _ := r.chat(prompt)
			statuses <- fmt.Sprintf("%s %d", prompt, status)
		})
	}
	post("hold 1")
	post("hold 2") // capacity 2: both slots held
	waitUntil(t, "both slots held", func() bool { return len(g.served()) == 2 })
	post("queued")
	waitUntil(t, "the third request queued", func() bool { return r.srv.PoolStats().Queued == 1 })

	cfg := r.cfg
	cfg.Credentials = []edge.Credential{{ID: "upstream-key", Revision: 1, Secret: execution.EnvCredential("IOP_TEST_UPSTREAM_KEY"), Revoked: true}}
	if err := r.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-statuses:
		if got != "queued 503" {
			t.Fatalf("the queued request: %s, want 503", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the queued request still waits after its credential was revoked")
	}
	// The route's one provider can take nothing while its credential is
	// revoked: the Edge is not ready.
	if code := readyz(); code != 503 {
		t.Fatalf("readyz with the route's one credential revoked: %d", code)
	}
	close(g.release)
	if got := ended(&wg, statuses); !slices.Equal(got, []string{"hold 1 200", "hold 2 200"}) {
		t.Fatalf("the held requests: %q", got)
	}
	if r.upstreamCalls() != 2 {
		t.Fatalf("%d upstream calls, want the two held ones only", r.upstreamCalls())
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestManagedLeaseRefusedByNode: a lease the Node cannot verify (it pins
// another Edge key) fails the call closed: no upstream call, no local
// credential.
func TestManagedLeaseRefusedByNode(t *testing.T) {
	r := newManagedRig(t)
	_, other, _ := ed25519.GenerateKey(nil)
	r.runNode([]tls.Certificate{nodeCert(t, r.ca, "n1", identity.Options{})}, r.opener(other.Public().(ed25519.PublicKey)), upstreamKey)
	waitUntil(t, "the leased provider available", func() bool { _, ok := r.srv.Registry().Available("n1", "hosted"); return ok })
	status, body := r.chat("hello")
	if status != 502 {
		t.Fatalf("a lease the node refuses: %d %s", status, body)
	}
	if r.upstreamCalls() != 0 {
		t.Fatalf("the upstream was called %d times (a fallback credential)", r.upstreamCalls())
	}
}

// TestManagedNodeWithoutLeases: a Node that takes no leases does not host
// the leased provider, so nothing reaches the upstream with its local key.
func TestManagedNodeWithoutLeases(t *testing.T) {
	r := newManagedRig(t)
	rt := r.runNode([]tls.Certificate{nodeCert(t, r.ca, "n1", identity.Options{})}, nil, upstreamKey)
	waitUntil(t, "n1 ready", func() bool { return rt.Status().State == node.StateReady })
	if got := rt.Status().Refused; len(got) != 1 || got[0] != "hosted" {
		t.Fatalf("refused %v", got)
	}
	if status, _ := r.chat("hello"); status != 503 {
		t.Fatalf("status %d", status)
	}
	if r.upstreamCalls() != 0 {
		t.Fatal("the upstream was called")
	}
}

// TestManagedIdentity: in managed mode nothing registers without a
// CA-verified certificate naming the node id.
func TestManagedIdentity(t *testing.T) {
	r := newManagedRig(t)
	otherCA, _ := identity.NewCA("iop.test", 0)
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		// rejected: the Edge answered UNAUTHENTICATED (the handshake
		// passed); otherwise the TLS handshake itself failed.
		rejected bool
	}{
		{"no certificate", nil, false},
		{"another CA", []tls.Certificate{nodeCert(t, otherCA, "n1", identity.Options{})}, false},
		{"expired", []tls.Certificate{nodeCert(t, r.ca, "n1", identity.Options{NotBefore: time.Now().Add(-48 * time.Hour), Validity: time.Hour})}, false},
		{"another node id", []tls.Certificate{nodeCert(t, r.ca, "n2", identity.Options{})}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rt := r.runNode(c.certs, nil, "")
			waitUntil(t, "a failed attempt", func() bool { return rt.Status().LastError != nil })
			err := rt.Status().LastError
			var re *node.RegistrationError
			if got := errors.As(err, &re); got != c.rejected || (got && re.Rejection != iopv1.RegisterRejection_REGISTER_REJECTION_UNAUTHENTICATED) {
				t.Fatalf("error %v", err)
			}
			if _, ok := r.srv.Registry().Current("n1"); ok || rt.Status().Connects != 0 {
				t.Fatal("the node registered")
			}
		})
	}
	// The CA really is what decides: the same setup with a good
	// certificate registers.
	good := nodeCert(t, r.ca, "n1", identity.Options{Validity: 30 * 24 * time.Hour})
	rt := r.runNode([]tls.Certificate{good}, nil, "")
	waitUntil(t, "the good certificate registers", func() bool { return rt.Status().State == node.StateReady })
	// Its expiry is in view (a Node reads a renewed certificate at its
	// next connection: an expiry coming close means nobody renewed it).
	n, _ := r.srv.Registry().Node("n1")
	if !n.CertificateExpiry.Equal(good.Leaf.NotAfter) {
		t.Fatalf("the node's certificate expiry %v, want %v", n.CertificateExpiry, good.Leaf.NotAfter)
	}
}

// TestNodeChecksEdgeIdentity: a Node with EdgeIdentity connects only to an
// Edge whose certificate names that edge id.
func TestNodeChecksEdgeIdentity(t *testing.T) {
	r := newManagedRig(t)
	cert := nodeCert(t, r.ca, "n1", identity.Options{})
	for _, c := range []struct {
		edgeID string
		ok     bool
	}{{"edge-2", false}, {"edge-1", true}} {
		rt, err := node.New(node.Config{EdgeAddr: r.nodeAddr, NodeID: "n1", Token: nodeToken,
			TLS:          &tls.Config{RootCAs: r.ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert}},
			EdgeIdentity: &node.EdgeIdentity{TrustDomain: "iop.test", EdgeID: c.edgeID},
			Backoff:      node.Backoff{Base: 20 * time.Millisecond, Max: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); rt.Run(ctx) }()
		waitUntil(t, "an outcome", func() bool { st := rt.Status(); return st.State == node.StateReady || st.LastError != nil })
		st := rt.Status()
		cancel()
		<-done
		if (st.State == node.StateReady) != c.ok {
			t.Fatalf("expecting %s: state %v, error %v", c.edgeID, st.State, st.LastError)
		}
		if !c.ok && !errors.Is(st.LastError, identity.ErrIdentityMismatch) {
			t.Fatalf("expecting %s: %v", c.edgeID, st.LastError)
		}
	}
}

// TestDisabledProviderReachesLeasePolicy: an operator's provider.disable
// reaches the Node as a disabled lease profile (a new payload revision).
func TestDisabledProviderReachesLeasePolicy(t *testing.T) {
	r := newManagedRig(t)
	rt := r.runNode([]tls.Certificate{nodeCert(t, r.ca, "n1", identity.Options{})}, r.opener(r.leaseKey.Public().(ed25519.PublicKey)), "")
	waitUntil(t, "ready", func() bool { return rt.Status().State == node.StateReady })
	before := rt.Status().Revision
	if err := r.srv.Registry().SetProviderEnabled("hosted", false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the policy pushed", func() bool { return rt.Status().Revision > before })
	if status, _ := r.chat("disabled"); status != 503 || r.upstreamCalls() != 0 {
		t.Fatalf("a disabled provider: %d, %d upstream calls", status, r.upstreamCalls())
	}
	mid := rt.Status().Revision
	r.srv.Registry().SetProviderEnabled("hosted", true)
	waitUntil(t, "the policy lifted", func() bool { return rt.Status().Revision > mid })
	waitUntil(t, "available again", func() bool { _, ok := r.srv.Registry().Available("n1", "hosted"); return ok })
	if status, body := r.chat("enabled"); status != 200 {
		t.Fatalf("after enable: %d %s", status, body)
	}
}

// TestManagedReloadCannotDropManagedMode: a reload that would turn managed
// mode off (and with it the lease-only rule) or change the lease key is
// refused; the running configuration stays.
func TestManagedReloadCannotDropManagedMode(t *testing.T) {
	r := newManagedRig(t)
	off := r.cfg
	off.Managed = nil
	if err := r.srv.Reload(off); err == nil {
		t.Fatal("a reload dropped managed mode")
	}
	_, other, _ := ed25519.GenerateKey(nil)
	rekey := r.cfg
	rekey.Leases = &edge.LeaseSigner{KeyID: "another", Key: other}
	if err := r.srv.Reload(rekey); err == nil {
		t.Fatal("a reload changed the lease key")
	}
	if err := r.srv.Reload(r.cfg); err != nil {
		t.Fatalf("the same configuration: %v", err)
	}
}

// TestManagedTrustDomainChecked: a trust domain no certificate can carry
// (uppercase, a port) is refused when the Edge starts, not by refusing
// every Node that registers after.
func TestManagedTrustDomainChecked(t *testing.T) {
	r := newManagedRig(t)
	for _, td := range []string{"IOP.test", "iop.test:8443", "iop test"} {
		cfg := r.cfg
		cfg.Managed = &edge.Managed{TrustDomain: td}
		if _, err := edge.New(cfg); !errors.Is(err, identity.ErrName) {
			t.Errorf("New with trust domain %q: %v, want identity.ErrName", td, err)
		}
	}
}
