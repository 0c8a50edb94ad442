//go:build unix

package h1

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// alive reports whether an idle connection may carry a request: the
// upstream has neither closed it nor sent anything unasked. It peeks
// without blocking, one system call. A server that closes idle
// connections after a few seconds (uvicorn under vLLM closes after 5)
// is caught here, not by a failed request.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ok = false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		ok = rerr == unix.EAGAIN || rerr == unix.EWOULDBLOCK // nothing to read: open and quiet
		return true                                          // never wait for readiness
	})
	return err == nil && ok
}
