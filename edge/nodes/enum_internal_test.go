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
	statuses := map[ProviderStatus]string{}
	for v, name := range iopv1.ProviderStatus_name {
		if v == 0 {
			continue
		}
		s := statusFrom(iopv1.ProviderStatus(v))
		if prev, dup := statuses[s]; dup {
			t.Errorf("%s and %s both read as %q", prev, name, s)
		}
		statuses[s] = name
	}
	healths := map[ProviderHealth]string{}
	for v, name := range iopv1.ProviderHealth_name {
		if v == 0 {
			continue
		}
		h := healthFrom(iopv1.ProviderHealth(v))
		if prev, dup := healths[h]; dup {
			t.Errorf("%s and %s both read as %q", prev, name, h)
		}
		healths[h] = name
	}
	codes := map[TunnelCode]string{}
	for v, name := range iopv1.TunnelError_name {
		if v == 0 {
			continue
		}
		c := tunnelCodeFrom(iopv1.TunnelError(v))
		if prev, dup := codes[c]; dup {
			t.Errorf("%s and %s both read as %v", prev, name, c)
		}
		codes[c] = name
	}
	if statusFrom(99) != StatusUnavailable || healthFrom(99) != HealthUnhealthy || tunnelCodeFrom(99) != TunnelInternal {
		t.Error("an unknown wire value reads as something other than the safe one")
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
