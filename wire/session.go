package wire

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/wire/iopv1"
)

// Session multiplexes streams over one connection. Either side may open
// streams; the dialer's ids are odd, the acceptor's even. A Session owns two
// goroutines (reader and writer) that stop when it closes; Close waits for
// them.
//
// A Session is safe for concurrent use.
type Session struct {
	conn   net.Conn
	br     *bufio.Reader
	cfg    settings
	client bool
	writev bool // conn takes net.Buffers as one writev
	log    hclog.Logger

	peerWindow     uint32
	peerMaxStreams int

	// mu guards stream bookkeeping and the close state.
	mu          sync.Mutex
	streams     map[uint64]*Stream
	nextLocal   uint64
	highestPeer uint64
	peerActive  int
	goAwaySent  bool
	goAwayLast  uint64
	goAwayRecv  bool
	shutdown    bool
	drained     chan struct{}
	closeErr    *CloseError
	// fewer is closed (and cleared) when a stream leaves streams while
	// someone waits in WaitStreams; nil while no one does.
	fewer chan struct{}

	acceptQ    []*Stream // guarded by mu; at most acceptBacklog
	acceptWake chan struct{}
	handler    func(*Stream) // guarded by mu; see Handle
	openSem    chan struct{}
	// work hands a stream to an idle handler goroutine; idleWorkers counts
	// the goroutines waiting on it.
	work        chan handoff
	idleWorkers atomic.Int32

	// nstreams is len(streams), readable without mu (the writer's
	// batching heuristic).
	nstreams atomic.Int32

	// wsem is held by whoever writes batches: the writer goroutine, or a
	// caller writing its own frames on a quiet session (see wake). It
	// makes writeBatch exclusive and keeps finish's last write off a
	// batch in flight.
	wsem sync.Mutex

	// batch belongs to the holder of wsem: the stream frames of the batch
	// being written, kept between batches so that each needs no slice.
	batch []*outFrame

	// wmu guards the writer's queues and every stream's send state.
	wmu           sync.Mutex
	ctrlQ         []ctrlItem
	peerInduced   int
	ready         []*Stream
	readyHead     int
	writerClosing bool
	kick          chan struct{}

	pingMu  sync.Mutex
	pings   map[uint64]chan struct{}
	pingSeq atomic.Uint64
	hbAcked atomic.Uint64

	closing    chan struct{}
	ctx        context.Context
	cancelCtx  context.CancelCauseFunc
	goAwayCh   chan struct{}
	readerDone chan struct{}
	wg         sync.WaitGroup

	// Reader-owned rapid-reset bucket.
	resetTokens float64
	resetLast   time.Time

	stats sessionStats
}

// Client starts the dialing side of a session on conn, which may be a plain
// TCP connection, a TLS connection or one end of a net.Pipe. It sends the
// preface, waits for the peer's (bounded by Config.HandshakeTimeout) and
// returns a running session, or an error (a *CloseError for a refused
// handshake) after closing conn.
func Client(conn net.Conn, cfg *Config) (*Session, error) {
	return newSession(context.Background(), conn, cfg, true)
}

// Server starts the accepting side of a session on conn. It waits for the
// dialer's preface (bounded by Config.HandshakeTimeout), answers it, and
// returns a running session, or an error after closing conn.
func Server(conn net.Conn, cfg *Config) (*Session, error) {
	return newSession(context.Background(), conn, cfg, false)
}

func newSession(ctx context.Context, conn net.Conn, cfg *Config, client bool) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		conn.Close()
		return nil, err
	}
	set := cfg.settings()
	s := &Session{
		conn:       conn,
		br:         bufio.NewReaderSize(conn, 4<<10),
		cfg:        set,
		client:     client,
		log:        set.logger,
		streams:    make(map[uint64]*Stream),
		acceptWake: make(chan struct{}, 1),
		kick:       make(chan struct{}, 1),
		pings:      make(map[uint64]chan struct{}),
		closing:    make(chan struct{}),
		goAwayCh:   make(chan struct{}),
		readerDone: make(chan struct{}),
		drained:    make(chan struct{}),
		work:       make(chan handoff),
		resetLast:  time.Now(),
	}
	s.resetTokens = set.resetBurst
	s.ctx, s.cancelCtx = context.WithCancelCause(context.Background())
	_, s.writev = conn.(*net.TCPConn)
	if client {
		s.nextLocal = 1
	} else {
		s.nextLocal = 2
	}
	if err := s.handshake(ctx); err != nil {
		conn.Close()
		s.cancelCtx(err)
		return nil, err
	}
	s.openSem = make(chan struct{}, s.peerMaxStreams)
	s.wg.Go(s.readLoop)
	s.wg.Go(s.writeLoop)
	return s, nil
}

