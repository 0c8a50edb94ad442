package wire

import (
	"errors"
	"io"
	"math"
	"net"
	"testing"
	"time"

	"github.com/iop-dev/iop/wire/iopv1"
)

// TestCloseReasons drives every close reason and checks that the side that
// closed and, where the connection still carries it, the peer observe it.
func TestCloseReasons(t *testing.T) {
	t.Run("normal", func(t *testing.T) {
		client, server := pair(t, nil, nil)
		st, _ := client.OpenStream(ctx(t))
		st.Write([]byte("x"))
		server.Close()
		wantReason(t, server, ReasonNormal, false)
		wantReason(t, client, ReasonNormal, true)
		<-st.Done()
		if !errors.Is(st.Terminal(), ErrSessionClosed) {
			t.Errorf("open stream terminal = %v, want the session's close", st.Terminal())
		}
		if _, err := client.OpenStream(ctx(t)); !errors.Is(err, ErrSessionClosed) {
			t.Errorf("OpenStream after close = %v", err)
		}
		if _, err := client.AcceptStream(ctx(t)); !errors.Is(err, ErrSessionClosed) {
			t.Errorf("AcceptStream after close = %v", err)
		}
		if err := server.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
	t.Run("owner reason", func(t *testing.T) {
		client, server := pair(t, nil, nil)
		client.CloseWithReason(ReasonInternal, "owner gave up")
		ce := closeErrOf(t, server)
		if ce.Reason != ReasonInternal || !ce.Remote || ce.Detail != "owner gave up" {
			t.Fatalf("server observed %+v", ce)
		}
	})
	t.Run("heartbeat timeout on a silent peer", func(t *testing.T) {
		// The raw peer completes the handshake, then never answers.
		hb := &HeartbeatProfile{Interval: 20 * time.Millisecond, Timeout: 60 * time.Millisecond}
		p, s := rawClient(t, &Config{TestHeartbeat: hb})
		ce := closeErrOf(t, s)
		if ce.Reason != ReasonHeartbeatTimeout || ce.Remote {
			t.Fatalf("close = %v, want local heartbeat_timeout", ce)
		}
		if got := p.expectSessionCloseNoAnswer(); got != ReasonHeartbeatTimeout {
			t.Errorf("peer was told %v", got)
		}
	})
	t.Run("heartbeat answered keeps the session", func(t *testing.T) {
		hb := &HeartbeatProfile{Interval: 5 * time.Millisecond, Timeout: 50 * time.Millisecond}
		client, server := pair(t, &Config{TestHeartbeat: hb}, &Config{TestHeartbeat: hb})
		eventually(t, func() bool {
			return client.Stats().HeartbeatsAcked >= 10 && server.Stats().HeartbeatsAcked >= 10
		}, "heartbeats acked %d / %d", func() []any {
			return []any{client.Stats().HeartbeatsAcked, server.Stats().HeartbeatsAcked}
		})
		if client.Err() != nil || server.Err() != nil {
			t.Fatalf("closed: %v / %v", client.Err(), server.Err())
		}
	})
	t.Run("transport error", func(t *testing.T) {
		p, s := rawClient(t, nil)
		p.conn.Close()
		wantReason(t, s, ReasonTransportError, false)
	})
	t.Run("write timeout", func(t *testing.T) {
		// The raw peer grants a huge window and never reads.
		p, s := rawClient(t, &Config{WriteTimeout: 50 * time.Millisecond})
		_ = p
		st, err := s.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			buf := make([]byte, 1<<20)
			for {
				if _, err := st.Write(buf); err != nil {
					return
				}
			}
		}()
		wantReason(t, s, ReasonWriteTimeout, false)
	})
	t.Run("handshake timeout", func(t *testing.T) {
		_, _, ech := rawServerPair(t, &Config{HandshakeTimeout: 30 * time.Millisecond}, nil)
		err := <-ech
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Reason != ReasonHandshakeTimeout {
			t.Fatalf("Server() = %v, want handshake_timeout", err)
		}
	})
	t.Run("version mismatch", func(t *testing.T) {
		v2 := append(magic[:], encodeControl(nil, 0, ctlPreface(&iopv1.Preface{Version: 2, StreamWindow: 1 << 20, MaxStreams: 1}))...)
		p, _, ech := rawServerPair(t, nil, v2)
		err := <-ech
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Reason != ReasonVersionMismatch {
			t.Fatalf("Server() = %v, want version_mismatch", err)
		}
		var m [8]byte
		io.ReadFull(p.br, m[:])
		h, payload := p.read()
		c, _ := decodeControl(h.stream, payload)
		if CloseReason(c.GetSessionClose().GetReason()) != ReasonVersionMismatch {
			t.Fatalf("dialer was told %v", c)
		}
	})
	t.Run("version mismatch seen by the dialer", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			var m [8]byte
			io.ReadFull(c, m[:])
			c.Write(append(magic[:], encodeControl(nil, 0, ctlClose(ReasonVersionMismatch, "want v9"))...))
			io.Copy(io.Discard, c)
		}()
		conn, _ := net.Dial("tcp", ln.Addr().String())
		_, err := Client(conn, nil)
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Reason != ReasonVersionMismatch || !ce.Remote {
			t.Fatalf("Client() = %v, want remote version_mismatch", err)
		}
	})
	t.Run("bad magic", func(t *testing.T) {
		_, _, ech := rawServerPair(t, nil, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		var ce *CloseError
		if err := <-ech; !errors.As(err, &ce) || ce.Reason != ReasonVersionMismatch {
			t.Fatalf("Server() = %v, want version_mismatch", err)
		}
	})
	t.Run("first frame not a preface", func(t *testing.T) {
		hello := append(magic[:], encodeControl(nil, 0, ctlPing(1))...)
		_, _, ech := rawServerPair(t, nil, hello)
		var ce *CloseError
		if err := <-ech; !errors.As(err, &ce) || ce.Reason != ReasonProtocolError {
			t.Fatalf("Server() = %v, want protocol_error", err)
		}
	})
	t.Run("preface window out of range", func(t *testing.T) {
		hello := append(magic[:], encodeControl(nil, 0, ctlPreface(&iopv1.Preface{Version: 1, StreamWindow: 10, MaxStreams: 1}))...)
		_, _, ech := rawServerPair(t, nil, hello)
		var ce *CloseError
		if err := <-ech; !errors.As(err, &ce) || ce.Reason != ReasonProtocolError {
			t.Fatalf("Server() = %v, want protocol_error", err)
		}
	})
}

