package nodes_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// rawNode dials the registry as a hand-driven Node, to send what a correct
// node.Runtime never would.
func rawNode(t *testing.T, e *edge) (*wire.Session, *wire.Stream) {
	t.Helper()
	sess, err := wire.Dial(ctx(t), "tcp", e.addr, nil, &wire.Config{CloseLinger: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	st, err := sess.OpenStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return sess, st
}

func register(t testing.TB, st *wire.Stream, id, tok string) *iopv1.RegisterResponse {
	t.Helper()
	if err := st.WriteMessage(nodewire.Msg(&iopv1.RegisterRequest{NodeId: id, Credential: []byte(tok)})); err != nil {
		t.Fatal(err)
	}
	env, err := st.ReadMessage(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return env.GetRegisterResponse()
}

// endedBy waits for sess to end and checks that the Edge ended it, for
// reason; the wait's bound only turns a hang into a failure.
func endedBy(t *testing.T, sess *wire.Session, reason wire.CloseReason) {
	t.Helper()
	select {
	case <-sess.Done():
	case <-time.After(15 * time.Second):
		t.Fatal("the Edge kept the session open")
	}
	var ce *wire.CloseError
	if !errors.As(sess.Err(), &ce) || ce.Reason != reason || !ce.Remote {
		t.Fatalf("session ended %v, want the Edge's %v", sess.Err(), reason)
	}
}

func TestRegistrationProtocolViolations(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1))), RegisterTimeout: 300 * time.Millisecond})
	sub := e.reg.Subscribe()
	defer sub.Close()

	t.Run("first message not a registration", func(t *testing.T) {
		sess, st := rawNode(t, e)
		st.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: 1}))
		env, err := st.ReadMessage(ctx(t))
		if err != nil || env.GetRegisterResponse().GetRejection() != iopv1.RegisterRejection_REGISTER_REJECTION_MALFORMED {
			t.Fatalf("answer %v %v, want a malformed rejection", env, err)
		}
		<-sess.Done()
	})
	t.Run("invalid node id", func(t *testing.T) {
		_, st := rawNode(t, e)
		if r := register(t, st, "../etc/passwd", token); r.GetAccepted() || r.GetRejection() != iopv1.RegisterRejection_REGISTER_REJECTION_MALFORMED {
			t.Fatalf("answer %v", r)
		}
	})
	// A ready for another generation is refused; one naming a revision
	// the Edge never sent is a protocol violation (a Node cannot have
	// applied it, and counting it as applied would admit by capacity and
	// models the Node does not hold).
	for _, tc := range []struct {
		name   string
		ready  func(r *iopv1.RegisterResponse) *iopv1.NodeReadyRequest
		reason wire.CloseReason
	}{
		{"ready for another generation", func(r *iopv1.RegisterResponse) *iopv1.NodeReadyRequest {
			return &iopv1.NodeReadyRequest{Generation: r.GetGeneration() + 1}
		}, wire.ReasonRejected},
		{"ready naming a revision never sent", func(r *iopv1.RegisterResponse) *iopv1.NodeReadyRequest {
			return &iopv1.NodeReadyRequest{Generation: r.GetGeneration(), Revision: r.GetConfig().GetRevision() + 1}
		}, wire.ReasonProtocolError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess, st := rawNode(t, e)
			r := register(t, st, "n1", token)
			if !r.GetAccepted() {
				t.Fatalf("registration refused: %v", r)
			}
			st.WriteMessage(nodewire.Msg(tc.ready(r)))
			endedBy(t, sess, tc.reason)
			if _, ok := e.reg.Current("n1"); ok {
				t.Fatal("n1 is ready after it")
			}
		})
	}
	t.Run("acknowledgement naming a revision never sent", func(t *testing.T) {
		sess, st := rawNode(t, e)
		r := register(t, st, "n1", token)
		rev := r.GetConfig().GetRevision()
		st.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: r.GetGeneration(), Revision: rev, Providers: []*iopv1.ProviderSnapshot{
			{ProviderId: "p1", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 1},
		}}))
		if env, err := st.ReadMessage(ctx(t)); err != nil || !env.GetNodeReadyResponse().GetAccepted() {
			t.Fatalf("ready answer %v %v", env, err)
		}
		st.WriteMessage(nodewire.Msg(&iopv1.ConfigUpdateAck{Revision: rev + 5, Providers: []*iopv1.ProviderSnapshot{
			{ProviderId: "p1", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 1},
		}}))
		endedBy(t, sess, wire.ReasonProtocolError)
		eventually(t, "n1 fenced", func() bool { _, ok := e.reg.Current("n1"); return !ok })
	})
	t.Run("silent after connect", func(t *testing.T) {
		sess, _ := rawNode(t, e)
		<-sess.Done() // closed by the register deadline
	})
	t.Run("provider report beyond the configuration is ignored", func(t *testing.T) {
		sess, st := rawNode(t, e)
		r := register(t, st, "n1", token)
		st.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: r.GetGeneration(), Revision: r.GetConfig().GetRevision(), Providers: []*iopv1.ProviderSnapshot{
			{ProviderId: "p1", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 1000},
			{ProviderId: "smuggled", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY},
		}}))
		if env, err := st.ReadMessage(ctx(t)); err != nil || !env.GetNodeReadyResponse().GetAccepted() {
			t.Fatalf("ready answer %v %v", env, err)
		}
		n1, _ := e.reg.Node("n1")
		if len(n1.Providers) != 1 || n1.Providers[0].Capacity != 1 {
			t.Fatalf("a Node widened its configuration: %+v", n1)
		}
		// An unexpected message on the control stream closes the session.
		st.WriteMessage(nodewire.Msg(&iopv1.RegisterRequest{NodeId: "n1"}))
		endedBy(t, sess, wire.ReasonProtocolError)
		eventually(t, "n1 fenced", func() bool { _, ok := e.reg.Current("n1"); return !ok })
	})
}