// handshake exchanges prefaces. The dialer speaks first; the acceptor
// answers a bad magic or version with a SessionClose before closing.
func (s *Session) handshake(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	s.conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { s.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	ours := &iopv1.Preface{
		Version:      ProtocolVersion,
		StreamWindow: s.cfg.streamWindow,
		MaxStreams:   uint32(s.cfg.maxStreams),
	}
	hello := append(magic[:], encodeControl(nil, 0, ctlPreface(ours))...)
	if s.client {
		if _, err := s.conn.Write(hello); err != nil {
			return s.handshakeErr(ctx, err)
		}
	}
	peer, err := s.readPreface()
	if err != nil {
		var ce *CloseError
		if !s.client && errors.As(err, &ce) && !ce.Remote && (ce.Reason == ReasonVersionMismatch || ce.Reason == ReasonProtocolError) {
			// Tell the dialer why, best effort.
			s.conn.Write(append(magic[:], encodeControl(nil, 0, ctlClose(ce.Reason, ce.Detail))...))
		}
		return s.handshakeErr(ctx, err)
	}
	if !s.client {
		if _, err := s.conn.Write(hello); err != nil {
			return s.handshakeErr(ctx, err)
		}
	}
	s.peerWindow = peer.GetStreamWindow()
	s.peerMaxStreams = int(peer.GetMaxStreams())
	s.conn.SetDeadline(time.Time{})
	if ctx.Err() != nil {
		return &CloseError{Reason: ReasonHandshakeTimeout, Cause: ctx.Err()}
	}
	return nil
}

func (s *Session) handshakeErr(ctx context.Context, err error) error {
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce
	}
	if ctx.Err() != nil {
		return &CloseError{Reason: ReasonHandshakeTimeout, Cause: ctx.Err()}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return &CloseError{Reason: ReasonHandshakeTimeout, Cause: err}
	}
	return &CloseError{Reason: ReasonTransportError, Detail: "handshake", Cause: err}
}

// maxPreface bounds the pre-handshake frame a peer can make this side read.
const maxPreface = 1 << 10

func (s *Session) readPreface() (*iopv1.Preface, error) {
	var m [8]byte
	if _, err := io.ReadFull(s.br, m[:]); err != nil {
		return nil, err
	}
	if m != magic {
		return nil, &CloseError{Reason: ReasonVersionMismatch, Detail: "bad magic bytes"}
	}
	var hb [headerSize]byte
	h, err := readHeader(s.br, hb[:])
	if err != nil {
		return nil, closeErrFrom(err)
	}
	if h.typ != frameControl || h.stream != 0 || h.length > maxPreface {
		return nil, &CloseError{Reason: ReasonProtocolError, Detail: "first frame is not a preface: " + h.String()}
	}
	payload := make([]byte, h.length)
	if _, err := io.ReadFull(s.br, payload); err != nil {
		return nil, err
	}
	// Decode loosely first: a peer of another version may use fields this
	// one does not know, and must get VERSION_MISMATCH, not PROTOCOL_ERROR.
	var c iopv1.Control
	if err := proto.Unmarshal(payload, &c); err != nil {
		return nil, &CloseError{Reason: ReasonProtocolError, Detail: "malformed preface"}
	}
	if sc := c.GetSessionClose(); sc != nil {
		return nil, &CloseError{Reason: CloseReason(sc.GetReason()), Remote: true, Detail: clipDetail(sc.GetDetail())}
	}
	p := c.GetPreface()
	if p == nil {
		return nil, &CloseError{Reason: ReasonProtocolError, Detail: "first frame is not a preface"}
	}
	if p.GetVersion() != ProtocolVersion {
		return nil, &CloseError{Reason: ReasonVersionMismatch, Detail: fmt.Sprintf("peer speaks version %d, want %d", p.GetVersion(), ProtocolVersion)}
	}
	if _, err := decodeControl(0, payload); err != nil {
		return nil, closeErrFrom(err)
	}
	if w := p.GetStreamWindow(); w < minStreamWindow || w > maxStreamWindow {
		return nil, &CloseError{Reason: ReasonProtocolError, Detail: fmt.Sprintf("peer stream window %d out of range", w)}
	}
	if n := p.GetMaxStreams(); n == 0 || n > maxMaxStreams {
		return nil, &CloseError{Reason: ReasonProtocolError, Detail: fmt.Sprintf("peer max streams %d out of range", n)}
	}
	return p, nil
}

