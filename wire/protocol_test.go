package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/wire/iopv1"
)

// Stream ids the raw client (dialer) may open are odd.
func dataFrame(stream uint64, flags uint8) header {
	return header{typ: frameData, stream: stream, flags: flags}
}

func TestStreamIDRules(t *testing.T) {
	cases := []struct {
		name   string
		frames func(p *rawPeer)
		reason CloseReason // ReasonUnspecified: the session stays up
	}{
		{"open then data", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.send(dataFrame(1, 0), []byte("x"))
		}, ReasonUnspecified},
		{"id reused", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 3}, nil)
			p.send(header{typ: frameOpen, stream: 3}, nil)
		}, ReasonProtocolError},
		{"id below highest", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 5}, nil)
			p.send(header{typ: frameOpen, stream: 3}, nil)
		}, ReasonProtocolError},
		{"wrong parity", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 2}, nil)
		}, ReasonProtocolError},
		{"data on unopened peer id", func(p *rawPeer) {
			p.send(dataFrame(7, 0), []byte("x"))
		}, ReasonProtocolError},
		{"data on unopened local id", func(p *rawPeer) {
			p.send(dataFrame(8, 0), []byte("x"))
		}, ReasonProtocolError},
		{"data on closed id is discarded", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.sendControl(1, ctlReset(ResetCancel, ""))
			p.send(dataFrame(1, 0), []byte("late"))
			p.send(header{typ: frameWindow, stream: 1}, []byte{0, 0, 1, 0})
		}, ReasonUnspecified},
		{"data after FIN", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.send(dataFrame(1, flagFin), []byte("x"))
			p.send(dataFrame(1, 0), []byte("y"))
		}, ReasonProtocolError},
		{"data inside a fragmented message", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.send(header{typ: frameMessage, stream: 1, flags: flagMore}, []byte{0x0a})
			p.send(dataFrame(1, 0), []byte("y"))
		}, ReasonProtocolError},
		{"unknown frame type", func(p *rawPeer) {
			p.send(header{typ: 9}, nil)
		}, ReasonProtocolError},
		{"unknown flag", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.send(header{typ: frameData, stream: 1, flags: 0x80}, []byte("x"))
		}, ReasonProtocolError},
		{"empty data without FIN", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.send(dataFrame(1, 0), nil)
		}, ReasonProtocolError},
		{"zero window increment", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.send(header{typ: frameWindow, stream: 1}, []byte{0, 0, 0, 0})
		}, ReasonProtocolError},
		{"reset on stream 0", func(p *rawPeer) {
			p.sendControl(0, ctlReset(ResetCancel, ""))
		}, ReasonProtocolError},
		{"heartbeat on a stream", func(p *rawPeer) {
			p.send(header{typ: frameOpen, stream: 1}, nil)
			p.sendControl(1, ctlPing(1))
		}, ReasonProtocolError},
		{"second preface", func(p *rawPeer) {
			p.sendControl(0, ctlPreface(&iopv1.Preface{Version: 1, StreamWindow: 1 << 20, MaxStreams: 1}))
		}, ReasonProtocolError},
		{"control with unknown field", func(p *rawPeer) {
			b := []byte{0x12, 0x02, 0x08, 0x01, 0xf8, 0x3e, 0x01} // heartbeat_request{id:1} + field 999
			p.send(header{typ: frameControl}, b)
		}, ReasonProtocolError},
		{"malformed control", func(p *rawPeer) {
			p.send(header{typ: frameControl}, []byte{0xff, 0xff, 0xff})
		}, ReasonProtocolError},
		{"oversized frame", func(p *rawPeer) {
			var b [headerSize]byte
			header{typ: frameData, stream: 1}.encode(b[:])
			binary.BigEndian.PutUint32(b[0:4], MaxFramePayload+1)
			p.conn.Write(b[:])
		}, ReasonFrameTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, s := rawClient(t, nil)
			tc.frames(p)
			if tc.reason == ReasonUnspecified {
				// A ping round trip proves the frames before it were
				// processed without closing the session.
				id := uint64(77)
				p.sendControl(0, ctlPing(id))
				p.readUntil(func(_ header, c *iopv1.Control) bool {
					return c.GetHeartbeatResponse().GetId() == id
				}, true)
				if s.Err() != nil {
					t.Fatalf("session closed: %v", s.Err())
				}
				return
			}
			if got := p.expectSessionClose(); got != tc.reason {
				t.Errorf("peer was told %v, want %v", got, tc.reason)
			}
			wantReason(t, s, tc.reason, false)
		})
	}
}