func TestPendingConnectionCap(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1))), MaxPending: 1, RegisterTimeout: 5 * time.Second})
	hold, err := net.Dial("tcp", e.addr) // an unregistered connection fills the one slot
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	time.Sleep(20 * time.Millisecond) // let the registry accept it; no timing is asserted
	c2, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c2.Read(make([]byte, 1)); err == nil || n != 0 {
		t.Fatalf("connection over the cap was served (read %d, %v)", n, err)
	}
}

func TestNextEpoch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "epoch")
	for want := uint32(1); want <= 3; want++ {
		got, err := nodes.NextEpoch(path)
		if err != nil || got != want {
			t.Fatalf("NextEpoch = %d, %v, want %d", got, err, want)
		}
	}
	os.WriteFile(path, []byte("not a number"), 0o600)
	if _, err := nodes.NextEpoch(path); err == nil {
		t.Fatal("NextEpoch accepted a corrupt file")
	}
	if b, _ := os.ReadFile(path); string(b) != "not a number" {
		t.Fatal("NextEpoch changed a file it could not parse")
	}
	os.WriteFile(path, []byte("4294967295\n"), 0o600)
	if _, err := nodes.NextEpoch(path); err == nil {
		t.Fatal("NextEpoch wrapped around")
	}
}

func TestConfigValidation(t *testing.T) {
	good := record("n1", spec("p1", "m1", 1))
	bad := []nodes.Record{
		{ID: "", TokenHash: nodes.HashToken("x")},
		{ID: "n 1", TokenHash: nodes.HashToken("x")},
		{ID: "n1"},
		record("n1", spec("p1", "m1", 0)),
		record("n1", spec("p1", "m1", 1), spec("p1", "m2", 1)),
		record("n1", nodes.ProviderSpec{ID: "p1", Adapter: "openai", Category: "gpu", Capacity: 1}),
	}
	for i, r := range bad {
		if _, err := nodes.NewStaticStore([]nodes.Record{r}); err == nil {
			t.Errorf("bad[%d] accepted: %+v", i, r)
		}
	}
	if _, err := nodes.NewStaticStore([]nodes.Record{good, good}); err == nil {
		t.Error("duplicate node ids accepted")
	}
	if _, err := nodes.New(nodes.Config{Epoch: 1}); err == nil {
		t.Error("New without a Store")
	}
	s, _ := nodes.NewStaticStore(nil)
	if _, err := nodes.New(nodes.Config{Store: s}); err == nil {
		t.Error("New without an Epoch")
	}
}

