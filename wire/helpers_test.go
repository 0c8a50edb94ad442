package wire

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/iop-dev/iop/wire/iopv1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// pair starts a client and a server session over real TCP on loopback.
func pair(t testing.TB, ccfg, scfg *Config) (client, server *Session) {
	t.Helper()
	return pairWrapped(t, ccfg, scfg, nil)
}

// pairWrapped is pair with the server's connection passed through wrap
// (when it is not nil) before its session starts on it.
func pairWrapped(t testing.TB, ccfg, scfg *Config, wrap func(net.Conn) net.Conn) (client, server *Session) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		if wrap != nil {
			c = wrap(c)
		}
		s, err := Server(c, scfg)
		ch <- res{s, err}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	client, err = Client(conn, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() {
		client.Close()
		r.s.Close()
	})
	return client, r.s
}

// closeErrOf waits for s to close and returns its *CloseError.
func closeErrOf(t testing.TB, s *Session) *CloseError {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("session did not close")
	}
	var ce *CloseError
	if !errors.As(s.Err(), &ce) {
		t.Fatalf("Err() = %v, want *CloseError", s.Err())
	}
	return ce
}

func wantReason(t testing.TB, s *Session, reason CloseReason, remote bool) {
	t.Helper()
	ce := closeErrOf(t, s)
	if ce.Reason != reason || ce.Remote != remote {
		t.Fatalf("close = %v (reason %v, remote %v), want reason %v remote %v", ce, ce.Reason, ce.Remote, reason, remote)
	}
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func errEnv(msg string) *iopv1.Envelope {
	return &iopv1.Envelope{Body: &iopv1.Envelope_Error{Error: &iopv1.Error{Code: iopv1.ErrorCode_ERROR_CODE_NOT_FOUND, Message: msg}}}
}

// rawPeer speaks the protocol by hand against a real Session, to send what
// a correct Session never would.
type rawPeer struct {
	t    testing.TB
	conn net.Conn
	br   *bufio.Reader
}

// rawServerPair starts a real server Session and a raw client peer. The
// raw peer sends hello (magic and the given preface) unless hello is nil.
func rawServerPair(t testing.TB, scfg *Config, hello []byte) (*rawPeer, <-chan *Session, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	sch := make(chan *Session, 1)
	ech := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ech <- err
			return
		}
		s, err := Server(c, scfg)
		if err != nil {
			ech <- err
			return
		}
		t.Cleanup(func() { s.Close() })
		sch <- s
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p := &rawPeer{t: t, conn: conn, br: bufio.NewReader(conn)}
	if hello != nil {
		if _, err := conn.Write(hello); err != nil {
			t.Fatal(err)
		}
	}
	return p, sch, ech
}

func validHello(window uint32) []byte {
	return append(magic[:], encodeControl(nil, 0, ctlPreface(&iopv1.Preface{Version: ProtocolVersion, StreamWindow: window, MaxStreams: 100}))...)
}

// rawClient connects a raw client peer to a real server and completes the
// handshake, returning both.
func rawClient(t testing.TB, scfg *Config) (*rawPeer, *Session) {
	t.Helper()
	p, sch, ech := rawServerPair(t, scfg, validHello(1<<30))
	var s *Session
	select {
	case s = <-sch:
	case err := <-ech:
		t.Fatal(err)
	}
	var m [8]byte
	if _, err := io.ReadFull(p.br, m[:]); err != nil || m != magic {
		t.Fatalf("server magic %q %v", m, err)
	}
	h, payload := p.read()
	if h.typ != frameControl {
		t.Fatalf("server preface frame %v", h)
	}
	if c, err := decodeControl(0, payload); err != nil || c.GetPreface() == nil {
		t.Fatalf("server preface %v %v", c, err)
	}
	// Runs before the session's own cleanup: the peer hangs up first, so
	// closing the session does not wait out its linger.
	t.Cleanup(func() { p.conn.Close() })
	return p, s
}

func (p *rawPeer) send(h header, payload []byte) {
	p.t.Helper()
	h.length = uint32(len(payload))
	b := make([]byte, headerSize, headerSize+len(payload))
	h.encode(b)
	if _, err := p.conn.Write(append(b, payload...)); err != nil {
		p.t.Logf("raw send %v: %v", h, err)
	}
}

func (p *rawPeer) sendControl(stream uint64, c *iopv1.Control) {
	p.t.Helper()
	if _, err := p.conn.Write(encodeControl(nil, stream, c)); err != nil {
		p.t.Logf("raw send control: %v", err)
	}
}

func (p *rawPeer) read() (header, []byte) {
	p.t.Helper()
	h, payload, err := p.tryRead()
	if err != nil {
		p.t.Fatalf("raw read: %v", err)
	}
	return h, payload
}

func (p *rawPeer) tryRead() (header, []byte, error) {
	p.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hb [headerSize]byte
	h, err := readHeader(p.br, hb[:])
	if err != nil {
		return h, nil, err
	}
	payload := make([]byte, h.length)
	_, err = io.ReadFull(p.br, payload)
	return h, payload, err
}

// readUntilControl reads frames until a CONTROL frame whose body matches,
// answering heartbeat requests when answer is set.
func (p *rawPeer) readUntil(match func(h header, c *iopv1.Control) bool, answer bool) *iopv1.Control {
	p.t.Helper()
	for {
		h, payload, err := p.tryRead()
		if err != nil {
			p.t.Fatalf("raw read: %v", err)
		}
		if h.typ != frameControl {
			continue
		}
		c, err := decodeControl(h.stream, payload)
		if err != nil {
			p.t.Fatalf("raw decode control: %v", err)
		}
		if answer && c.GetHeartbeatRequest() != nil {
			p.sendControl(0, ctlPong(c.GetHeartbeatRequest().GetId()))
		}
		if match(h, c) {
			return c
		}
	}
}

func (p *rawPeer) expectSessionClose() CloseReason {
	p.t.Helper()
	c := p.readUntil(func(_ header, c *iopv1.Control) bool { return c.GetSessionClose() != nil }, true)
	return CloseReason(c.GetSessionClose().GetReason())
}

func newBufReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
