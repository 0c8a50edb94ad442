package controlplane_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/internal/backoff"
	"github.com/iop-dev/iop/internal/testproxy"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

func offlineWithZeros(n controlplane.NodeView) bool {
	if n.Connected || len(n.Providers) == 0 {
		return false
	}
	for _, p := range n.Providers {
		if p.Status != "unavailable" || p.Health != "offline" || p.Capacity != 0 || p.InFlight != 0 || p.Queued != 0 || p.LongContextCapacity != 0 || p.LongContextInFlight != 0 {
			return false
		}
	}
	return true
}

func onlineWithCapacity(n controlplane.NodeView) bool {
	return n.Connected && len(n.Providers) == 1 && n.Providers[0].Status == "available" &&
		n.Providers[0].Health == "healthy" && n.Providers[0].Capacity == 4 && n.Providers[0].LongContextCapacity == 1
}

// TestNodeSnapshotsAndEvents follows a Node through its life as a Hub with
// two Edges sees it: configured before its first connect, ready, offline,
// back; one relayed event per transition.
func TestNodeSnapshotsAndEvents(t *testing.T) {
	h := startHub(t, "", nil)
	log := watchEvents(t, h.hub)
	e1 := startEdge(t, "e1", h.addr, nil)
	e2 := startEdge(t, "e2", h.addr, nil)
	// The Node connects after its Edge's link is up, so its ready is a
	// transition the Hub sees as an event (before that, only a status
	// would show it).
	waitFor(t, "e2 linked", func() bool { v, _ := h.hub.Edge("e2"); return v.Connected && v.StatusAt != nil })
	e2.startNode()

	// Before its first connect the Node is in the view, offline, with its
	// provider's identity and zero figures.
	waitFor(t, "e1's first status", func() bool { n, ok := nodeView(h.hub, "e1", "n-e1"); return ok && offlineWithZeros(n) })
	n, _ := nodeView(h.hub, "e1", "n-e1")
	if p := n.Providers[0]; p.ID != "p-e1" || p.Adapter != "openai" || p.Category != "local" || len(p.Models) != 1 {
		t.Fatalf("provider identity lost before the first connect: %+v", p)
	}
	// A configured Edge that never connected is listed too.
	if e3, ok := h.hub.Edge("e3"); !ok || e3.Connected {
		t.Fatalf("e3: %+v %v", e3, ok)
	}
	waitFor(t, "e2's node online", func() bool { n, ok := nodeView(h.hub, "e2", "n-e2"); return ok && onlineWithCapacity(n) })

	e1.startNode()
	waitFor(t, "n-e1 online with its capacity", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return onlineWithCapacity(n) })
	e1.stopNodeRuntime()
	waitFor(t, "n-e1 offline", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return offlineWithZeros(n) })
	e1.startNode()
	waitFor(t, "n-e1 back with capacity", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return onlineWithCapacity(n) })
	// The reconnected Node admits work again.
	if code := chat(t, e1.url); code != 200 {
		t.Fatalf("chat after reconnect: %d", code)
	}

	waitFor(t, "events relayed", func() bool { return log.count(controlplane.EventNodeReady, "e1", "n-e1") == 2 })
	if got := log.count(controlplane.EventNodeDisconnected, "e1", "n-e1"); got != 1 {
		t.Errorf("node_disconnected events for one disconnect: %d", got)
	}
	if got := log.count(controlplane.EventNodeReady, "e2", "n-e2"); got != 1 {
		t.Errorf("node_ready events for e2's one connect: %d", got)
	}
	if got := log.count(controlplane.EventEdgeConnected, "e1", ""); got != 1 {
		t.Errorf("edge_connected events: %d", got)
	}

	// A duplicate of the live Node is rejected at the Edge and produces no
	// relayed event. Events travel in order, so once a later transition
	// (a provider disable) has arrived, nothing from the duplicate can.
	dup := e1.startExtraNode()
	waitFor(t, "the duplicate rejected", func() bool {
		var re *node.RegistrationError
		return errors.As(dup.Status().LastError, &re) && re.Rejection == iopv1.RegisterRejection_REGISTER_REJECTION_DUPLICATE
	})
	e1.stopExtraNode()
	command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpProviderDisable, ProviderID: "p-e1"})
	waitFor(t, "the provider change relayed", func() bool { return log.count(controlplane.EventProviderChanged, "e1", "n-e1") > 0 })
	if r, d := log.count(controlplane.EventNodeReady, "e1", "n-e1"), log.count(controlplane.EventNodeDisconnected, "e1", "n-e1"); r != 2 || d != 1 {
		t.Errorf("after a rejected duplicate: %d node_ready, %d node_disconnected events (want 2, 1)", r, d)
	}
	if n, _ := nodeView(h.hub, "e1", "n-e1"); !n.Connected {
		t.Error("the rejected duplicate disturbed the live node")
	}
}