// expectSessionCloseNoAnswer reads until a SessionClose without answering
// heartbeats (the peer is meant to look dead).
func (p *rawPeer) expectSessionCloseNoAnswer() CloseReason {
	p.t.Helper()
	c := p.readUntil(func(_ header, c *iopv1.Control) bool { return c.GetSessionClose() != nil }, false)
	return CloseReason(c.GetSessionClose().GetReason())
}

func TestConfigValidate(t *testing.T) {
	bad := []*Config{
		{StreamWindow: 100},
		{StreamWindow: maxStreamWindow + 1},
		{MaxStreams: -1},
		{MaxStreams: maxMaxStreams + 1}, // every peer would refuse the preface
		{MaxStreams: math.MaxInt},       // would announce a truncated count
		{AcceptBacklog: -1},
		{WriteTimeout: -time.Second},
		{TestHeartbeat: &HeartbeatProfile{}},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", *c)
		}
	}
	if err := (*Config)(nil).Validate(); err != nil {
		t.Errorf("nil config: %v", err)
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	if _, err := Client(c1, &Config{MaxStreams: -1}); err == nil {
		t.Error("Client accepted an invalid config")
	}
}

// TestNetPipe runs a session in process without sockets.
// pipeSessions is a client and a server session over net.Pipe, closed at
// the test's end.
func pipeSessions(t *testing.T) (client, server *Session) {
	t.Helper()
	c1, c2 := net.Pipe()
	sch := make(chan *Session, 1)
	go func() {
		s, err := Server(c2, nil)
		if err != nil {
			t.Error(err)
		}
		sch <- s
	}()
	client, err := Client(c1, nil)
	if err != nil {
		t.Fatal(err)
	}
	server = <-sch
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestNetPipe(t *testing.T) {
	client, server := pipeSessions(t)
	done := echo(t, server)
	st, _ := client.OpenStream(ctx(t))
	st.Write([]byte("in process"))
	st.CloseWrite()
	if b, err := io.ReadAll(st); err != nil || string(b) != "in process" {
		t.Fatalf("%q %v", b, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
