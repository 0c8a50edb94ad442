//go:build unix

package cli_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/cli"
)

// collector gathers a run's output.
type collector struct{ strings.Builder }

func (c *collector) WriteEvent(e execution.Event) error {
	if e.Kind == execution.EventDelta {
		c.WriteString(e.Text)
	}
	return nil
}

// Command-line tools as providers. The argv is exact and no shell reads
// it: the prompt takes the place of the one argv element that equals the
// placeholder, so "$HOME; rm -rf" in a prompt is only text (echo). Without
// a placeholder the prompt goes to stdin, a conversation as a transcript
// (see Prompt), and stdout comes back as the answer (tr).
func Example() {
	echo, err := cli.New(cli.Config{ID: "echo", Argv: []string{"/bin/echo", "-n", "{prompt}"}, Placeholder: "{prompt}", Models: []string{"echo"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	var out collector
	_, err = echo.Run(context.Background(), &execution.RunRequest{RunID: "r1", ProviderID: "echo", Target: "echo",
		Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "$HOME; rm -rf"}}}}, &out)
	fmt.Printf("%q %v\n", out.String(), err)

	upper, err := cli.New(cli.Config{ID: "upper", Argv: []string{"/usr/bin/tr", "a-z", "A-Z"}, Models: []string{"upper"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	out.Reset()
	_, err = upper.Run(context.Background(), &execution.RunRequest{RunID: "r2", ProviderID: "upper", Target: "upper",
		Input: execution.Input{System: "Be loud.", Messages: []execution.Message{{Role: "user", Content: "hello"}}}}, &out)
	fmt.Printf("%q %v\n", out.String(), err)
	// Output:
	// "$HOME; rm -rf" <nil>
	// "[SYSTEM]\nBE LOUD.\n\n[USER]\nHELLO" <nil>
}
