//go:build unix

package cli

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/iop-dev/iop/execution"
)

// Run implements execution.Provider.
func (a *Adapter) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	prompt := Prompt(req.Input)
	if a.cfg.Placeholder != "" && !a.operand && strings.HasPrefix(prompt, "-") {
		return execution.Result{}, execution.Failf(execution.FailureInvalidRequest,
			"the prompt begins with \"-\" and would be read as an option of the command (its template puts no \"--\" before the prompt)")
	}
	argv := append([]string(nil), a.cfg.Argv...)
	if a.cfg.Placeholder != "" {
		for i := 1; i < len(argv); i++ {
			if argv[i] == a.cfg.Placeholder {
				argv[i] = prompt
			}
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = a.env()
	cmd.Dir = a.cfg.Dir
	if cmd.Dir == "" {
		cmd.Dir = os.TempDir()
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// On cancel or deadline, kill the whole group, not just the leader.
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 2 * time.Second
	if a.cfg.Placeholder == "" {
		cmd.Stdin = strings.NewReader(prompt)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return execution.Result{}, &execution.Failure{Class: execution.FailureInternal, Message: "cannot start command"}
	}
	cmd.Stderr = io.Discard // may echo the prompt; never relayed
	if err := cmd.Start(); err != nil {
		return execution.Result{}, &execution.Failure{Class: execution.FailureUnavailable, Message: "cannot start command"}
	}
	readErr := a.relay(stdout, w)
	if readErr != nil {
		killGroup(cmd)
	}
	waitErr := cmd.Wait()
	killGroup(cmd) // stragglers the command left behind
	switch {
	case ctx.Err() != nil:
		return execution.Result{}, execution.Classify(ctx, ctx.Err())
	case readErr != nil:
		return execution.Result{}, readErr
	case waitErr != nil:
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			return execution.Result{}, execution.Failf(execution.FailureProvider, "command exited with status %d", ee.ExitCode())
		}
		return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "command failed"}
	}
	return execution.Result{StopReason: "stop"}, nil
}

// relay streams stdout as deltas, keeping UTF-8 sequences whole.
func (a *Adapter) relay(r io.Reader, w execution.EventWriter) error {
	buf := make([]byte, 8<<10)
	var carry []byte
	var total int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			total += int64(n)
			if total > a.cfg.MaxOutput {
				return &execution.Failure{Class: execution.FailureProvider, Message: "command output over the cap"}
			}
			chunk := append(carry, buf[:n]...)
			var send []byte
			send, carry = utf8Split(chunk)
			carry = append([]byte(nil), carry...)
			if len(send) > 0 {
				if werr := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: string(send)}); werr != nil {
					return werr
				}
			}
		}
		if err != nil {
			if len(carry) > 0 {
				if werr := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: string(carry)}); werr != nil {
					return werr
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return nil // the pipe closed under a kill; Wait reports why
		}
	}
}

func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
