package nodes

import (
	"testing"

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
