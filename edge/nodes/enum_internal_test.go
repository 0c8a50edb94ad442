package nodes

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/wire"
	"github.com/iop-dev/iop/wire/iopv1"
)

// TestWireEnums: every provider status and health crosses the wire and
// back as itself; every wire value the schema defines (other than
// UNSPECIFIED) reads as a value of its own, so that a value added to the
// schema without a mapping fails here rather than reading as another; an
// unknown value reads as the safe one (unavailable, unhealthy, internal).
func TestWireEnums(t *testing.T) {
	for _, s := range []ProviderStatus{StatusAvailable, StatusUnavailable, StatusDraining, StatusDisabled} {
		if got := statusFrom(statusTo(s)); got != s {
			t.Errorf("status %q came back as %q", s, got)
		}
	}
	for _, h := range []ProviderHealth{HealthHealthy, HealthUnhealthy, HealthOffline, HealthRefused} {
		if got := healthFrom(healthTo(h)); got != h {
			t.Errorf("health %q came back as %q", h, got)
		}
	}
	readsDistinct(t, iopv1.ProviderStatus_name, func(v int32) ProviderStatus { return statusFrom(iopv1.ProviderStatus(v)) })
	readsDistinct(t, iopv1.ProviderHealth_name, func(v int32) ProviderHealth { return healthFrom(iopv1.ProviderHealth(v)) })
	readsDistinct(t, iopv1.TunnelError_name, func(v int32) TunnelCode { return tunnelCodeFrom(iopv1.TunnelError(v)) })
	if statusFrom(99) != StatusUnavailable || healthFrom(99) != HealthUnhealthy || tunnelCodeFrom(99) != TunnelInternal {
		t.Error("an unknown wire value reads as something other than the safe one")
	}
}

// readsDistinct checks that every value of a schema enum but 0
// (UNSPECIFIED) reads as a value no other one reads as.
func readsDistinct[V comparable](t *testing.T, names map[int32]string, read func(int32) V) {
	t.Helper()
	seen := map[V]string{}
	for v, name := range names {
		if v == 0 {
			continue
		}
		got := read(v)
		if prev, dup := seen[got]; dup {
			t.Errorf("%s and %s both read as %v", prev, name, got)
		}
		seen[got] = name
	}
}

// TestTransportFailureSaysWhat: a run's transport failure names what
// ended it: the Node's reset of the run's stream (with its code), the
// stream's end without a terminal, or the connection's close reason.
func TestTransportFailureSaysWhat(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{io.EOF, "node ended the run without a terminal"},
		{&wire.StreamError{Code: wire.ResetProtocolError, Remote: true}, "node reset the run's stream: " + wire.ResetProtocolError.String()},
		{&wire.StreamError{Code: wire.ResetCancel}, "run's stream reset: " + wire.ResetCancel.String()},
		{fmt.Errorf("read: %w", &wire.CloseError{Reason: wire.ReasonHeartbeatTimeout, Remote: true}), "node connection ended: " + wire.ReasonHeartbeatTimeout.String()},
		{errors.New("boom"), "node connection ended: transport_error"},
	} {
		f := transportFailure(c.err)
		if f.Class != execution.FailureTransport || f.Message != c.want {
			t.Errorf("%v: %v %q, want %q", c.err, f.Class, f.Message, c.want)
		}
	}
}
