package nodes

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// TestReadyResponseBeforePush: a config push due while a Node registers
// (here a reload between the Edge marking the Node ready and answering its
// ready request) reaches the Node after the ready response, never before:
// a Node waiting for the response drops a connection that sends it
// anything else. The reload's push is given time to overtake the response
// (the old order let it); the frames must still come in order.
func TestReadyResponseBeforePush(t *testing.T) {
	reg, err := New(Config{Store: oneNode(t, testToken, 1), Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg.testHookReg = func(stage string) {
		if stage == "ready" {
			reg.Refresh(oneNode(t, testToken, 2)) // a reload: its push is due to this connection
			time.Sleep(50 * time.Millisecond)
		}
	}
	ctx, st := dialRegistry(t, reg)
	read := func() *iopv1.Envelope {
		t.Helper()
		env, err := st.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	if err := st.WriteMessage(nodewire.Msg(&iopv1.RegisterRequest{NodeId: "n1", Credential: []byte(testToken)})); err != nil {
		t.Fatal(err)
	}
	resp := read().GetRegisterResponse()
	if !resp.GetAccepted() {
		t.Fatalf("registration: %v", resp)
	}
	ready := &iopv1.NodeReadyRequest{Generation: resp.GetGeneration(), Revision: resp.GetConfig().GetRevision(), Providers: []*iopv1.ProviderSnapshot{
		{ProviderId: "p1", Status: iopv1.ProviderStatus_PROVIDER_STATUS_AVAILABLE, Health: iopv1.ProviderHealth_PROVIDER_HEALTH_HEALTHY, Capacity: 1, Models: []string{"m"}}}}
	if err := st.WriteMessage(nodewire.Msg(ready)); err != nil {
		t.Fatal(err)
	}
	if first := read(); first.GetNodeReadyResponse() == nil {
		t.Fatalf("the first message after ready is %T, want the ready response", first.GetBody())
	}
	if up := read().GetConfigUpdate(); up == nil || up.GetConfig().GetProviders()[0].GetCapacity() != 2 {
		t.Fatalf("the push after the ready response: %v", up)
	}
}

// TestDispatchErr: a failure to open a dispatch's stream or write its
// request matches ErrNotStarted when it comes of the Node's GOAWAY or
// refusal or of the connection's end (the request never left), and not
// when it is the caller's own (ctx, a message too large) or a reset for
// another reason; the cause stays matchable.
func TestDispatchErr(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{wire.ErrGoAway, true},
		{&wire.StreamError{Code: wire.ResetRefused, Remote: true}, true},
		{&wire.CloseError{Reason: wire.ReasonNormal, Remote: true}, true},
		{&wire.CloseError{Reason: wire.ReasonTransportError}, true},
		{context.Canceled, false},
		{wire.ErrMessageTooLarge, false},
		{&wire.StreamError{Code: wire.ResetRefused}, false}, // this side's own reset
		{&wire.StreamError{Code: wire.ResetCancel, Remote: true}, false},
	} {
		err := dispatchErr("start run", c.err)
		if got := errors.Is(err, ErrNotStarted); got != c.want {
			t.Errorf("%v: matches ErrNotStarted %v, want %v", c.err, got, c.want)
		}
		if !errors.Is(err, c.err) {
			t.Errorf("%v: the cause is lost: %v", c.err, err)
		}
	}
}

// TestTokenChangedWhileRegistering: a registration authenticated with a
// token that a reload replaces before the connection is admitted is
// turned away, as the connection would have been ended had it been
// admitted first.
func TestTokenChangedWhileRegistering(t *testing.T) {
	reg, err := New(Config{Store: oneNode(t, testToken, 1), Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg.testHookReg = func(stage string) {
		if stage == "authenticated" {
			reg.Refresh(oneNode(t, "rotated-token-0123456789abcdef", 1))
		}
	}
	ctx, st := dialRegistry(t, reg)
	if err := st.WriteMessage(nodewire.Msg(&iopv1.RegisterRequest{NodeId: "n1", Credential: []byte(testToken)})); err != nil {
		t.Fatal(err)
	}
	env, err := st.ReadMessage(ctx)
	if resp := env.GetRegisterResponse(); err != nil || resp.GetAccepted() || resp.GetRejection() != iopv1.RegisterRejection_REGISTER_REJECTION_UNAUTHENTICATED {
		t.Fatalf("a registration whose token changed while it was checked: %v %v, want UNAUTHENTICATED", env, err)
	}
	if _, ok := reg.Current("n1"); ok {
		t.Fatal("the registration is current")
	}
}

// testToken is the registration token of the Nodes these tests register.
const testToken = "test-token-0123456789abcdef"

// oneNode is a store of Node n1 with token, hosting provider p1 of
// capacity.
func oneNode(t *testing.T, token string, capacity int) *StaticStore {
	t.Helper()
	s, err := NewStaticStore([]Record{{ID: "n1", TokenHash: HashToken(token), Providers: []ProviderSpec{
		{ID: "p1", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m"}, Capacity: capacity}}}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dialRegistry serves reg on a loopback listener until the test ends and
// returns a context bounding the test's waits and a stream of a session
// dialed to it, for a hand-driven Node.
func dialRegistry(t *testing.T, reg *Registry) (context.Context, *wire.Stream) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- reg.Serve(ln) }()
	t.Cleanup(func() { reg.Close(); <-done })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	sess, err := wire.Dial(ctx, "tcp", ln.Addr().String(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	st, err := sess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, st
}
