// Package faultproxy is a TCP proxy for tests that injects the faults real
// networks have: a pause that keeps connections open but moves no bytes
// (a machine that vanished, a suspended laptop), added latency, a
// half-close, an abrupt reset, and dropping every connection. It forwards
// bytes unchanged otherwise.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy accepts on a loopback listener and forwards each connection to a
// target address.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond
	paused  bool
	delay   time.Duration
	refuse  bool
	conns   map[*pair]struct{}
	closed  bool
	wg      sync.WaitGroup
	fwd     atomic.Int64 // bytes forwarded
	accepts atomic.Int64
}

type pair struct {
	client, server net.Conn
}

// New starts a proxy to target on 127.0.0.1:0.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Forwarded returns the bytes forwarded so far, both directions.
func (p *Proxy) Forwarded() int64 { return p.fwd.Load() }

// Accepted returns how many connections were accepted.
func (p *Proxy) Accepted() int64 { return p.accepts.Load() }

func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepts.Add(1)
		p.mu.Lock()
		refuse := p.refuse || p.closed
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			reset(c)
			continue
		}
		pr := &pair{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns[pr] = struct{}{}
		p.mu.Unlock()
		var once sync.Once
		done := func() {
			once.Do(func() {
				p.mu.Lock()
				delete(p.conns, pr)
				p.mu.Unlock()
			})
		}
		p.wg.Go(func() { p.pipe(s, c); done() })
		p.wg.Go(func() { p.pipe(c, s); done() })
	}
}

// pipe copies src to dst, honouring pause and delay between chunks. At
// src's EOF it half-closes dst (so a half-close passes through).
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait() {
				return
			}
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
			p.fwd.Add(int64(n))
		}
		if err != nil {
			// A close is news too: while paused it is held back like data,
			// so a vanished peer's FIN or reset never arrives.
			if !p.wait() {
				return
			}
			if errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					tc.CloseWrite()
					return
				}
			}
			dst.Close()
			return
		}
	}
}

// wait blocks while paused; false once the proxy is closed.
func (p *Proxy) wait() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.paused && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

// Pause stops moving bytes in both directions on every connection, new
// ones included, without closing anything: to both ends the peer has
// gone silent.
func (p *Proxy) Pause() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Resume moves bytes again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Blackhole pauses the current connections for good and refuses new ones
// with a reset: the machine behind it vanished without closing anything.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.paused, p.refuse = true, true
	p.mu.Unlock()
}

// SetDelay adds d before each forwarded chunk.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// ResetAll closes every connection abruptly (RST to both ends).
func (p *Proxy) ResetAll() {
	p.mu.Lock()
	prs := make([]*pair, 0, len(p.conns))
	for pr := range p.conns {
		prs = append(prs, pr)
	}
	p.mu.Unlock()
	for _, pr := range prs {
		reset(pr.client)
		reset(pr.server)
	}
}

// HalfCloseAll ends the proxy-to-server direction of every connection (the
// server reads EOF; the other direction stays up).
func (p *Proxy) HalfCloseAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pr := range p.conns {
		if tc, ok := pr.server.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}
}

// Conns returns the number of live proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy and closes every connection; its goroutines have
// ended when it returns.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	prs := make([]*pair, 0, len(p.conns))
	for pr := range p.conns {
		prs = append(prs, pr)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, pr := range prs {
		pr.client.Close()
		pr.server.Close()
	}
	p.wg.Wait()
}

// reset closes c with SO_LINGER 0, so the peer sees a reset.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