func TestAuthenticatorSeam(t *testing.T) {
	seen := make(chan string, 1)
	auth := authFunc(func(_ context.Context, h nodes.Hello) error {
		seen <- h.NodeID
		return errors.New("no")
	})
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 1))), Authenticator: auth})
	_, st := rawNode(t, e)
	if r := register(t, st, "n1", token); r.GetAccepted() || r.GetRejection() != iopv1.RegisterRejection_REGISTER_REJECTION_UNAUTHENTICATED {
		t.Fatalf("answer %v", r)
	}
	if got := <-seen; got != "n1" {
		t.Fatalf("authenticator saw %q", got)
	}
}

type authFunc func(context.Context, nodes.Hello) error

func (f authFunc) Authenticate(ctx context.Context, h nodes.Hello) error { return f(ctx, h) }

// readyRaw registers a hand-driven Node as id, ready with provider p1
// (capacity 4), and returns its session and generation.
func readyRaw(t *testing.T, e *edge, id string) (*wire.Session, uint64) {
	t.Helper()
	sess, st := rawNode(t, e)
	r := register(t, st, id, token)
	st.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: r.GetGeneration(), Revision: r.GetConfig().GetRevision(), Providers: []*iopv1.ProviderSnapshot{
		{ProviderId: "p1", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 4},
	}}))
	if env, err := st.ReadMessage(ctx(t)); err != nil || !env.GetNodeReadyResponse().GetAccepted() {
		t.Fatalf("ready answer %v %v", env, err)
	}
	return sess, r.GetGeneration()
}

// rawTunnel opens a tunnel to p1 on the hand-driven Node's session and
// returns it with the Node's end, its request read.
func rawTunnel(t *testing.T, e *edge, sess *wire.Session, id string, gen uint64) (*nodes.Tunnel, *wire.Stream) {
	t.Helper()
	tn, err := e.reg.OpenTunnel(ctx(t), id, gen, &nodes.TunnelRequest{ProviderID: "p1", Method: "POST", Path: "/v1/chat/completions"})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := sess.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if env, err := ts.ReadMessage(ctx(t)); err != nil || env.GetProviderTunnelRequest() == nil {
		t.Fatalf("tunnel request %v %v", env, err)
	}
	return tn, ts
}

// TestTunnelRefusesInvalidStatus: a Node's tunnel answer must carry a
// final HTTP status. An informational one (which the Node's transport
// skips from a real upstream) or one outside three digits is a protocol
// violation, refused with a typed error and the stream reset, never
// written to a client.
func TestTunnelRefusesInvalidStatus(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 4)))})
	sess, gen := readyRaw(t, e, "n1")
	for _, status := range []uint32{0, 99, 100, 101, 103, 199, 1000, 200} {
		tn, ts := rawTunnel(t, e, sess, "n1", gen)
		ts.WriteMessage(nodewire.Msg(&iopv1.ProviderTunnelResponse{Status: status}))
		got, _, err := tn.Response(ctx(t))
		var te *nodes.TunnelError
		switch {
		case status == 200 && (err != nil || got != 200):
			t.Errorf("status 200: %d %v", got, err)
		case status != 200 && (!errors.As(err, &te) || te.Code != nodes.TunnelInternal):
			t.Errorf("status %d: answer %d %v, want a TunnelInternal error", status, got, err)
		}
		tn.Close()
		ts.Reset(wire.ResetCancel)
	}
}

