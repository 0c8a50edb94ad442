package node

import (
	"fmt"
	"runtime/debug"

	"github.com/iop-dev/iop/execution"
)

// errProviderPanicked is what a call into a provider that panicked
// returns: the run or tunnel fails as an internal failure.
var errProviderPanicked = &execution.Failure{Class: execution.FailureInternal, Message: "the provider failed unexpectedly"}

// contain runs f, a call into provider's code (a run, a tunnel, a health
// check, a command), and turns a panic in it into errProviderPanicked, as
// net/http does for a handler: one provider's bug fails the call it was
// making, instead of ending the Node and every call on it. The panic and
// its stack are logged; the call's own deferred cleanup (its slot, its
// credential) runs as after any failure.
func (rt *Runtime) contain(call, provider string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			rt.log.Error("provider panicked; the call fails, the Node goes on", "provider", provider, "call", call,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = errProviderPanicked
		}
	}()
	return f()
}