func closeErrFrom(err error) *CloseError {
	var pe *protocolError
	if errors.As(err, &pe) {
		return &CloseError{Reason: pe.reason, Detail: pe.msg}
	}
	return &CloseError{Reason: ReasonTransportError, Cause: err}
}

// IsClient reports whether this side dialed the connection.
func (s *Session) IsClient() bool { return s.client }

// LocalAddr returns the connection's local address.
func (s *Session) LocalAddr() net.Addr { return s.conn.LocalAddr() }

// RemoteAddr returns the connection's remote address.
func (s *Session) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }

// ConnectionState returns the TLS state when the session runs over TLS.
func (s *Session) ConnectionState() (tls.ConnectionState, bool) {
	if tc, ok := s.conn.(*tls.Conn); ok {
		return tc.ConnectionState(), true
	}
	return tls.ConnectionState{}, false
}

// Done is closed when the session begins to close; Err then says why.
func (s *Session) Done() <-chan struct{} { return s.closing }

// Context returns a context that ends when the session begins to close,
// with the *CloseError as its cause: work bound to the connection can
// derive from it.
func (s *Session) Context() context.Context { return s.ctx }

// Err returns nil while the session runs, then the *CloseError that ended it.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeErr == nil {
		return nil
	}
	return s.closeErr
}

// RemoteGoAway is closed when the peer sent GOAWAY: it accepts no new
// streams from this side, and the owner should move new work elsewhere.
func (s *Session) RemoteGoAway() <-chan struct{} { return s.goAwayCh }

func (s *Session) isLocalID(id uint64) bool { return (id%2 == 1) == s.client }

// OpenStream opens a new stream. It waits while the peer's concurrent
// stream limit is reached, until ctx ends; with ctx already ended it
// opens nothing. It fails with ErrGoAway after the peer's GOAWAY,
// ErrShutdown after Shutdown, or the *CloseError of a closed session.
func (s *Session) OpenStream(ctx context.Context) (*Stream, error) {
	if err := ctx.Err(); err != nil {
		// Checked first: under the limit, the select below could pick the
		// free slot over an ended ctx and open a stream nobody wants.
		return nil, err
	}
	select {
	case s.openSem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.closing:
		return nil, s.Err()
	}
	s.mu.Lock()
	switch {
	case s.closeErr != nil:
		err := s.closeErr
		s.mu.Unlock()
		<-s.openSem
		return nil, err
	case s.goAwayRecv:
		s.mu.Unlock()
		<-s.openSem
		return nil, ErrGoAway
	case s.shutdown:
		s.mu.Unlock()
		<-s.openSem
		return nil, ErrShutdown
	}
	id := s.nextLocal
	s.nextLocal += 2
	st := newStream(s, id, true)
	s.streams[id] = st
	s.nstreams.Add(1)
	// The OPEN frame is queued under mu so that OPENs leave in id order.
	// It does not wake the writer: it leaves with the stream's first frame
	// (or whatever else wakes the writer first), in the same write.
	st.openUnsent.Store(true)
	if !s.addControl(ctrlItem{typ: frameOpen, stream: id, st: st}) {
		st.openUnsent.Store(false)
	}
	s.mu.Unlock()
	s.stats.streamsOpened.Add(1)
	return st, nil
}

// AcceptStream returns the next stream the peer opened, waiting until ctx
// ends or the session closes.
func (s *Session) AcceptStream(ctx context.Context) (*Stream, error) {
	for {
		s.mu.Lock()
		for len(s.acceptQ) > 0 {
			st := s.acceptQ[0]
			s.acceptQ[0] = nil
			s.acceptQ = s.acceptQ[1:]
			if len(s.acceptQ) == 0 {
				s.acceptQ = nil
			} else {
				signal(s.acceptWake) // another waiter may take the next one
			}
			if st.isTerminated() {
				// Reset by the peer before anyone saw it: it never ran.
				continue
			}
			s.mu.Unlock()
			s.stats.streamsAccepted.Add(1)
			return st, nil
		}
		s.mu.Unlock()
		select {
		case <-s.acceptWake:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.closing:
			return nil, s.Err()
		}
	}
}