// TestShutdownDrains: Registry.Shutdown tells each Node GOAWAY, waits
// for the tunnels in flight to end (not for the control stream, which
// stays open for the session's life), then closes the session; when its
// ctx ends first it closes the session at once, cutting the tunnel off.
func TestShutdownDrains(t *testing.T) {
	for _, graceEnds := range []bool{false, true} {
		e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 4)))})
		sess, gen := readyRaw(t, e, "n1")
		tn, ts := rawTunnel(t, e, sess, "n1", gen)
		ts.WriteMessage(nodewire.Msg(&iopv1.ProviderTunnelResponse{Status: 200}))
		if _, _, err := tn.Response(ctx(t)); err != nil {
			t.Fatal(err)
		}
		grace, cancel := context.WithCancel(ctx(t))
		shut := make(chan error, 1)
		go func() { shut <- e.reg.Shutdown(grace) }()
		select {
		case <-sess.RemoteGoAway():
		case <-sess.Done():
			t.Fatalf("the Edge closed the session with no GOAWAY before: %v", sess.Err())
		}
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v with a tunnel in flight", err)
		default:
		}
		if graceEnds {
			cancel()
			if err := <-shut; !errors.Is(err, context.Canceled) {
				t.Fatalf("grace ended: Shutdown = %v, want context.Canceled", err)
			}
			if _, err := io.ReadAll(tn); err == nil {
				t.Fatal("the tunnel cut off by the grace's end read to a clean end")
			}
			endedBy(t, sess, wire.ReasonNormal)
			continue
		}
		ts.Write([]byte("answer"))
		ts.WriteMessage(nodewire.Msg(&iopv1.ProviderTunnelEnd{Ok: true}))
		ts.CloseWrite()
		if b, err := io.ReadAll(tn); err != nil || string(b) != "answer" {
			t.Fatalf("drained tunnel read %q, %v", b, err)
		}
		tn.Close()
		if err := <-shut; err != nil {
			t.Fatalf("Shutdown = %v after the tunnel ended", err)
		}
		cancel()
		endedBy(t, sess, wire.ReasonNormal)
	}
}

// TestRefusedUnopenedIsNotStarted: a run or tunnel whose stream the Node
// refused before it ran (its GOAWAY crossed the stream) fails with an
// error matching ErrNotStarted at whichever step meets the refusal (the
// open, the request's write, the run's first event, the tunnel's head),
// and its claim on the provider is given back. A stream the Node took, or
// reset for another reason, is not ErrNotStarted.
func TestRefusedUnopenedIsNotStarted(t *testing.T) {
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", spec("p1", "m1", 4)))})
	sess, gen := readyRaw(t, e, "n1")
	startRun := func(id string) (*nodes.Run, *wire.Stream) {
		t.Helper()
		run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: id, ProviderID: "p1", Target: "m1"})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := sess.AcceptStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if env, err := rs.ReadMessage(ctx(t)); err != nil || env.GetRunRequest() == nil {
			t.Fatalf("run request %v %v", env, err)
		}
		return run, rs
	}
	inFlight := func() int {
		n, _ := e.reg.Node("n1")
		return n.Providers[0].InFlight
	}

	// Refused: Started says so, and Next has the transport failure.
	run, rs := startRun("refused")
	rs.Reset(wire.ResetRefused)
	if err := run.Started(ctx(t)); !errors.Is(err, nodes.ErrNotStarted) {
		t.Fatalf("Started on a refused run = %v, want ErrNotStarted", err)
	}
	if ev, err := run.Next(ctx(t)); err != nil || ev.Kind != execution.EventFailed || ev.Failure.Class != execution.FailureTransport {
		t.Fatalf("refused run's event %+v %v, want its transport failure", ev, err)
	}
	run.Close()

	// Taken: Started returns, and Next returns the event it read.
	run, rs = startRun("taken")
	rs.WriteMessage(nodewire.Msg(&iopv1.RunEvent{RunId: "taken", Event: &iopv1.RunEvent_Started{Started: &iopv1.RunStarted{Model: "m1"}}}))
	if err := run.Started(ctx(t)); err != nil {
		t.Fatalf("Started on a run the Node took = %v", err)
	}
	if err := run.Started(ctx(t)); err != nil {
		t.Fatalf("Started again = %v", err)
	}
	if ev, err := run.Next(ctx(t)); err != nil || ev.Kind != execution.EventStarted || ev.Model != "m1" {
		t.Fatalf("first event after Started %+v %v", ev, err)
	}
	run.Close()

	// Reset for another reason: not a refusal.
	run, rs = startRun("cancelled")
	rs.Reset(wire.ResetCancel)
	if err := run.Started(ctx(t)); err != nil {
		t.Fatalf("Started on a run reset as cancelled = %v, want nil (Next has the failure)", err)
	}
	if ev, _ := run.Next(ctx(t)); ev.Kind != execution.EventFailed {
		t.Fatalf("cancelled run's event %+v", ev)
	}
	run.Close()

	// A tunnel's head.
	tn, ts := rawTunnel(t, e, sess, "n1", gen)
	ts.Reset(wire.ResetRefused)
	var te *nodes.TunnelError
	if _, _, err := tn.Response(ctx(t)); !errors.Is(err, nodes.ErrNotStarted) || !errors.As(err, &te) || te.Code != nodes.TunnelNotStarted {
		t.Fatalf("refused tunnel's head: %v, want ErrNotStarted as TunnelNotStarted", err)
	}
	tn.Close()

	// After the Node's GOAWAY, every dispatch is refused, at the open,
	// the write or the first read, whichever the GOAWAY crosses.
	sess.GoAway("shutting down")
	for i := range 20 {
		run, err := e.reg.StartRun(ctx(t), "n1", gen, &execution.RunRequest{RunID: fmt.Sprint("late-", i), ProviderID: "p1", Target: "m1"})
		if err == nil {
			err = run.Started(ctx(t))
			run.Close()
		}
		if !errors.Is(err, nodes.ErrNotStarted) {
			t.Fatalf("run %d after GOAWAY: %v, want ErrNotStarted", i, err)
		}
		tn, err := e.reg.OpenTunnel(ctx(t), "n1", gen, &nodes.TunnelRequest{ProviderID: "p1", Method: "POST", Path: "/v1/chat/completions"})
		if err == nil {
			_, _, err = tn.Response(ctx(t))
			tn.Close()
		}
		if !errors.Is(err, nodes.ErrNotStarted) {
			t.Fatalf("tunnel %d after GOAWAY: %v, want ErrNotStarted", i, err)
		}
	}
	if n := inFlight(); n != 0 {
		t.Fatalf("in flight after every dispatch ended: %d", n)
	}
}

