// Package testproxy is a fault-injecting TCP proxy for tests: it forwards
// real TCP between a client and a target on loopback, and can pause
// forwarding without closing (a machine that vanished, a sleeping laptop:
// a close is held back like data), blackhole it for good, add latency,
// half-close, cut connections, or reset them. FailAccept makes a
// listener's Accept fail as a process out of descriptors sees it.
package testproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards connections accepted on Addr to a target address.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string // fixed at New

	mu     sync.Mutex
	paused bool
	gate   chan struct{} // closed while forwarding is allowed
	refuse bool          // Blackhole: new connections are reset
	delay  time.Duration // before each forwarded chunk
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

type link struct {
	client, server net.Conn
}

// New starts a proxy to target on 127.0.0.1 and closes it at test cleanup.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, ln: ln, target: target, gate: make(chan struct{}), links: map[*link]struct{}{}}
	close(p.gate)
	p.wg.Go(p.accept)
	t.Cleanup(p.Close)
	return p
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			reset(c)
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.links[l] = struct{}{}
		p.mu.Unlock()
		var both sync.WaitGroup
		both.Add(2)
		p.wg.Go(func() { p.pump(s, c); both.Done() })
		p.wg.Go(func() { p.pump(c, s); both.Done() })
		p.wg.Go(func() {
			both.Wait()
			c.Close()
			s.Close()
			p.mu.Lock()
			delete(p.links, l)
			p.mu.Unlock()
		})
	}
}

// pump copies src to dst, holding each chunk while the proxy is paused.
// A close is held back like data, so a peer that vanished while paused is
// never seen closing.
func (p *Proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 || err != nil {
			p.mu.Lock()
			gate, delay := p.gate, p.delay
			p.mu.Unlock()
			<-gate
			if n > 0 && delay > 0 {
				time.Sleep(delay)
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
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

// Pause stops forwarding in both directions on every connection, without
// closing anything: bytes wait in the proxy and in socket buffers.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.paused {
		p.paused = true
		p.gate = make(chan struct{})
	}
}

// Resume forwards again, including what was held.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.paused = false
		close(p.gate)
	}
}

// Blackhole pauses the current connections for good and resets new ones:
// the machine behind the proxy vanished without closing anything.
func (p *Proxy) Blackhole() {
	p.Pause()
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
}

// SetDelay adds d before each forwarded chunk (zero: none).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// current returns the live connections.
func (p *Proxy) current() []*link {
	p.mu.Lock()
	defer p.mu.Unlock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	return links
}

// Cut closes every current connection at both ends (new ones still work).
func (p *Proxy) Cut() {
	for _, l := range p.current() {
		l.client.Close()
		l.server.Close()
	}
}

// Reset aborts every current connection with a TCP reset at both ends.
func (p *Proxy) Reset() {
	for _, l := range p.current() {
		reset(l.client)
		reset(l.server)
	}
}

// HalfClose ends the proxy-to-target direction of every current
// connection: the target reads EOF, the other direction stays up.
func (p *Proxy) HalfClose() {
	for _, l := range p.current() {
		if tc, ok := l.server.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}
}

// reset closes c with SO_LINGER 0, so the peer sees a reset.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Resume()
	p.Cut()
	p.wg.Wait()
}