// Handle makes the session serve every stream the peer opens from now on
// by calling h on a goroutine of its own (a new one, or one that served an
// earlier stream and is idle, so h must not leave goroutine state such as
// pprof labels behind), straight from the session's reader,
// instead of queueing it for AcceptStream. Streams already queued stay
// there. The goroutines belong to the session: Close waits for them, so h
// must return once its stream ends (every stream operation fails after the
// session closes).
func (s *Session) Handle(h func(*Stream)) {
	s.mu.Lock()
	s.handler = h
	s.mu.Unlock()
}

// Ping sends a heartbeat request and waits for its response, returning the
// round-trip time measured from when the request was queued.
func (s *Session) Ping(ctx context.Context) (time.Duration, error) {
	id := s.pingSeq.Add(1)
	ch := make(chan struct{})
	s.pingMu.Lock()
	s.pings[id] = ch
	s.pingMu.Unlock()
	defer func() {
		s.pingMu.Lock()
		delete(s.pings, id)
		s.pingMu.Unlock()
	}()
	start := time.Now()
	s.queueControl(ctrlItem{typ: frameControl, ctl: ctlPing(id), heartbeat: true})
	select {
	case <-ch:
		return time.Since(start), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-s.closing:
		return 0, s.Err()
	}
}

// GoAway tells the peer that this side accepts no stream it has not already
// seen. Streams in progress continue; this side may still open streams.
// It is a no-op after the first call.
func (s *Session) GoAway(detail string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.goAwayLocked(detail)
}

func (s *Session) goAwayLocked(detail string) {
	if s.goAwaySent || s.closeErr != nil {
		return
	}
	s.goAwaySent = true
	s.goAwayLast = s.highestPeer
	s.queueControl(ctrlItem{typ: frameControl, ctl: ctlGoAway(s.goAwayLast, detail)})
}

// Shutdown closes the session gracefully: it sends GOAWAY, stops opening and
// accepting streams, waits until every stream has ended or ctx ends, then
// closes with ReasonNormal. If ctx ends first the remaining streams are cut
// off and ctx's error is returned.
func (s *Session) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutdown = true
	s.goAwayLocked("shutdown")
	if len(s.streams) == 0 {
		s.closeDrainedLocked()
	}
	s.mu.Unlock()
	var err error
	select {
	case <-s.drained:
	case <-s.closing:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.closeWith(&CloseError{Reason: ReasonNormal, Detail: "shutdown"})
	s.wg.Wait()
	return err
}

func (s *Session) closeDrainedLocked() {
	select {
	case <-s.drained:
	default:
		close(s.drained)
	}
}

// Close closes the session at once with ReasonNormal: every open stream ends
// with a *CloseError, the peer is sent the reason, and Close returns after
// the session's goroutines have stopped (within Config.CloseLinger plus the
// time to finish a flush in progress). It is safe to call more than once.
func (s *Session) Close() error {
	s.closeWith(&CloseError{Reason: ReasonNormal})
	s.wg.Wait()
	return nil
}

// CloseWithReason is Close with a reason of the owner's choosing, which the
// peer observes as a remote close (for example ReasonProtocolError when a
// role-level rule was broken).
func (s *Session) CloseWithReason(r CloseReason, detail string) error {
	s.closeWith(&CloseError{Reason: r, Detail: clipDetail(detail)})
	s.wg.Wait()
	return nil
}

// closeWith records the first close reason, ends every stream and wakes the
// writer, which sends the reason (for a local close) and closes the
// connection. It never blocks and may be called from any goroutine.
func (s *Session) closeWith(e *CloseError) {
	s.mu.Lock()
	if s.closeErr != nil {
		s.mu.Unlock()
		return
	}
	s.closeErr = e
	streams := make([]*Stream, 0, len(s.streams))
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()

	s.wmu.Lock()
	s.writerClosing = true
	if e.Remote || e.Reason == ReasonTransportError || e.Reason == ReasonWriteTimeout {
		s.conn.SetWriteDeadline(time.Unix(1, 0))
	} else {
		s.conn.SetWriteDeadline(time.Now().Add(s.cfg.closeLinger))
	}
	s.wmu.Unlock()
	close(s.closing)
	s.cancelCtx(e)

	for _, st := range streams {
		st.terminate(e)
	}
	if e.Reason == ReasonNormal && !e.Remote {
		s.log.Debug("session closed", "remote", s.conn.RemoteAddr(), "reason", e.Reason.String())
	} else {
		s.log.Info("session closed", "remote", s.conn.RemoteAddr(), "reason", e.Reason.String(), "peer", e.Remote, "detail", e.Detail)
	}
}