func TestFlowControlViolationClosesSession(t *testing.T) {
	p, s := rawClient(t, &Config{StreamWindow: minStreamWindow})
	p.send(header{typ: frameOpen, stream: 1}, nil)
	chunk := make([]byte, maxChunk)
	for range 3 { // three chunks into a two-chunk window
		p.send(dataFrame(1, 0), chunk)
	}
	if got := p.expectSessionClose(); got != ReasonFlowControlError {
		t.Errorf("peer was told %v", got)
	}
	wantReason(t, s, ReasonFlowControlError, false)
}

func TestRapidResetClosesSession(t *testing.T) {
	p, s := rawClient(t, &Config{ResetRate: 1, ResetBurst: 20})
	for id := uint64(1); id < 200; id += 2 {
		p.send(header{typ: frameOpen, stream: id}, nil)
		p.sendControl(id, ctlReset(ResetCancel, ""))
	}
	if got := p.expectSessionClose(); got != ReasonResetFlood {
		t.Errorf("peer was told %v", got)
	}
	wantReason(t, s, ReasonResetFlood, false)
}

// TestAgedResetsAreNotRapidReset: a peer cancelling streams it opened a
// while ago (work under way whose client gave up) is not a rapid reset,
// however many it cancels at once and however low the reset rate; the
// same resets right after the opens are (TestRapidResetClosesSession).
func TestAgedResetsAreNotRapidReset(t *testing.T) {
	p, s := rawClient(t, &Config{ResetRate: 1, ResetBurst: 20})
	const n = 100
	accepted := make(chan *Stream, n)
	go func() {
		for range n {
			st, err := s.AcceptStream(context.Background())
			if err != nil {
				return
			}
			accepted <- st
		}
	}()
	for id := uint64(1); id < 2*n; id += 2 {
		p.send(header{typ: frameOpen, stream: id}, nil)
	}
	var streams []*Stream
	for range n {
		streams = append(streams, <-accepted)
	}
	time.Sleep(rapidResetAge + 100*time.Millisecond) // the streams age; nothing is timed
	for id := uint64(1); id < 2*n; id += 2 {
		p.sendControl(id, ctlReset(ResetCancel, ""))
	}
	p.sendControl(0, ctlPing(7))
	c := p.readUntil(func(_ header, c *iopv1.Control) bool {
		return c.GetSessionClose() != nil || c.GetHeartbeatResponse().GetId() == 7
	}, true)
	if c.GetSessionClose() != nil {
		t.Fatalf("%d cancellations of aged streams closed the session: %v", n, c.GetSessionClose())
	}
	for _, st := range streams {
		<-st.Done()
		var se *StreamError
		if !errors.As(st.Terminal(), &se) || !se.Remote || se.Code != ResetCancel {
			t.Fatalf("stream %d ended %v, want the peer's cancel", st.ID(), st.Terminal())
		}
	}
}

func TestControlFloodClosesSession(t *testing.T) {
	// The raw peer floods heartbeat requests and never reads, so the
	// responses pile up behind a full socket.
	p, s := rawClient(t, &Config{MaxQueuedControl: 64, WriteTimeout: time.Minute})
	if tc, ok := p.conn.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 10)
	}
	stop := make(chan struct{})
	go func() {
		for id := uint64(1); ; id++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := p.conn.Write(encodeControl(nil, 0, ctlPing(id))); err != nil {
				return
			}
		}
	}()
	defer close(stop)
	wantReason(t, s, ReasonControlFlood, false)
}