// TestHeldUntilApplied: a provider is admitted nothing while a
// configuration its Node may still hold would refuse the work: the lease
// the latest gives it (a credential rotated right after its revocation,
// a provider moved to another credential or enabled again), the model or
// the provider itself (removed and added back). It is admitted as soon
// as the Node acknowledges the latest. A configuration sent but not
// acknowledged counts as well as the acknowledged one: the Node may have
// applied it already (a revocation, a lowered capacity). A change the
// work does not depend on never holds anything back.
func TestHeldUntilApplied(t *testing.T) {
	leased := spec("p1", "m1", 2)
	leased.Credential = "cred-a"
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, record("n1", leased, spec("p2", "m2", 2)))})
	revoked := &iopv1.LeasePolicy{RevokedCredentials: []string{"cred-a"}, MinRevisions: map[string]uint64{"cred-a": 1}}
	e.reg.SetLeasePolicy(revoked)

	_, st := rawNode(t, e)
	r := register(t, st, "n1", token)
	avail := func(id string) *iopv1.ProviderSnapshot {
		return &iopv1.ProviderSnapshot{ProviderId: id, Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 2}
	}
	st.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: r.GetGeneration(), Revision: r.GetConfig().GetRevision(), Providers: []*iopv1.ProviderSnapshot{avail("p1"), avail("p2")}}))
	if env, err := st.ReadMessage(ctx(t)); err != nil || !env.GetNodeReadyResponse().GetAccepted() {
		t.Fatalf("ready answer %v %v", env, err)
	}
	// next reads the next configuration the Edge pushes; ack applies it.
	next := func() uint64 { t.Helper(); return nextPush(t, st) }
	ack := func(rev uint64) {
		t.Helper()
		st.WriteMessage(nodewire.Msg(&iopv1.ConfigUpdateAck{Revision: rev, Providers: []*iopv1.ProviderSnapshot{avail("p1"), avail("p2")}}))
		eventually(t, "the acknowledgement applied", func() bool {
			_, a, ok := e.reg.Admission("n1", "p2", "m2")
			return ok && a.Current
		})
	}
	held := func(id string) bool {
		t.Helper()
		_, a, ok := e.reg.Admission("n1", id, map[string]string{"p1": "m1", "p2": "m2"}[id])
		if !ok {
			t.Fatalf("%s not available", id)
		}
		return a.Held
	}
	// Applied as registered: the Edge itself refuses to lease a revoked
	// credential, so the applied policy holds nothing back.
	if held("p1") || held("p2") {
		t.Fatal("held back under the configuration the Node applied")
	}

	// refresh sends the record with leased (as it is by then) and p2.
	refresh := func(p2 nodes.ProviderSpec) {
		e.reg.Refresh(store(t, record("n1", leased, p2)))
	}
	// p2 takes no lease: a change of lease policy never holds it back.
	p2 := spec("p2", "m2", 2)
	steps := []struct {
		name   string
		change func()
		// held: p1 and p2 are held back while the change is
		// unacknowledged.
		held [2]bool
		// capacity is p1's capacity while the change is unacknowledged
		// (0: not checked); the Node reports 2.
		capacity int
	}{
		{name: "rotated after its revocation", change: func() {
			e.reg.SetLeasePolicy(&iopv1.LeasePolicy{MinRevisions: map[string]uint64{"cred-a": 2}})
		}, held: [2]bool{true, false}},
		{name: "a lower revision than the Node's", change: func() {
			e.reg.SetLeasePolicy(&iopv1.LeasePolicy{MinRevisions: map[string]uint64{"cred-a": 1}})
		}, held: [2]bool{true, false}},
		{name: "a capacity change", change: func() {
			leased.Capacity = 3
			refresh(p2)
		}},
		{name: "moved to another credential", change: func() {
			leased.Credential = "cred-b"
			refresh(p2)
		}, held: [2]bool{true, false}},
		{name: "revoked, then rotated before the Node acknowledged the revocation", change: func() {
			e.reg.SetLeasePolicy(&iopv1.LeasePolicy{RevokedCredentials: []string{"cred-b"}})
			next() // the Node may apply it before it reads the next
			e.reg.SetLeasePolicy(&iopv1.LeasePolicy{MinRevisions: map[string]uint64{"cred-b": 2}})
		}, held: [2]bool{true, false}},
		{name: "capacity lowered, then raised before the Node acknowledged it", change: func() {
			leased.Capacity = 1
			refresh(p2)
			next()
			leased.Capacity = 4
			refresh(p2)
		}, capacity: 1},
		{name: "a model removed, then added back before the Node acknowledged it", change: func() {
			refresh(spec("p2", "m3", 2))
			next()
			refresh(p2)
		}, held: [2]bool{false, true}},
		{name: "a provider removed, then added back before the Node acknowledged it", change: func() {
			e.reg.Refresh(store(t, record("n1", leased)))
			next()
			refresh(p2)
		}, held: [2]bool{false, true}},
		{name: "more changes unacknowledged than the Edge remembers", change: func() {
			for range 16 {
				leased.Capacity++
				refresh(p2)
				next()
			}
			leased.Capacity++
			refresh(p2)
		}, held: [2]bool{true, true}},
		{name: "enabled again", change: func() {
			e.reg.SetLeasePolicy(&iopv1.LeasePolicy{DisabledProfiles: []string{"p1"}})
			ack(next())
			e.reg.SetLeasePolicy(&iopv1.LeasePolicy{})
		}, held: [2]bool{true, false}},
	}
	for _, s := range steps {
		s.change()
		rev := next()
		if got := [2]bool{held("p1"), held("p2")}; got != s.held {
			t.Fatalf("%s, unacknowledged: p1 and p2 held back %v, want %v", s.name, got, s.held)
		}
		if _, a, _ := e.reg.Admission("n1", "p1", "m1"); s.capacity > 0 && a.Capacity != s.capacity {
			t.Fatalf("%s, unacknowledged: p1 capacity %d, want %d", s.name, a.Capacity, s.capacity)
		}
		ack(rev)
		if held("p1") || held("p2") {
			t.Fatalf("%s: held back after the Node applied it", s.name)
		}
	}
}

