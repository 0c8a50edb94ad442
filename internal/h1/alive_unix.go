//go:build unix

package h1

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peeker checks an idle connection before it is reused. It holds the
// connection's raw handle and the peek, made once, so that a check
// allocates nothing.
type peeker struct {
	rc     syscall.RawConn // nil: the connection has no descriptor to peek
	broken bool            // its descriptor could not be had: never reused
	ok     bool
	peek   func(fd uintptr) bool
}

func (p *peeker) init(nc net.Conn) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		p.broken = true
		return
	}
	p.rc = rc
	p.peek = func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		p.ok = rerr == unix.EAGAIN || rerr == unix.EWOULDBLOCK // nothing to read: open and quiet
		return true                                            // never wait for readiness
	}
}

// alive reports whether an idle connection may carry a request: the
// upstream has neither closed it nor sent anything unasked. It peeks
// without blocking, one system call. A server that closes idle
// connections after a few seconds (uvicorn under vLLM closes after 5)
// is caught here, not by a failed request.
func (p *peeker) alive() bool {
	if p.rc == nil {
		return !p.broken
	}
	p.ok = false
	err := p.rc.Read(p.peek)
	return err == nil && p.ok
}