func chat(t *testing.T, url string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func command(t *testing.T, h *controlplane.Hub, edgeID string, cmd controlplane.Command) (*controlplane.CommandRun, []controlplane.CommandEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run, err := h.Command(ctx, edgeID, cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Operation, err)
	}
	defer run.Close()
	evs, err := run.Wait(ctx)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Operation, err)
	}
	return run, evs
}

func phases(evs []controlplane.CommandEvent) string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Phase))
	}
	return strings.Join(out, ",")
}

func TestCommands(t *testing.T) {
	release := make(chan struct{})
	hold := func(r *upstreamtest.Request) upstreamtest.Script {
		if strings.Contains(r.Prompt, "hold") {
			<-release
		}
		return upstreamtest.Echo(r)
	}
	h := startHub(t, "", nil)
	log := watchEvents(t, h.hub)
	e1 := startEdge(t, "e1", h.addr, hold)
	e1.startNode()
	waitFor(t, "n-e1 online", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return onlineWithCapacity(n) })

	// A node command: phases in order, the Node's answer on the last.
	run, evs := command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpNodeCapabilities, NodeID: "n-e1"})
	if !run.Accepted || phases(evs) != "accepted,running,succeeded" {
		t.Fatalf("capabilities: accepted %v phases %s", run.Accepted, phases(evs))
	}
	if caps := evs[2].NodeResult.GetCapabilities(); caps.GetNodeId() != "n-e1" || len(caps.GetProviders()) != 1 {
		t.Fatalf("capabilities result: %v", evs[2].NodeResult)
	}
	for i, e := range evs {
		if e.Seq != i+1 {
			t.Fatalf("phase %d has seq %d", i, e.Seq)
		}
	}

	// Rejections: the Hub refuses operations outside the closed set; the
	// Edge resolves selectors and refuses what it does not know.
	if _, err := h.hub.Command(context.Background(), "e1", controlplane.Command{Operation: "node.schedule"}); err == nil {
		t.Fatal("an operation outside the closed set was sent")
	}
	for _, c := range []struct {
		cmd  controlplane.Command
		want controlplane.Rejection
	}{
		{controlplane.Command{Operation: controlplane.OpNodeDrain, NodeID: "ghost"}, controlplane.RejectNotFound},
		{controlplane.Command{Operation: controlplane.OpNodeDrain}, controlplane.RejectInvalidArgument},
		{controlplane.Command{Operation: controlplane.OpProviderDisable, ProviderID: "ghost"}, controlplane.RejectNotFound},
		{controlplane.Command{Operation: controlplane.OpOllamaAPI, ProviderID: "p-e1", Args: map[string]string{"endpoint": "tags"}}, controlplane.RejectFailedPrecondition},
		{controlplane.Command{Operation: controlplane.OpOllamaAPI, ProviderID: "p-e1", Args: map[string]string{"endpoint": "pull"}}, controlplane.RejectInvalidArgument},
		{controlplane.Command{Operation: controlplane.OpNodeCapabilities, NodeID: "n-e1", Args: map[string]string{"x": "y"}}, controlplane.RejectInvalidArgument},
	} {
		run, err := h.hub.Command(context.Background(), "e1", c.cmd)
		if err != nil {
			t.Fatal(err)
		}
		if run.Accepted || run.Rejection != c.want {
			t.Errorf("%s %+v: accepted %v rejection %v, want %v", c.cmd.Operation, c.cmd, run.Accepted, run.Rejection, c.want)
		}
		run.Close()
	}
	if _, err := h.hub.Command(context.Background(), "e2", controlplane.Command{Operation: controlplane.OpConfigRefresh}); !errors.Is(err, controlplane.ErrEdgeOffline) {
		t.Fatalf("command to an offline edge: %v", err)
	}

	// Provider disable: admission refuses new work, the view says so.
	_, evs = command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpProviderDisable, ProviderID: "p-e1"})
	if phases(evs) != "accepted,running,succeeded" {
		t.Fatalf("disable: %s", phases(evs))
	}
	waitFor(t, "provider disabled in the view", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return n.Providers[0].Status == "disabled" })
	if code := chat(t, e1.url); code != 503 {
		t.Fatalf("chat to a disabled provider: %d", code)
	}
	command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpProviderEnable, ProviderID: "p-e1"})
	waitFor(t, "provider enabled", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return n.Providers[0].Status == "available" })
	if code := chat(t, e1.url); code != 200 {
		t.Fatalf("chat after enable: %d", code)
	}

	// Drain: nothing new is admitted; progress reports the work held until
	// it finishes.
	held := holdRequest(t, e1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	drain, err := h.hub.Command(ctx, "e1", controlplane.Command{Operation: controlplane.OpNodeDrain, NodeID: "n-e1"})
	if err != nil || !drain.Accepted {
		t.Fatalf("drain: %v", err)
	}
	var drainPhases []controlplane.CommandEvent
	for {
		ev, err := drain.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		drainPhases = append(drainPhases, ev)
		if ev.Phase == controlplane.PhaseProgress && ev.InFlight == 1 {
			break
		}
	}
	if code := chat(t, e1.url); code != 503 {
		t.Fatalf("chat to a draining node: %d", code)
	}
	waitFor(t, "the draining node in the view", func() bool {
		n, _ := nodeView(h.hub, "e1", "n-e1")
		return n.Draining && n.Providers[0].Status == "draining" && n.Providers[0].InFlight == 1
	})
	close(release)
	rest, err := drain.Wait(ctx)
	drain.Close()
	if err != nil {
		t.Fatal(err)
	}
	drainPhases = append(drainPhases, rest...)
	last := drainPhases[len(drainPhases)-1]
	if last.Phase != controlplane.PhaseSucceeded || drainPhases[len(drainPhases)-2].InFlight != 0 {
		t.Fatalf("drain phases %s (last in-flight %d)", phases(drainPhases), drainPhases[len(drainPhases)-2].InFlight)
	}
	if code := <-held; code != 200 {
		t.Fatalf("the in-flight request did not finish normally during the drain: %d", code)
	}
	command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpNodeResume, NodeID: "n-e1"})
	if code := chat(t, e1.url); code != 200 {
		t.Fatalf("chat after resume: %d", code)
	}

	// Disconnect: the Edge closes the Node's connection; the Node comes
	// back by itself.
	before := log.count(controlplane.EventNodeReady, "e1", "n-e1")
	_, evs = command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpNodeDisconnect, NodeID: "n-e1"})
	if phases(evs) != "accepted,running,succeeded" {
		t.Fatalf("disconnect: %s", phases(evs))
	}
	waitFor(t, "node_disconnected relayed", func() bool { return log.count(controlplane.EventNodeDisconnected, "e1", "n-e1") == 1 })
	waitFor(t, "node back", func() bool { return log.count(controlplane.EventNodeReady, "e1", "n-e1") == before+1 })

	// Config refresh: only the Edge's own source, only new requests.
	e1.mu.Lock()
	e1.source = func() (edge.Config, error) {
		c := e1.cfg
		c.Routes = append(c.Routes, edge.Route{Model: "m2", Targets: []edge.Target{{ProviderID: "p-e1", Model: "up-model"}}})
		return c, nil
	}
	e1.mu.Unlock()
	_, evs = command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpConfigRefresh})
	if phases(evs) != "accepted,running,progress,succeeded" {
		t.Fatalf("refresh: %s", phases(evs))
	}
	v, err := h.hub.Refresh(context.Background(), "e1")
	if err != nil || v.Routes != 2 || v.ConfigRevision != 2 {
		t.Fatalf("after refresh: routes %d revision %d (%v)", v.Routes, v.ConfigRevision, err)
	}
	e1.mu.Lock()
	e1.source = func() (edge.Config, error) { return edge.Config{}, errors.New("edge.yaml: line 3: bad") }
	e1.mu.Unlock()
	_, evs = command(t, h.hub, "e1", controlplane.Command{Operation: controlplane.OpConfigRefresh})
	if phases(evs) != "accepted,running,failed" {
		t.Fatalf("a failing refresh: %s", phases(evs))
	}
	if v, _ := h.hub.Refresh(context.Background(), "e1"); v.Routes != 2 {
		t.Fatalf("a failed refresh changed the configuration: %d routes", v.Routes)
	}
}