// TestWorkspaceHeldUntilApplied: a workspace ref is resolved only by what
// the Node accepted under a grant the same as the latest: while a
// configuration it may still open by grants the ref otherwise (changed
// authority; removed, then added back), the resolution waits for the
// Node's acknowledgement and is decided by it. A change to anything else
// holds nothing back.
func TestWorkspaceHeldUntilApplied(t *testing.T) {
	grant := func(ops ...string) *iopv1.WorkspaceGrant {
		return &iopv1.WorkspaceGrant{Ref: "w", Authority: &iopv1.WorkspaceAuthority{Ops: ops,
			Limits: &iopv1.WorkspaceLimits{ReadBytes: 1, ListEntries: 1, WriteBytes: 1, CommandTimeoutMs: 1, OutputBytes: 1}}}
	}
	rec := func(capacity int, grants ...*iopv1.WorkspaceGrant) nodes.Record {
		r := record("n1", spec("p1", "m1", capacity))
		r.Workspaces = grants
		return r
	}
	e := startEdge(t, "", 1, nodes.Config{Store: store(t, rec(1, grant("read")))})
	_, st := rawNode(t, e)
	r := register(t, st, "n1", token)
	st.WriteMessage(nodewire.Msg(&iopv1.NodeReadyRequest{Generation: r.GetGeneration(), Revision: r.GetConfig().GetRevision(), Workspaces: []string{"w"}}))
	if env, err := st.ReadMessage(ctx(t)); err != nil || !env.GetNodeReadyResponse().GetAccepted() {
		t.Fatalf("ready answer %v %v", env, err)
	}
	gen := r.GetGeneration()
	next := func() uint64 { t.Helper(); return nextPush(t, st) }
	ack := func(rev uint64, accepted ...string) {
		t.Helper()
		st.WriteMessage(nodewire.Msg(&iopv1.ConfigUpdateAck{Revision: rev, Workspaces: accepted}))
	}
	// now resolves without waiting: a held resolution ends with the
	// cancelled context's error.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	now := func() (uint64, error) { return e.reg.WorkspaceGeneration(done, "n1", "w") }
	if g, err := now(); err != nil || g != gen {
		t.Fatalf("as registered: %d, %v; want generation %d", g, err, gen)
	}

	// Authority widened: the Node may still open by the narrower grant.
	e.reg.Refresh(store(t, rec(1, grant("read", "list"))))
	rev := next()
	if _, err := now(); !errors.Is(err, context.Canceled) {
		t.Fatalf("authority changed, unacknowledged: %v, want held", err)
	}
	// A waiter is decided by the acknowledgement.
	waited := make(chan error, 1)
	go func() {
		g, err := e.reg.WorkspaceGeneration(ctx(t), "n1", "w")
		if err == nil && g != gen {
			err = errors.New("another generation")
		}
		waited <- err
	}()
	ack(rev, "w")
	if err := <-waited; err != nil {
		t.Fatalf("after the acknowledgement: %v", err)
	}

	// Removed, then added back: the Node may have applied the removal.
	e.reg.Refresh(store(t, rec(1)))
	removal := next()
	e.reg.Refresh(store(t, rec(1, grant("read", "list"))))
	rev = next()
	if _, err := now(); !errors.Is(err, context.Canceled) {
		t.Fatalf("removed and added back, unacknowledged: %v, want held", err)
	}
	ack(removal) // applied the removal; the grant back is not yet
	eventually(t, "the removal applied", func() bool { return e.reg.Snapshot()[0].AppliedRevision == removal })
	if _, err := now(); !errors.Is(err, context.Canceled) {
		t.Fatalf("removal acknowledged, grant back not: %v, want held", err)
	}
	ack(rev, "w")
	eventually(t, "the grant back applied", func() bool { _, err := now(); return err == nil })

	// Another change leaves the grant as it is: nothing is held back.
	e.reg.Refresh(store(t, rec(2, grant("read", "list"))))
	rev = next()
	if g, err := now(); err != nil || g != gen {
		t.Fatalf("capacity changed, unacknowledged: %d, %v; want generation %d", g, err, gen)
	}
	ack(rev, "w")

	// The Node's catalog refuses the new grant: refused once it says so.
	e.reg.Refresh(store(t, rec(2, grant("read", "list", "write"))))
	rev = next()
	ack(rev)
	eventually(t, "the refusal applied", func() bool { _, err := now(); return errors.Is(err, nodes.ErrWorkspaceRefused) })
}

// nextPush reads the next configuration the Edge pushes on a raw Node's
// control stream and returns its revision.
func nextPush(t *testing.T, st *wire.Stream) uint64 {
	t.Helper()
	env, err := st.ReadMessage(ctx(t))
	if err != nil || env.GetConfigUpdate() == nil {
		t.Fatalf("push %v %v", env, err)
	}
	return env.GetConfigUpdate().GetConfig().GetRevision()
}
