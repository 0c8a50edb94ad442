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
	const tok = "test-token-0123456789abcdef"
	rec := func(capacity int) *StaticStore {
		s, err := NewStaticStore([]Record{{ID: "n1", TokenHash: HashToken(tok), Providers: []ProviderSpec{
			{ID: "p1", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m"}, Capacity: capacity}}}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	reg, err := New(Config{Store: rec(1), Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg.testHookReg = func(stage string) {
		if stage == "ready" {
			reg.Refresh(rec(2)) // a reload: its push is due to this connection
			time.Sleep(50 * time.Millisecond)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- reg.Serve(ln) }()
	defer func() { reg.Close(); <-done }()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sess, err := wire.Dial(ctx, "tcp", ln.Addr().String(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	st, err := sess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	read := func() *iopv1.Envelope {
		t.Helper()
		env, err := st.ReadMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	if err := st.WriteMessage(nodewire.Msg(&iopv1.RegisterRequest{NodeId: "n1", Credential: []byte(tok)})); err != nil {
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
	const tok = "test-token-0123456789abcdef"
	rec := func(token string) *StaticStore {
		s, err := NewStaticStore([]Record{{ID: "n1", TokenHash: HashToken(token), Providers: []ProviderSpec{
			{ID: "p1", Adapter: "openai", Category: execution.CategoryLocal, Models: []string{"m"}, Capacity: 1}}}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	reg, err := New(Config{Store: rec(tok), Epoch: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg.testHookReg = func(stage string) {
		if stage == "authenticated" {
			reg.Refresh(rec("rotated-token-0123456789abcdef"))
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- reg.Serve(ln) }()
	defer func() { reg.Close(); <-done }()

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sess, err := wire.Dial(ctx, "tcp", ln.Addr().String(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	st, err := sess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WriteMessage(nodewire.Msg(&iopv1.RegisterRequest{NodeId: "n1", Credential: []byte(tok)})); err != nil {
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
