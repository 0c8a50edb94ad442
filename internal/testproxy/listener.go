package testproxy

import (
	"net"
	"os"
	"sync"
	"syscall"
)

// FailAccept returns ln with its first Accept calls failing with errs, in
// order, as the accept system call's failures reach a caller: a
// *net.OpError around the error, and around an *os.SyscallError for a
// syscall.Errno (EMFILE: the process is out of descriptors; ENFILE: the
// system is). After them, Accept is ln's own; Close and Addr always are.
func FailAccept(ln net.Listener, errs ...error) net.Listener {
	return &failingListener{Listener: ln, errs: errs}
}

type failingListener struct {
	net.Listener
	mu   sync.Mutex
	errs []error
}

func (l *failingListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) == 0 {
		l.mu.Unlock()
		return l.Listener.Accept()
	}
	err := l.errs[0]
	l.errs = l.errs[1:]
	l.mu.Unlock()
	if errno, ok := err.(syscall.Errno); ok {
		err = os.NewSyscallError("accept4", errno)
	}
	return nil, &net.OpError{Op: "accept", Net: l.Addr().Network(), Addr: l.Addr(), Err: err}
}