// forget removes a terminated stream from the session. freed says its
// slot was already given back (Stream.freeSlotLocked), as read with its
// terminal: the flag is final from then on.
func (s *Session) forget(st *Stream, abort, freed bool) {
	s.mu.Lock()
	if _, ok := s.streams[st.id]; ok {
		delete(s.streams, st.id)
		s.nstreams.Add(-1)
		if s.fewer != nil {
			close(s.fewer)
			s.fewer = nil
		}
		if st.local {
			<-s.openSem
		} else {
			if !freed {
				s.peerActive--
			}
			// One that ends before it is accepted (the peer reset it)
			// leaves the accept backlog too: AcceptStream would skip it,
			// and the peer, which may open another in its slot at once,
			// must not be refused for a backlog of ended streams.
			if i := slices.Index(s.acceptQ, st); i >= 0 {
				s.acceptQ = slices.Delete(s.acceptQ, i, i+1)
			}
		}
	}
	if s.shutdown && len(s.streams) == 0 {
		s.closeDrainedLocked()
	}
	s.mu.Unlock()
	if abort {
		s.purge(st)
	}
}

// freePeerSlot ends a peer-opened stream's count against MaxStreams
// ahead of its terminal (Stream.freeSlotLocked).
func (s *Session) freePeerSlot() {
	s.mu.Lock()
	s.peerActive--
	s.mu.Unlock()
}

// WaitStreams waits until at most n streams are open (Stats.StreamsOpen),
// the session closes or ctx ends. It returns nil while the session runs
// with at most n open (at once if they already are), the session's
// *CloseError once it has closed (its streams ended with it), or ctx's
// error. An owner that keeps n streams of its own open for the session's
// life drains the others with GoAway and then WaitStreams(ctx, n).
func (s *Session) WaitStreams(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		if s.closeErr != nil {
			err := s.closeErr
			s.mu.Unlock()
			return err
		}
		if len(s.streams) <= n {
			s.mu.Unlock()
			return nil
		}
		if s.fewer == nil {
			s.fewer = make(chan struct{})
		}
		fewer := s.fewer
		s.mu.Unlock()
		select {
		case <-fewer:
		case <-s.closing:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lookup finds the stream a frame is for. It returns nil, nil for a frame
// on a stream that has ended (to be discarded) and an error for an id that
// was never opened.
func (s *Session) lookup(id uint64) (*Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.streams[id]; ok {
		return st, nil
	}
	if s.isLocalID(id) {
		if id < s.nextLocal {
			return nil, nil
		}
		return nil, protoErr(ReasonProtocolError, "frame for local stream %d that was never opened", id)
	}
	if id <= s.highestPeer {
		return nil, nil
	}
	return nil, protoErr(ReasonProtocolError, "frame for peer stream %d that was never opened", id)
}

// readLoop parses frames until the connection fails or the session closes.
// It never blocks on a consumer: payloads go to per-stream buffers bounded
// by the window, and replies go to the writer's queue.
func (s *Session) readLoop() {
	defer close(s.readerDone)
	var hbuf [headerSize]byte
	for {
		err := s.readFrame(hbuf[:])
		if err == nil {
			continue
		}
		select {
		case <-s.closing:
			// Closing already: the error is the connection going away.
		default:
			var pe *protocolError
			var ce *CloseError
			switch {
			case errors.As(err, &ce):
				s.closeWith(ce)
			case errors.As(err, &pe):
				s.closeWith(&CloseError{Reason: pe.reason, Detail: pe.msg})
			default:
				s.closeWith(&CloseError{Reason: ReasonTransportError, Cause: err})
			}
		}
		// Drain until the peer closes or the writer gives up, so that the
		// peer reads our SessionClose instead of a connection reset.
		io.Copy(io.Discard, s.br)
		return
	}
}

func (s *Session) readFrame(hbuf []byte) error {
	h, err := readHeader(s.br, hbuf)
	if err != nil {
		return err
	}
	select {
	case <-s.closing:
		return errClosing
	default:
	}
	s.stats.framesRecv.Add(1)
	s.stats.bytesRecv.Add(uint64(headerSize + h.length))
	switch h.typ {
	case frameData, frameMessage:
		return s.readPayload(h)
	case frameOpen:
		return s.handleOpen(h.stream)
	case frameWindow:
		var b [4]byte
		if _, err := io.ReadFull(s.br, b[:]); err != nil {
			return err
		}
		return s.handleWindow(h.stream, uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]))
	case frameControl:
		// decodeHeader bounds CONTROL frames well below the read buffer.
		payload, err := s.br.Peek(int(h.length))
		if err != nil {
			return err
		}
		err = s.handleControl(h.stream, payload)
		s.br.Discard(int(h.length))
		return err
	}
	return protoErr(ReasonProtocolError, "unhandled frame %s", h)
}