func TestAcceptBacklogRefuses(t *testing.T) {
	client, server := pair(t, nil, &Config{AcceptBacklog: 2})
	var streams []*Stream
	for range 5 {
		st, err := client.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte("x"))
		streams = append(streams, st)
	}
	refused := 0
	for _, st := range streams[2:] {
		<-st.Done()
		if IsRefused(st.Terminal()) {
			refused++
		}
	}
	if refused != 3 {
		t.Errorf("%d streams refused, want 3", refused)
	}
	for _, st := range streams[:2] {
		select {
		case <-st.Done():
			t.Errorf("stream %d within the backlog ended: %v", st.ID(), st.Terminal())
		default:
		}
	}
	if got := server.Stats().StreamsRefused; got != 3 {
		t.Errorf("server refused %d, want 3", got)
	}
}

func TestMaxStreams(t *testing.T) {
	t.Run("acceptor refuses beyond its limit", func(t *testing.T) {
		p, s := rawClient(t, &Config{MaxStreams: 2})
		for id := uint64(1); id <= 9; id += 2 {
			p.send(header{typ: frameOpen, stream: id}, nil)
		}
		for _, want := range []uint64{5, 7, 9} {
			p.readUntil(func(h header, c *iopv1.Control) bool {
				if c.GetStreamReset() == nil {
					return false
				}
				if h.stream != want || c.GetStreamReset().GetCode() != iopv1.ResetCode_RESET_CODE_REFUSED {
					t.Fatalf("reset %v on stream %d, want refused on %d", c.GetStreamReset(), h.stream, want)
				}
				return true
			}, true)
		}
		if got := s.Stats().StreamsRefused; got != 3 {
			t.Errorf("refused %d, want 3", got)
		}
	})
	t.Run("an ended context opens nothing", func(t *testing.T) {
		client, _ := pair(t, nil, &Config{MaxStreams: 4})
		c, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := client.OpenStream(c); !errors.Is(err, context.Canceled) {
			t.Fatalf("OpenStream with an ended context under the limit = %v, want context.Canceled", err)
		}
		if got := client.Stats().StreamsOpened; got != 0 {
			t.Fatalf("%d streams opened", got)
		}
	})
	t.Run("opener waits for a free slot", func(t *testing.T) {
		client, server := pair(t, nil, &Config{MaxStreams: 1})
		first, err := client.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if _, err := client.OpenStream(c); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("OpenStream at the peer's limit = %v, want to wait until ctx ends", err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := client.OpenStream(ctx(t))
			got <- err
		}()
		first.Reset(ResetCancel)
		if err := <-got; err != nil {
			t.Fatalf("OpenStream after a slot freed: %v", err)
		}
		if server.Stats().StreamsRefused != 0 {
			t.Errorf("server refused streams the client should have held back")
		}
	})
}