// TestHubOutageResync: transitions while the Hub is down are not relayed;
// when the Edge is back, the Hub's view is re-taken from a status.
func TestHubOutageResync(t *testing.T) {
	h := startHub(t, "", nil)
	e1 := startEdge(t, "e1", h.addr, nil)
	e1.startNode()
	waitFor(t, "n-e1 online", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return onlineWithCapacity(n) })
	addr := h.addr
	h.stop()

	e1.stopNodeRuntime() // while the Hub is down
	h2 := startHub(t, addr, nil)
	log := watchEvents(t, h2.hub)
	waitFor(t, "e1 back at the new hub", func() bool { e, _ := h2.hub.Edge("e1"); return e.Connected })
	waitFor(t, "the view resynced: n-e1 offline", func() bool { n, ok := nodeView(h2.hub, "e1", "n-e1"); return ok && offlineWithZeros(n) })
	if got := log.count(controlplane.EventNodeDisconnected, "e1", "n-e1"); got != 0 {
		t.Fatalf("a transition from the outage was relayed %d times", got)
	}
	// And events flow again.
	e1.startNode()
	waitFor(t, "node_ready relayed", func() bool { return log.count(controlplane.EventNodeReady, "e1", "n-e1") == 1 })
	waitFor(t, "n-e1 online again", func() bool { n, _ := nodeView(h2.hub, "e1", "n-e1"); return onlineWithCapacity(n) })
}