var errClosing = errors.New("wire: closing")

func (s *Session) readPayload(h header) error {
	st, err := s.lookup(h.stream)
	if err != nil {
		return err
	}
	if st == nil {
		_, err := s.br.Discard(int(h.length))
		return err
	}
	if h.length == 0 && h.typ == frameData {
		return st.receiveFin()
	}
	if h.length <= smallPayload {
		p, err := s.br.Peek(int(h.length))
		if err != nil {
			return err
		}
		err = st.receive(h, p, nil)
		s.br.Discard(int(h.length))
		return err
	}
	b := getBuf(int(h.length))
	if _, err := io.ReadFull(s.br, *b); err != nil {
		putBuf(b)
		return err
	}
	return st.receive(h, nil, b)
}

func (s *Session) handleOpen(id uint64) error {
	if s.isLocalID(id) {
		return protoErr(ReasonProtocolError, "peer opened stream %d with this side's parity", id)
	}
	s.mu.Lock()
	if id <= s.highestPeer {
		s.mu.Unlock()
		return protoErr(ReasonProtocolError, "stream id %d reused or out of order (highest %d)", id, s.highestPeer)
	}
	s.highestPeer = id
	var refuse string
	switch {
	case s.closeErr != nil:
		s.mu.Unlock()
		return nil
	case s.goAwaySent || s.shutdown:
		refuse = "going away"
	case s.peerActive >= s.cfg.maxStreams:
		refuse = "stream limit"
	case len(s.acceptQ) >= s.cfg.acceptBacklog:
		refuse = "accept backlog full"
	case s.handler != nil:
		st := newStream(s, id, false)
		s.streams[id] = st
		s.nstreams.Add(1)
		s.peerActive++
		s.stats.streamsAccepted.Add(1)
		s.dispatch(handoff{s.handler, st})
	default:
		st := newStream(s, id, false)
		s.acceptQ = append(s.acceptQ, st)
		s.streams[id] = st
		s.nstreams.Add(1)
		s.peerActive++
		signal(s.acceptWake)
	}
	s.mu.Unlock()
	if refuse != "" {
		s.stats.refused.Add(1)
		s.queueControl(ctrlItem{typ: frameControl, stream: id, ctl: ctlReset(ResetRefused, refuse), peerInduced: true})
	}
	return nil
}

// handoff is a stream for a handler goroutine.
type handoff struct {
	h  func(*Stream)
	st *Stream
}

// maxIdleWorkers bounds the handler goroutines kept waiting for a stream;
// workerIdle is how long one waits before it exits.
const (
	maxIdleWorkers = 64
	workerIdle     = 10 * time.Second
)

// dispatch runs a handler on an idle handler goroutine when one is
// waiting, and on a new one otherwise. Reusing goroutines matters: a
// handler's stack grows as it works (an HTTP round trip needs tens of
// KiB), and a new goroutine per stream copied its stack up again every
// time.
func (s *Session) dispatch(w handoff) {
	select {
	case s.work <- w:
	default:
		s.wg.Go(func() { s.worker(w) })
	}
}