func TestGoAway(t *testing.T) {
	t.Run("receiver stops opening", func(t *testing.T) {
		client, server := pair(t, nil, nil)
		before, _ := client.OpenStream(ctx(t))
		before.Write([]byte("x"))
		ss, _ := server.AcceptStream(ctx(t))
		server.GoAway("maintenance")
		<-client.RemoteGoAway()
		if _, err := client.OpenStream(ctx(t)); !errors.Is(err, ErrGoAway) {
			t.Fatalf("OpenStream after goaway = %v, want ErrGoAway", err)
		}
		// The stream accepted before the goaway runs to completion.
		before.CloseWrite()
		io.ReadAll(ss)
		ss.Write([]byte("done"))
		ss.CloseWrite()
		if b, err := io.ReadAll(before); err != nil || string(b) != "done" {
			t.Fatalf("stream below goaway: %q %v", b, err)
		}
		// The server may still open streams of its own.
		if _, err := server.OpenStream(ctx(t)); err != nil {
			t.Fatalf("goaway sender OpenStream: %v", err)
		}
	})
	t.Run("streams above last are refused", func(t *testing.T) {
		p, s := rawClient(t, nil)
		p.send(header{typ: frameOpen, stream: 1}, nil)
		st1, err := s.AcceptStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		s.GoAway("draining")
		ga := p.readUntil(func(_ header, c *iopv1.Control) bool { return c.GetGoAway() != nil }, true)
		if got := ga.GetGoAway().GetLastStreamId(); got != 1 {
			t.Fatalf("goaway last stream id = %d, want 1", got)
		}
		p.send(header{typ: frameOpen, stream: 3}, nil) // raced the goaway
		rst := p.readUntil(func(h header, c *iopv1.Control) bool { return c.GetStreamReset() != nil && h.stream == 3 }, true)
		if rst.GetStreamReset().GetCode() != iopv1.ResetCode_RESET_CODE_REFUSED {
			t.Fatalf("stream above goaway got %v, want refused", rst)
		}
		p.send(dataFrame(1, flagFin), []byte("still running"))
		if b, err := io.ReadAll(st1); err != nil || string(b) != "still running" {
			t.Fatalf("stream below goaway: %q %v", b, err)
		}
	})
	t.Run("opener fails its streams above last", func(t *testing.T) {
		// A raw server sends GOAWAY(last=1) while a real client has
		// streams 1 and 3 open: 3 never ran and ends refused; 1 runs on.
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		srv := make(chan *rawPeer, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p := &rawPeer{t: t, conn: c}
			p.br = newBufReader(c)
			var m [8]byte
			io.ReadFull(p.br, m[:])
			p.read() // client preface
			c.Write(validHello(1 << 20))
			srv <- p
		}()
		conn, _ := net.Dial("tcp", ln.Addr().String())
		client, err := Client(conn, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		p := <-srv
		defer p.conn.Close()
		st1, _ := client.OpenStream(ctx(t))
		st3, _ := client.OpenStream(ctx(t))
		st1.Write([]byte("a"))
		st3.Write([]byte("b"))
		p.sendControl(0, ctlGoAway(1, "bye"))
		<-st3.Done()
		if !IsRefused(st3.Terminal()) {
			t.Fatalf("stream 3 terminal = %v, want refused", st3.Terminal())
		}
		p.send(dataFrame(1, flagFin), []byte("ok"))
		if b, err := io.ReadAll(st1); err != nil || string(b) != "ok" {
			t.Fatalf("stream 1: %q %v", b, err)
		}
	})
}

func TestShutdown(t *testing.T) {
	t.Run("drains then closes", func(t *testing.T) {
		client, server := pair(t, nil, nil)
		st, _ := client.OpenStream(ctx(t))
		st.Write([]byte("work"))
		ss, _ := server.AcceptStream(ctx(t))
		shut := make(chan error, 1)
		go func() { shut <- server.Shutdown(ctx(t)) }()
		<-client.RemoteGoAway()
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned %v with a stream in progress", err)
		default:
		}
		st.CloseWrite()
		io.ReadAll(ss)
		ss.Write([]byte("result"))
		ss.CloseWrite()
		if b, _ := io.ReadAll(st); string(b) != "result" {
			t.Fatalf("in-flight stream got %q", b)
		}
		if err := <-shut; err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
		wantReason(t, client, ReasonNormal, true)
		wantReason(t, server, ReasonNormal, false)
	})
	t.Run("deadline cuts off", func(t *testing.T) {
		client, server := pair(t, nil, nil)
		st, _ := client.OpenStream(ctx(t))
		st.Write([]byte("never finishes"))
		server.AcceptStream(ctx(t))
		c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := server.Shutdown(c); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want deadline exceeded", err)
		}
		<-st.Done()
		var ce *CloseError
		if !errors.As(st.Terminal(), &ce) || ce.Reason != ReasonNormal || !ce.Remote {
			t.Fatalf("cut-off stream terminal = %v", st.Terminal())
		}
	})
}