// TestCoolingReachesTheHubAtOnce: a model's cooldown after a 429, and its
// end, reach the Hub's view without waiting for the status poll (an hour
// here): the Edge tells the Hub its status changed, and the Hub takes one.
func TestCoolingReachesTheHubAtOnce(t *testing.T) {
	h := startHub(t, "", func(c *controlplane.Config) { c.StatusInterval = time.Hour })
	log := watchEvents(t, h.hub)
	var calls atomic.Int32
	firstLimited := func(*upstreamtest.Request) upstreamtest.Script {
		if calls.Add(1) == 1 {
			return upstreamtest.Script{Status: http.StatusTooManyRequests, RetryAfter: "4"}
		}
		return upstreamtest.Script{}
	}
	e1 := startEdge(t, "e1", h.addr, firstLimited)
	e1.startNode()
	waitFor(t, "n-e1 online", func() bool { n, _ := nodeView(h.hub, "e1", "n-e1"); return onlineWithCapacity(n) })
	cooling := func() bool {
		n, _ := nodeView(h.hub, "e1", "n-e1")
		if len(n.Providers) != 1 {
			return false
		}
		_, ok := n.Providers[0].CoolingModels["up-model"]
		return ok
	}
	if cooling() {
		t.Fatal("cooling before any 429")
	}
	if code := chat(t, e1.url); code != http.StatusTooManyRequests {
		t.Fatalf("the first chat: %d, want the upstream's 429", code)
	}
	waitFor(t, "up-model cooling at the hub", cooling)
	waitFor(t, "the cooldown's end at the hub", func() bool { return !cooling() })
	if code := chat(t, e1.url); code != http.StatusOK {
		t.Fatalf("a chat after the cooldown: %d", code)
	}
	// Operators are told of both: one event as the model began cooling,
	// one as it ended.
	waitFor(t, "two cooling events", func() bool { return len(log.of(controlplane.EventProviderCooling, "e1", "n-e1")) >= 2 })
	evs := log.of(controlplane.EventProviderCooling, "e1", "n-e1")
	if len(evs) != 2 {
		t.Fatalf("%d cooling events, want 2: %+v", len(evs), evs)
	}
	began, ended := evs[0].Provider, evs[1].Provider
	if began == nil || ended == nil {
		t.Fatalf("a cooling event without its provider: %+v", evs)
	}
	if _, ok := began.CoolingModels["up-model"]; !ok || len(began.CoolingModels) != 1 || began.CoolingUntil != nil {
		t.Errorf("the first cooling event: until %v, models %v; want up-model alone", began.CoolingUntil, began.CoolingModels)
	}
	if ended.CoolingUntil != nil || len(ended.CoolingModels) != 0 {
		t.Errorf("the second cooling event still cools: until %v, models %v", ended.CoolingUntil, ended.CoolingModels)
	}
}

