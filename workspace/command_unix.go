//go:build linux || darwin

package workspace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// running is a command in flight, for Cleanup to cancel.
type running struct{ cancel context.CancelFunc }

// waitDelay bounds how long a finished or killed command's output pipe
// may stay open (a grandchild holding it).
const waitDelay = 2 * time.Second

// Run runs a granted command template with typed arguments: no shell,
// stdin /dev/null, the allow-listed environment, the already-opened root
// as its working directory, its own process group (killed whole on
// timeout, cancel and cleanup), one output cap for stdout and stderr.
func (s *Session) Run(ctx context.Context, id string, args map[string]string) (*Result, error) {
	end, err := s.begin(OpCommand)
	if err != nil {
		return nil, err
	}
	defer end()
	if !slices.Contains(s.auth.Commands, id) {
		return nil, fail(CodeDenied, "command", "", errors.New("command "+id+" is not granted"))
	}
	ti := slices.IndexFunc(s.e.Commands, func(t Template) bool { return t.ID == id })
	if ti < 0 {
		return nil, fail(CodeDenied, "command", "", nil)
	}
	argv, err := expand(&s.e.Commands[ti], args)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	run := &running{cancel: cancel}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fail(CodeClosed, "command", "", nil)
	}
	s.running[run] = struct{}{} // Cleanup cancels it; begin's hold makes Cleanup wait
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.running, run)
		s.mu.Unlock()
	}()

	tmp, err := os.MkdirTemp("", "iop-ws-")
	if err != nil {
		return nil, fail(CodeIO, "command", "", err)
	}
	defer os.RemoveAll(tmp) // ours, outside the root; links in it are removed, not followed
	tctx, tcancel := context.WithTimeout(ctx, s.auth.Limits.CommandTimeout)
	defer tcancel()
	out := &capWriter{limit: s.auth.Limits.OutputBytes}
	dir, err := unix.Openat(s.r.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fail(CodeIO, "command", "", err)
	}
	cmd, release := s.r.command(tctx, argv, dir)
	cmd.Env = s.environ(tmp)
	cmd.Stdin = nil // /dev/null
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	sealDescriptors()
	err = cmd.Start()
	release()
	unix.Close(dir) // the child has entered it (or failed to start)
	if err != nil {
		return nil, fail(CodeIO, "command", "", err)
	}
	werr := cmd.Wait()
	// Whatever is left of the group (a grandchild that outlived the
	// leader) dies now.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	res := &Result{ExitCode: -1, Output: out.buf, Truncated: out.truncated}
	if st, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		switch {
		case st.Exited():
			res.ExitCode = st.ExitStatus()
		case st.Signaled():
			res.Signal = unix.SignalName(st.Signal())
		}
	}
	switch {
	case errors.Is(tctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		res.TimedOut = true
	case ctx.Err() != nil:
		res.Canceled = true
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && !errors.Is(werr, exec.ErrWaitDelay) {
		return res, fail(CodeIO, "command", "", werr)
	}
	return res, nil
}