// worker runs handlers until it has waited workerIdle for the next one,
// more than maxIdleWorkers others are waiting, or the session closes.
func (s *Session) worker(w handoff) {
	var idle *time.Timer
	for {
		w.h(w.st)
		w = handoff{}
		if s.idleWorkers.Add(1) > maxIdleWorkers {
			s.idleWorkers.Add(-1)
			return
		}
		if idle == nil {
			idle = time.NewTimer(workerIdle)
			defer idle.Stop()
		} else {
			idle.Reset(workerIdle)
		}
		select {
		case w = <-s.work:
			s.idleWorkers.Add(-1)
		case <-idle.C:
			s.idleWorkers.Add(-1)
			return
		case <-s.closing:
			s.idleWorkers.Add(-1)
			return
		}
	}
}

func (s *Session) handleWindow(id uint64, inc uint32) error {
	if inc == 0 {
		return protoErr(ReasonProtocolError, "zero window increment on stream %d", id)
	}
	st, err := s.lookup(id)
	if err != nil || st == nil {
		return err
	}
	s.wmu.Lock()
	st.sendWindow += int64(inc)
	over := st.sendWindow > 2*maxStreamWindow
	s.wmu.Unlock()
	if over {
		return protoErr(ReasonFlowControlError, "window overflow on stream %d", id)
	}
	st.wakeWriter()
	return nil
}

func (s *Session) handleControl(stream uint64, payload []byte) error {
	c, err := decodeControl(stream, payload)
	if err != nil {
		return err
	}
	switch b := c.Body.(type) {
	case *iopv1.Control_Preface:
		return protoErr(ReasonProtocolError, "second preface")
	case *iopv1.Control_HeartbeatRequest:
		s.queueControl(ctrlItem{typ: frameControl, ctl: ctlPong(b.HeartbeatRequest.GetId()), peerInduced: true, heartbeat: true})
	case *iopv1.Control_HeartbeatResponse:
		id := b.HeartbeatResponse.GetId()
		s.pingMu.Lock()
		ch, ok := s.pings[id]
		if ok {
			delete(s.pings, id)
		}
		s.pingMu.Unlock()
		if ok {
			close(ch)
		} else {
			s.hbAcked.Store(id)
		}
	case *iopv1.Control_GoAway:
		s.handleGoAway(b.GoAway.GetLastStreamId())
	case *iopv1.Control_SessionClose:
		s.closeWith(&CloseError{Reason: CloseReason(b.SessionClose.GetReason()), Remote: true, Detail: b.SessionClose.GetDetail()})
		return errClosing
	case *iopv1.Control_StreamReset:
		s.stats.resetsRecv.Add(1)
		st, err := s.lookup(stream)
		if err != nil {
			return err
		}
		// Rapid reset is the peer opening streams for this side to serve
		// and resetting them at once. A peer refusing or cancelling this
		// side's own streams costs nothing here and is not limited; nor
		// is a reset of a peer stream older than rapidResetAge: that is
		// work under way cancelled (an Edge's client that left), and each
		// such stream held one of MaxStreams for that long, which bounds
		// them. Counted, those cancellations closed a busy link whose
		// clients gave up faster than the reset rate.
		if !s.isLocalID(stream) && (st == nil || time.Since(st.opened) < rapidResetAge) && !s.takeResetToken() {
			return protoErr(ReasonResetFlood, "more than %.0f stream resets per second", s.cfg.resetRate)
		}
		if st == nil {
			return nil
		}
		st.terminate(&StreamError{Code: ResetCode(b.StreamReset.GetCode()), Remote: true, Detail: b.StreamReset.GetDetail()})
	}
	return nil
}

// rapidResetAge is the age below which a reset of a peer stream counts
// against the reset rate (see handleControl).
const rapidResetAge = time.Second

// takeResetToken charges one peer reset against the token bucket.
func (s *Session) takeResetToken() bool {
	now := time.Now()
	s.resetTokens = min(s.cfg.resetBurst, s.resetTokens+now.Sub(s.resetLast).Seconds()*s.cfg.resetRate)
	s.resetLast = now
	if s.resetTokens < 1 {
		return false
	}
	s.resetTokens--
	return true
}

func (s *Session) handleGoAway(last uint64) {
	s.mu.Lock()
	if s.goAwayRecv {
		s.mu.Unlock()
		return
	}
	s.goAwayRecv = true
	var refused []*Stream
	for id, st := range s.streams {
		if st.local && id > last {
			refused = append(refused, st)
		}
	}
	s.mu.Unlock()
	close(s.goAwayCh)
	for _, st := range refused {
		st.terminate(&StreamError{Code: ResetRefused, Remote: true, Detail: "above peer's goaway"})
	}
}
