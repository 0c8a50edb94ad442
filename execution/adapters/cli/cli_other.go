//go:build !unix

package cli

import (
	"context"

	"github.com/iop-dev/iop/execution"
)

// Run implements execution.Provider. Process groups are Unix-only, so CLI
// providers refuse to run elsewhere rather than leave children behind.
func (a *Adapter) Run(context.Context, *execution.RunRequest, execution.EventWriter) (execution.Result, error) {
	return execution.Result{}, &execution.Failure{Class: execution.FailureUnavailable, Message: "cli providers need a Unix host"}
}