// TestWaitStreams: WaitStreams returns once at most n streams are open,
// on whichever side they end; before that it waits (an ended ctx shows
// it still would); and a session that closes ends the wait with its
// *CloseError.
func TestWaitStreams(t *testing.T) {
	client, server := pair(t, nil, nil)
	a, _ := client.OpenStream(ctx(t))
	b, _ := client.OpenStream(ctx(t))
	a.Write([]byte("a"))
	b.Write([]byte("b"))
	sa, _ := server.AcceptStream(ctx(t))
	server.AcceptStream(ctx(t))
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := server.WaitStreams(done, 2); err != nil {
		t.Fatalf("two open, at most two asked: %v", err)
	}
	if err := server.WaitStreams(done, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("two open, at most one asked, ctx ended: %v, want context.Canceled", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- server.WaitStreams(ctx(t), 1) }()
	// a ends on both sides; the server's wait sees one left.
	a.CloseWrite()
	io.ReadAll(sa)
	sa.CloseWrite()
	io.ReadAll(a)
	if err := <-waited; err != nil {
		t.Fatalf("one left, at most one asked: %v", err)
	}
	if err := server.WaitStreams(done, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("one open, none asked, ctx ended: %v, want context.Canceled", err)
	}
	go func() { waited <- server.WaitStreams(ctx(t), 0) }()
	client.Close()
	var ce *CloseError
	if err := <-waited; !errors.As(err, &ce) || ce.Reason != ReasonNormal || !ce.Remote {
		t.Fatalf("closed by the peer with b open: %v, want its remote *CloseError", err)
	}
	if err := server.WaitStreams(ctx(t), 5); !errors.As(err, &ce) {
		t.Fatalf("closed session: %v, want its *CloseError", err)
	}
}

// TestResetLeavesBeforeTheOpenThatTakesItsSlot: at the peer's stream
// limit, a reset frees the slot for an opener already waiting, and the
// peer must accept the new stream. Two bugs made it refuse: the slot was
// released before the RESET was queued, so the waiting opener's OPEN
// could overtake it on the wire (a race); and
// on the peer a stream reset before anyone accepted it kept its place in
// the accept backlog (here nobody accepts, so every round).
func TestResetLeavesBeforeTheOpenThatTakesItsSlot(t *testing.T) {
	client, server := pair(t, nil, &Config{MaxStreams: 1})
	for i := range 300 {
		first, err := client.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		first.Write([]byte("x")) // the OPEN leaves
		got := make(chan *Stream, 1)
		go func() {
			st, err := client.OpenStream(ctx(t)) // waits for the slot
			if err != nil {
				t.Error(err)
			}
			got <- st
		}()
		runtime.Gosched()
		first.Reset(ResetCancel)
		second := <-got
		if second == nil {
			return
		}
		second.Write([]byte("x")) // its OPEN leaves, if it had not
		second.Reset(ResetCancel)
		// Both streams of the round reach the server and end there (reset
		// by the client), or the second is refused.
		want := uint64(2 * (i + 1))
		eventually(t, func() bool {
			st := server.Stats()
			return st.StreamsEnded+st.StreamsRefused >= want
		}, "server stats %+v, want %d streams ended or refused", func() []any { return []any{server.Stats(), want} })
		if n := server.Stats().StreamsRefused; n != 0 {
			t.Fatalf("round %d: the server refused %d streams: an OPEN overtook the RESET that freed its slot", i, n)
		}
	}
}

// finGate passes writes through, and after one that carries a FIN frame
// it waits for release before returning: the peer has the FIN while the
// writer is still in the write that sent it.
type finGate struct {
	net.Conn
	mu      sync.Mutex
	skip    int    // the preface's magic, which precedes the frames
	pending []byte // a frame's bytes split across writes
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (g *finGate) Write(p []byte) (int, error) {
	n, err := g.Conn.Write(p)
	g.mu.Lock()
	q := p[:n]
	k := min(g.skip, len(q))
	g.skip -= k
	g.pending = append(g.pending, q[k:]...)
	fin := false
	for len(g.pending) >= headerSize {
		h := header{length: binary.BigEndian.Uint32(g.pending[0:4]), typ: frameType(g.pending[4]), flags: g.pending[5]}
		if len(g.pending) < headerSize+int(h.length) {
			break
		}
		fin = fin || (h.typ == frameData || h.typ == frameMessage) && h.flags&flagFin != 0
		g.pending = g.pending[headerSize+int(h.length):]
	}
	g.mu.Unlock()
	if fin {
		g.once.Do(func() {
			close(g.held)
			<-g.release
		})
	}
	return n, err
}

// TestFreedSlotIsNotRefused: a peer that has read this side's FIN on a
// stream it opened, and so sees the stream done, may open another in its
// slot at once, before the write that carried the FIN has returned here.
// Counting the stream until that write returned refused the new one
// ("stream limit") whenever the writer was descheduled in that gap.
func TestFreedSlotIsNotRefused(t *testing.T) {
	gate := &finGate{skip: len(magic), held: make(chan struct{}), release: make(chan struct{})}
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate.release) }) }
	client, server := pairWrapped(t, nil, &Config{MaxStreams: 1}, func(c net.Conn) net.Conn {
		gate.Conn = c
		return gate
	})
	defer openGate() // ahead of the sessions' close, whose writer it may hold
	unblock := make(chan struct{})
	var unblockOnce sync.Once
	release := func() { unblockOnce.Do(func() { close(unblock) }) }
	defer release() // ahead of the sessions' close, which waits for the handler
	server.Handle(func(st *Stream) {
		m, err := st.ReadMessage(context.Background())
		if err != nil {
			return
		}
		if m.GetError().GetMessage() == "hold" {
			<-unblock
		}
		st.Hold() // the answer and its FIN leave in one write
		st.WriteMessage(m)
		st.CloseWrite()
	})
	exchange := func(ctx context.Context) error {
		st, err := client.OpenStream(ctx)
		if err != nil {
			return err
		}
		if err := st.WriteMessage(errEnv("ping")); err != nil {
			return err
		}
		st.CloseWrite()
		if _, err := st.ReadMessage(ctx); err != nil {
			return err
		}
		if _, err := io.Copy(io.Discard, st); err != nil {
			return err
		}
		<-st.Done()
		return st.Terminal()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := exchange(ctx); err != nil {
		t.Fatalf("first exchange: %v", err)
	}
	select {
	case <-gate.held:
	case <-ctx.Done():
		t.Fatal("the server never wrote the FIN")
	}
	// The server's writer is still in the write that carried the FIN.
	second := make(chan error, 1)
	go func() { second <- exchange(ctx) }()
	eventually(t, func() bool {
		st := server.Stats()
		return st.StreamsAccepted+st.StreamsRefused == 2
	}, "the server did not take the second stream's OPEN: %+v", func() []any { return []any{server.Stats()} })
	openGate()
	if err := <-second; err != nil {
		t.Fatalf("second exchange, in the slot the first freed: %v", err)
	}

	// Each slot was freed once: the count of peer-opened streams is back
	// to zero, a stream held open by its handler counts, and its end
	// frees it again.
	peerActive := func() int {
		server.mu.Lock()
		defer server.mu.Unlock()
		return server.peerActive
	}
	if err := server.WaitStreams(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if n := peerActive(); n != 0 {
		t.Fatalf("%d peer streams counted after both ended, want 0", n)
	}
	held, err := client.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held.WriteMessage(errEnv("hold"))
	held.CloseWrite()
	eventually(t, func() bool { return server.Stats().StreamsAccepted == 3 },
		"the held stream was not accepted: %+v", func() []any { return []any{server.Stats()} })
	if n := peerActive(); n != 1 {
		t.Fatalf("%d peer streams counted with one held open, want 1", n)
	}
	release()
	if _, err := held.ReadMessage(ctx); err != nil {
		t.Fatalf("held stream: %v", err)
	}
	if err := server.WaitStreams(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if n := peerActive(); n != 0 {
		t.Fatalf("%d peer streams counted after all ended, want 0", n)
	}
}

// TestGoAwayLeavesBeforeClose: a GOAWAY sent right before a graceful
// close reaches the peer before the close, also when the writer had not
// taken it yet: the peer learns which of its streams were never
// processed (those above the GOAWAY's last), which it may send
// elsewhere, instead of seeing them end with the session.
func TestGoAwayLeavesBeforeClose(t *testing.T) {
	for i := range 50 {
		client, server := pair(t, nil, nil)
		server.GoAway("shutting down")
		server.Close()
		<-client.Done()
		select {
		case <-client.RemoteGoAway():
		default:
			t.Fatalf("round %d: the session closed (%v) without the GOAWAY before it", i, client.Err())
		}
		wantReason(t, client, ReasonNormal, true)
	}
}
