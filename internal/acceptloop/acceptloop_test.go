package acceptloop

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/iop-dev/iop/internal/testproxy"
)

// listen returns a real listener whose first Accept calls fail with errs.
func listen(t *testing.T, errs ...error) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return testproxy.FailAccept(ln, errs...)
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var errClosed = errors.New("closed")

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{os.NewSyscallError("accept4", syscall.EMFILE), true},
		{os.NewSyscallError("accept4", syscall.ENFILE), true},
		{os.NewSyscallError("accept4", syscall.ENOBUFS), true},
		{os.NewSyscallError("accept4", syscall.ENOMEM), true},
		{timeoutErr{}, true},
		{net.ErrClosed, false},
		{os.NewSyscallError("accept4", syscall.EINVAL), false},
		{errors.New("listener broke"), false},
	} {
		if got := Retryable(&net.OpError{Op: "accept", Err: tc.err}); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestServeOutlastsPassingFailures: a listener out of descriptors, buffers
// or time keeps serving once they are back, and the connection that waited
// in the backlog meanwhile is handled.
func TestServeOutlastsPassingFailures(t *testing.T) {
	ln := listen(t, syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, timeoutErr{})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	handled := 0
	err = Serve(ln, hclog.NewNullLogger(), stop, errClosed, func(nc net.Conn) error {
		handled++
		nc.Close()
		return errors.New("handler done")
	})
	if err == nil || err.Error() != "handler done" || handled != 1 {
		t.Fatalf("Serve = %v after %d connections; want the handler's error after 1", err, handled)
	}
}

// TestServeEndsOnLastingFailure: a failure that does not pass ends Serve
// with that error, unless the owner stopped, which reads as closed.
func TestServeEndsOnLastingFailure(t *testing.T) {
	ln := listen(t, syscall.EINVAL)
	err := Serve(ln, hclog.NewNullLogger(), nil, errClosed, func(net.Conn) error { return nil })
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("Serve = %v, want the accept error", err)
	}

	ln = listen(t)
	stopped := make(chan struct{})
	close(stopped)
	ln.Close()
	err = Serve(ln, hclog.NewNullLogger(), stopped, errClosed, func(net.Conn) error { return nil })
	if err != errClosed {
		t.Fatalf("Serve on a listener its stopped owner closed = %v, want %v", err, errClosed)
	}
}

// TestServeStopEndsRetries: an owner stopping while Accept keeps failing
// ends Serve with closed instead of retrying forever.
func TestServeStopEndsRetries(t *testing.T) {
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = syscall.EMFILE
	}
	ln := listen(t, errs...)
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Serve(ln, hclog.NewNullLogger(), stop, errClosed, func(net.Conn) error { return nil })
	}()
	close(stop)
	if err := <-done; err != errClosed {
		t.Fatalf("Serve = %v, want %v", err, errClosed)
	}
}