// TestServeEdgesOutlastsDescriptorExhaustion: an Edge listener whose Accept
// runs out of descriptors (the process's, EMFILE, or the system's, ENFILE)
// or buffers keeps serving, and the Edge that dialled meanwhile connects
// once they are back. The Hub's loop used to end on the first of them.
func TestServeEdgesOutlastsDescriptorExhaustion(t *testing.T) {
	hub, ln := hubForE1(t)
	h := serveHub(t, hub, testproxy.FailAccept(ln, syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS))
	startEdge(t, "e1", h.addr, nil)
	waitFor(t, "e1 connected", func() bool { e, _ := h.hub.Edge("e1"); return e.Connected })
}

// hubForE1 returns a Hub that knows Edge e1 alone, not yet serving, and
// a loopback listener for its Edges.
func hubForE1(t *testing.T) (*controlplane.Hub, net.Listener) {
	t.Helper()
	hub, err := controlplane.New(controlplane.Config{Edges: []controlplane.EdgeRecord{{ID: "e1", TokenHash: controlplane.HashToken(edgeToken("e1"))}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return hub, ln
}

// sendHello dials the Hub at addr as an Edge would, without a connector,
// and sends a hello with id and credential on a new stream; the session
// closes when the test ends.
func sendHello(t *testing.T, ctx context.Context, addr, id, credential string) *wire.Stream {
	t.Helper()
	sess, err := wire.Dial(ctx, "tcp", addr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	st, err := sess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteMessage(&iopv1.Envelope{Body: &iopv1.Envelope_EdgeHelloRequest{EdgeHelloRequest: &iopv1.EdgeHelloRequest{EdgeId: id, Credential: []byte(credential)}}}); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestHelloRules: identity is refused when empty, unknown or unproven; a
// duplicate of a live Edge is refused without disturbing it.
func TestHelloRules(t *testing.T) {
	h := startHub(t, "", nil)
	log := watchEvents(t, h.hub)
	e1 := startEdge(t, "e1", h.addr, nil)
	waitFor(t, "e1 connected", func() bool { e, _ := h.hub.Edge("e1"); return e.Connected })
	first, _ := h.hub.Edge("e1")

	hello := func(id, token string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		errc := make(chan error, 1)
		c, err := controlplane.NewConnector(controlplane.ConnectorConfig{HubAddr: h.addr, EdgeID: id, Token: token, Backoff: fast}, e1.srv)
		if err != nil {
			return err
		}
		// Run until the first attempt's outcome shows in Status.
		rctx, rcancel := context.WithCancel(ctx)
		go func() { errc <- c.Run(rctx) }()
		var st controlplane.ConnectorStatus
		for st = c.Status(); st.LastError == nil && !st.Connected; st = c.Status() {
			time.Sleep(2 * time.Millisecond)
		}
		rcancel()
		<-errc
		if st.Connected {
			return nil
		}
		return st.LastError
	}
	rejected := func(what string, err error, want string) {
		t.Helper()
		var he *controlplane.HelloError
		if !errors.As(err, &he) || !strings.Contains(he.Rejection.String(), want) {
			t.Fatalf("%s: %v, want a %s rejection", what, err, want)
		}
	}
	rejected("wrong token", hello("e2", "wrong-token-0123456789abcdef"), "UNAUTHENTICATED")
	rejected("unknown edge", hello("e9", edgeToken("e9")), "UNKNOWN_EDGE")
	rejected("duplicate of a live edge", hello("e1", edgeToken("e1")), "DUPLICATE")
	if _, err := controlplane.NewConnector(controlplane.ConnectorConfig{HubAddr: h.addr, EdgeID: ""}, e1.srv); err == nil {
		t.Fatal("a connector with an empty edge id")
	}
	if _, err := controlplane.NewConnector(controlplane.ConnectorConfig{HubAddr: h.addr, EdgeID: "e2", Backoff: backoff.Config{Multiplier: math.NaN()}}, e1.srv); err == nil || !strings.Contains(err.Error(), "Multiplier") {
		t.Fatalf("a connector whose backoff multiplier is NaN: %v", err)
	}
	// A hand-written hello with an empty id, as another implementation
	// might send it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := sendHello(t, ctx, h.addr, "", edgeToken("e1"))
	env, err := st.ReadMessage(ctx)
	if err != nil || env.GetEdgeHelloResponse().GetAccepted() || env.GetEdgeHelloResponse().GetRejection() != iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_MALFORMED {
		t.Fatalf("empty edge id: %v %v", env, err)
	}

	now, _ := h.hub.Edge("e1")
	if !now.Connected || now.Generation != first.Generation {
		t.Fatalf("the live edge was disturbed: %+v -> %+v", first, now)
	}
	if got := log.count(controlplane.EventEdgeDisconnected, "e1", ""); got != 0 {
		t.Fatalf("a rejected duplicate produced %d disconnects", got)
	}
}

// TestHelloAnswerLost: when the Hub's answer to an accepted hello cannot be
// written, that connection is fenced like any ended one (here by its
// session's end: the answer is queued, and the writer's failure closes
// the session). The Edge id is not locked out: its next connection is
// admitted with a new generation, and the Hub reports one connect and one
// disconnect for the lost one.
func TestHelloAnswerLost(t *testing.T) {
	hub, ln := hubForE1(t)
	// The first connection's writes fail once the Hub has read the
	// hello's credential: the answer's write fails (or one queued before
	// it, which ends the session first).
	fl := &answerFailListener{Listener: ln, marker: []byte(edgeToken("e1"))}
	h := serveHub(t, hub, fl)
	log := watchEvents(t, h.hub)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := sendHello(t, ctx, h.addr, "e1", edgeToken("e1"))
	if env, err := st.ReadMessage(ctx); err == nil {
		t.Fatalf("the hello was answered through a failing connection: %v", env)
	}
	if !fl.failed.Load() {
		t.Fatal("no write of the Hub failed: the test did not reach the answer")
	}
	waitFor(t, "the lost connection fenced", func() bool {
		e, _ := h.hub.Edge("e1")
		return !e.Connected && e.LastDisconnect != ""
	})
	lost, _ := h.hub.Edge("e1")
	if lost.Generation == 0 {
		t.Fatalf("the lost connection was never admitted: %+v", lost)
	}

	startEdge(t, "e1", h.addr, nil)
	waitFor(t, "e1 connected again", func() bool { e, _ := h.hub.Edge("e1"); return e.Connected })
	now, _ := h.hub.Edge("e1")
	if now.Generation <= lost.Generation {
		t.Fatalf("generation %d after the lost one's %d", now.Generation, lost.Generation)
	}
	waitFor(t, "two connects, one disconnect", func() bool {
		return log.count(controlplane.EventEdgeConnected, "e1", "") == 2 && log.count(controlplane.EventEdgeDisconnected, "e1", "") == 1
	})
}

// answerFailListener fails every write on its first accepted connection
// from the moment that connection has read marker.
type answerFailListener struct {
	net.Listener
	marker   []byte
	accepted atomic.Bool
	failed   atomic.Bool // a write was failed
}

func (l *answerFailListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil || l.accepted.Swap(true) {
		return c, err
	}
	return &answerFailConn{Conn: c, l: l}, nil
}

type answerFailConn struct {
	net.Conn
	l    *answerFailListener
	seen []byte // what was read, up to the marker (read by one goroutine at a time)
	hit  atomic.Bool
}

func (c *answerFailConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.hit.Load() {
		c.seen = append(c.seen, p[:n]...)
		if bytes.Contains(c.seen, c.l.marker) {
			c.hit.Store(true)
		}
	}
	return n, err
}

func (c *answerFailConn) Write(p []byte) (int, error) {
	if c.hit.Load() {
		c.l.failed.Store(true)
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(p)
}

// TestReloadDuringHello: a hello checked against an Edge's record that a
// reload then re-keys or removes, before the connection is admitted, is
// turned away, as a connection already admitted would have been ended.
// Before, it was admitted with the old token (or for an Edge no longer
// configured).
func TestReloadDuringHello(t *testing.T) {
	var cfg controlplane.Config
	h := startHub(t, "", func(c *controlplane.Config) { cfg = *c })
	var mu sync.Mutex
	var reload func() // the reload due at the next hello's check
	controlplane.SetHelloHook(h.hub, func(stage string) {
		mu.Lock()
		f := reload
		reload = nil
		mu.Unlock()
		if stage == "authenticated" && f != nil {
			f()
		}
	})
	due := func(f func()) {
		mu.Lock()
		reload = f
		mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	refused := func(what, id string) {
		t.Helper()
		env, err := sendHello(t, ctx, h.addr, id, edgeToken(id)).ReadMessage(ctx)
		if r := env.GetEdgeHelloResponse(); err != nil || r.GetAccepted() || r.GetRejection() != iopv1.EdgeHelloRejection_EDGE_HELLO_REJECTION_UNAUTHENTICATED {
			t.Fatalf("%s: %v %v, want UNAUTHENTICATED", what, env, err)
		}
		if e, _ := h.hub.Edge(id); e.Connected {
			t.Fatalf("%s: connected", what)
		}
	}
	rekeyed := cfg
	rekeyed.Edges = slices.Clone(cfg.Edges)
	rekeyed.Edges[1].TokenHash = controlplane.HashToken("e2-rotated-token-0123456789abcdef")
	due(func() {
		if err := h.hub.Reload(rekeyed); err != nil {
			t.Error(err)
		}
	})
	refused("e2 re-keyed while its hello was checked", "e2")

	removed := rekeyed
	removed.Edges = rekeyed.Edges[:2] // without e3
	due(func() {
		if err := h.hub.Reload(removed); err != nil {
			t.Error(err)
		}
	})
	refused("e3 removed while its hello was checked", "e3")
}
