package wire

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/wire/iopv1"
)

// Stream is one bidirectional, ordered, flow-controlled channel in a
// Session. It carries raw bytes (Read, Write) and role messages
// (ReadMessage, WriteMessage) in one sequence per direction: the receiver
// sees them in the order they were written.
//
// Each direction ends independently: CloseWrite ends this side's direction,
// and Read returns io.EOF once the peer ended its own. Reset aborts both.
// Every stream ends in exactly one terminal, which Done and Terminal report:
// nil once both directions ended cleanly, a *StreamError after a reset, or
// the session's *CloseError.
//
// A Stream is safe for concurrent use; concurrent writers are serialized so
// that a message is never interleaved with other data. Reads are meant for
// one goroutine at a time: the order of items is the stream's, and two
// readers would split it arbitrarily.
type Stream struct {
	sess  *Session
	id    uint64
	local bool
	// opened is when the peer opened it (zero for this side's own).
	opened time.Time

	// mu guards the receive side and the terminal.
	mu         sync.Mutex
	rb         recvBuf
	recvAvail  int64 // receive credit not yet used by the peer
	recvFin    bool
	rxInMsg    bool // reader: inside a fragmented message
	rxMsgLen   int  // reader: bytes of the message being received
	finSent    bool // our FIN was flushed
	finLeaving bool // our FIN went into a write
	slotFreed  bool // peer-opened: no longer counted against MaxStreams (freeSlotLocked)
	term       bool
	termErr    error
	discarded  bool // unread data was dropped by an abortive terminal
	onAbort    []func()
	onAbortArr [2]func() // onAbort's first array
	readDL     time.Time
	writeDL    time.Time
	readWake   chan struct{}
	writeWake  chan struct{}
	done       chan struct{}
	unacked    atomic.Uint32 // consumed credit not yet returned to the peer
	wlock      sync.Mutex    // serializes writers
	assembling []byte        // ReadMessage: fragments read so far

	// Guarded by Session.wmu.
	sendWindow  int64
	sendQ       []*outFrame
	sendQArr    [4]*outFrame // sendQ's first array: a stream's usual frames
	queued      int
	inReady     bool
	finQueued   bool
	sendAborted bool
	wuQueued    bool
	held        bool // see Hold

	// openUnsent is set while this side's OPEN may still sit in the
	// writer's queue with no wake-up asked for; a reader about to wait
	// asks for one, since the peer cannot answer a stream it never saw.
	openUnsent atomic.Bool
}

func newStream(s *Session, id uint64, local bool) *Stream {
	var opened time.Time
	if !local {
		opened = time.Now()
	}
	return &Stream{
		opened:     opened,
		sess:       s,
		id:         id,
		local:      local,
		recvAvail:  int64(s.cfg.streamWindow),
		sendWindow: int64(s.peerWindow),
		readWake:   make(chan struct{}, 1),
		writeWake:  make(chan struct{}, 1),
		done:       make(chan struct{}),
	}
}

// ID returns the stream id: odd when the dialer opened it, even when the
// acceptor did.
func (st *Stream) ID() uint64 { return st.id }

// Session returns the session the stream belongs to.
func (st *Stream) Session() *Session { return st.sess }

// Done is closed when the stream reaches its terminal.
func (st *Stream) Done() <-chan struct{} { return st.done }

// Terminal returns the stream's terminal once Done is closed: nil for a
// clean end of both directions, a *StreamError for a reset, a *CloseError
// when the session ended first. Before Done it returns nil.
func (st *Stream) Terminal() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.termErr
}

func (st *Stream) isTerminated() bool {
	select {
	case <-st.done:
		return true
	default:
		return false
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (st *Stream) wakeReader() { signal(st.readWake) }
func (st *Stream) wakeWriter() { signal(st.writeWake) }

// terminate records the stream's one terminal. It reports whether this call
// was the one that did.
func (st *Stream) terminate(err error) bool { return st.terminateWith(err, nil) }

// terminateWith is terminate that, when this call records the terminal,
// first queues rst (this side's RESET for the stream). It is queued
// before the stream gives up its slot: an opener waiting for that slot
// would otherwise queue its OPEN ahead of the RESET, and the peer, still
// counting this stream, would refuse the new one.
func (st *Stream) terminateWith(err error, rst *ctrlItem) bool {
	st.mu.Lock()
	if st.term {
		st.mu.Unlock()
		return false
	}
	st.term = true
	st.termErr = err
	// A reset discards what was not read. A session that closes after the
	// peer finished its direction keeps that direction's data readable:
	// it arrived whole, and its end (FIN) raced only our own FIN's
	// bookkeeping.
	keep := st.recvFin && isCloseError(err)
	if err != nil && !keep {
		st.rb.reset()
		st.assembling = nil
		st.discarded = true
	}
	abort := err != nil
	freed := st.slotFreed
	close(st.done)
	hooks := st.onAbort
	st.onAbort = nil
	st.mu.Unlock()
	st.sess.stats.streamsEnded.Add(1)
	if rst != nil {
		st.sess.purge(st) // no frame of the stream may follow its RESET
		st.sess.queueControl(*rst)
	}
	st.sess.forget(st, abort, freed)
	st.wakeReader()
	st.wakeWriter()
	if abort {
		for _, f := range hooks {
			if f != nil {
				f()
			}
		}
	}
	return true
}

// isCloseError reports whether err is a session's *CloseError. It is a
// function of its own so that the target of errors.As, which escapes, is
// allocated only when there is an error to look at.
func isCloseError(err error) bool {
	if err == nil {
		return false
	}
	var ce *CloseError
	return errors.As(err, &ce)
}

// OnAbort arranges for f to be called once if the stream ends abortively
// (a reset from either side, or the session's close), so that work bound
// to the stream can be cancelled without a goroutine watching it. f runs
// on whichever goroutine ended the stream and must not block (cancelling
// a context is the intended use). If the stream has already ended
// abortively, f runs at once. The returned stop unregisters f and reports
// whether it did so before f ran.
func (st *Stream) OnAbort(f func()) (stop func() bool) {
	st.mu.Lock()
	if st.term {
		aborted := st.termErr != nil
		st.mu.Unlock()
		if aborted {
			f()
		}
		return func() bool { return false }
	}
	i := len(st.onAbort)
	if i == 0 {
		st.onAbort = st.onAbortArr[:0] // no allocation for the usual one or two
	}
	st.onAbort = append(st.onAbort, f)
	st.mu.Unlock()
	return func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		if i < len(st.onAbort) && st.onAbort[i] != nil {
			st.onAbort[i] = nil
			return true
		}
		return false
	}
}

// Reset aborts the stream in both directions: queued outgoing frames are
// dropped, unread incoming data is discarded, and the peer is sent code.
// It is a no-op once the stream has its terminal.
func (st *Stream) Reset(code ResetCode) error {
	return st.reset(code, "")
}

func (st *Stream) reset(code ResetCode, detail string) error {
	st.terminateWith(&StreamError{Code: code, Detail: detail},
		&ctrlItem{typ: frameControl, stream: st.id, ctl: ctlReset(code, detail)})
	return nil
}

// Close ends the stream from this side's point of view: it ends the write
// direction if still open, and resets with ResetCancel if the peer's
// direction has not ended (the rest of its data is not wanted). After a
// clean exchange (CloseWrite, then Read to io.EOF) it changes nothing.
func (st *Stream) Close() error {
	st.mu.Lock()
	recvDone := st.recvFin
	st.mu.Unlock()
	if !recvDone {
		return st.Reset(ResetCancel)
	}
	st.CloseWrite() // an error means the stream already has its terminal
	return nil
}

// SetDeadline sets the read and write deadlines.
func (st *Stream) SetDeadline(t time.Time) error {
	st.SetReadDeadline(t)
	return st.SetWriteDeadline(t)
}

// SetReadDeadline makes Read and ReadMessage fail with ErrDeadlineExceeded
// after t. A zero t means no deadline.
func (st *Stream) SetReadDeadline(t time.Time) error {
	st.mu.Lock()
	st.readDL = t
	st.mu.Unlock()
	st.wakeReader()
	return nil
}

// SetWriteDeadline makes Write, WriteMessage and CloseWrite fail with
// ErrDeadlineExceeded when they would still wait for credit after t.
func (st *Stream) SetWriteDeadline(t time.Time) error {
	st.mu.Lock()
	st.writeDL = t
	st.mu.Unlock()
	st.wakeWriter()
	return nil
}

// announce makes sure a locally opened stream's OPEN is on its way before
// its reader waits for the peer.
func (st *Stream) announce() {
	if st.openUnsent.Load() && st.openUnsent.Swap(false) {
		st.sess.kickWriter()
	}
}

// wait blocks until wake fires, the stream ends, ctx ends or the deadline
// passes. It is called without st.mu held.
func (st *Stream) wait(ctx context.Context, wake chan struct{}, dl time.Time) error {
	var timeout <-chan time.Time
	if !dl.IsZero() {
		d := time.Until(dl)
		if d <= 0 {
			return ErrDeadlineExceeded
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	var cancel <-chan struct{}
	if ctx != nil {
		cancel = ctx.Done()
	}
	select {
	case <-wake:
	case <-st.done:
	case <-timeout:
		return ErrDeadlineExceeded
	case <-cancel:
		return ctx.Err()
	}
	return nil
}

// --- receive side -------------------------------------------------------

// receive queues a DATA or MESSAGE payload: p is copied, or b is linked
// (one of them is set). It runs on the session reader and never blocks.
func (st *Stream) receive(h header, p []byte, b *[]byte) error {
	done, tooLarge, free, err := st.receiveLocked(h, p, b)
	if err != nil || tooLarge {
		putBuf(b)
	}
	if free {
		st.sess.freePeerSlot()
	}
	switch {
	case err != nil:
		return err
	case tooLarge:
		st.reset(ResetMessageTooLarge, "message exceeds the receiver's limit")
	case done:
		st.terminate(nil)
	}
	return nil
}

func (st *Stream) receiveLocked(h header, p []byte, b *[]byte) (done, tooLarge, free bool, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.term {
		putBuf(b)
		return false, false, false, nil
	}
	if st.recvFin {
		return false, false, false, protoErr(ReasonProtocolError, "%s after FIN on stream %d", h.typ, st.id)
	}
	charge := int64(h.charge())
	if charge > st.recvAvail {
		return false, false, false, protoErr(ReasonFlowControlError, "stream %d: %d bytes beyond a window of %d", st.id, charge, st.recvAvail)
	}
	switch h.typ {
	case frameData:
		if st.rxInMsg {
			return false, false, false, protoErr(ReasonProtocolError, "DATA inside a fragmented message on stream %d", st.id)
		}
	case frameMessage:
		if !st.rxInMsg {
			st.rxMsgLen = 0
		}
		st.rxMsgLen += int(h.length)
		st.rxInMsg = h.flags&flagMore != 0
		if st.rxMsgLen > st.sess.cfg.maxMessageSize {
			return false, true, false, nil
		}
	}
	st.recvAvail -= charge
	if b != nil {
		st.rb.pushBlock(h.typ, h.flags&flagMore, b)
	} else {
		st.rb.pushCopy(h.typ, h.flags&flagMore, p)
	}
	if h.flags&flagFin != 0 {
		st.recvFin = true
		free = st.freeSlotLocked()
	}
	st.wakeReader()
	return st.recvFin && st.finSent, false, free, nil
}

// receiveFin handles an empty DATA frame with FIN.
func (st *Stream) receiveFin() error {
	st.mu.Lock()
	if st.term {
		st.mu.Unlock()
		return nil
	}
	if st.recvFin {
		st.mu.Unlock()
		return protoErr(ReasonProtocolError, "second FIN on stream %d", st.id)
	}
	if st.rxInMsg {
		st.mu.Unlock()
		return protoErr(ReasonProtocolError, "FIN inside a fragmented message on stream %d", st.id)
	}
	st.recvFin = true
	both := st.finSent
	free := st.freeSlotLocked()
	st.mu.Unlock()
	if free {
		st.sess.freePeerSlot()
	}
	st.wakeReader()
	if both {
		st.terminate(nil)
	}
	return nil
}

// freeSlotLocked reports whether a peer-opened stream has just stopped
// counting against MaxStreams, and marks it so: once both FINs are in,
// the peer's and ours on its way in a write. The peer sees the stream
// done when it reads our FIN, and may open another in its place at once,
// before that write has returned here; counting the stream until the
// stream's terminal (after the write) refused it. A stream ended by a
// terminal first is freed by forget instead. Called with st.mu held.
func (st *Stream) freeSlotLocked() bool {
	if st.local || st.term || st.slotFreed || !st.recvFin || !st.finLeaving {
		return false
	}
	st.slotFreed = true
	return true
}

// finLeavingNow is called by the writer as our FIN goes into a write.
func (st *Stream) finLeavingNow() {
	st.mu.Lock()
	st.finLeaving = true
	free := st.freeSlotLocked()
	st.mu.Unlock()
	if free {
		st.sess.freePeerSlot()
	}
}

// finWritten is called by the writer after our FIN was flushed.
func (st *Stream) finWritten() {
	st.mu.Lock()
	st.finSent = true
	both := st.recvFin
	st.mu.Unlock()
	if both {
		st.terminate(nil)
	}
}

// returnCredit makes consumed bytes available to the peer again and reports
// whether a window update should be queued. Called with st.mu held.
func (st *Stream) returnCredit(n int) bool {
	st.recvAvail += int64(n)
	if n == 0 || st.recvFin {
		// The peer has finished sending; it needs no more credit.
		return false
	}
	v := st.unacked.Add(uint32(n))
	return v >= st.sess.cfg.streamWindow/4
}

// takeCredit returns and clears the credit to send in a window update.
func (st *Stream) takeCredit() uint32 {
	if st.isTerminated() {
		return 0
	}
	return st.unacked.Swap(0)
}

func (st *Stream) queueWindowUpdate() {
	s := st.sess
	s.wmu.Lock()
	if st.wuQueued || s.writerClosing {
		s.wmu.Unlock()
		return
	}
	st.wuQueued = true
	s.ctrlQ = append(s.ctrlQ, ctrlItem{typ: frameWindow, st: st})
	s.wmu.Unlock()
	s.kickWriter()
}

// Read reads stream data: all that has arrived up to the next role message,
// as much as fits in p, waiting only when nothing has. It returns io.EOF
// after the peer ended its direction, ErrMessageNext when the next item is
// a role message (call ReadMessage, then keep reading), and the terminal
// error after a reset or session close. A reset discards unread data; a
// session close that came after the peer ended its direction leaves that
// data readable, then io.EOF.
func (st *Stream) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	st.mu.Lock()
	for {
		if !st.rb.empty() {
			if st.rb.head().typ != frameData {
				st.mu.Unlock()
				return 0, ErrMessageNext
			}
			// Every DATA frame already here, up to len(p): a reader that
			// looks at what it holds (a relay deciding whether to flush)
			// sees all that arrived, not one frame of it.
			credit, n := 0, 0
			for n < len(p) && !st.rb.empty() {
				r := st.rb.head()
				if r.typ != frameData {
					break
				}
				if r.hdr {
					r.hdr = false
					credit += headerSize
				}
				k := st.rb.read(p[n:])
				n += k
				credit += k
				if r.n != 0 {
					break // p is full
				}
				st.rb.popRec()
			}
			wu := st.returnCredit(credit)
			st.mu.Unlock()
			if wu {
				st.queueWindowUpdate()
			}
			return n, nil
		}
		if st.recvFin && !st.discarded {
			st.mu.Unlock()
			return 0, io.EOF
		}
		if st.term && st.termErr != nil {
			err := st.termErr
			st.mu.Unlock()
			return 0, err
		}
		dl := st.readDL
		st.mu.Unlock()
		st.announce()
		if err := st.wait(context.Background(), st.readWake, dl); err != nil {
			return 0, err
		}
		st.mu.Lock()
	}
}

// ReadMessage reads the next role message, waiting until one arrives, ctx
// ends or the read deadline passes. It returns io.EOF after the peer ended
// its direction, ErrDataNext when DATA comes first, and
// ErrUnsupportedMessage (after resetting the stream with ResetUnsupported)
// for an envelope whose body this side does not know. A malformed envelope
// closes the session with ReasonProtocolError.
func (st *Stream) ReadMessage(ctx context.Context) (*iopv1.Envelope, error) {
	st.mu.Lock()
	for {
		if !st.rb.empty() {
			r := st.rb.head()
			if r.typ != frameMessage {
				st.mu.Unlock()
				return nil, ErrDataNext
			}
			credit := r.n
			if r.hdr {
				r.hdr = false
				credit += headerSize
			}
			more := r.flags&flagMore != 0
			var whole []byte
			var pooled *[]byte
			if !more && st.assembling == nil {
				// One frame's payload (at most MaxFramePayload): decoded
				// from a pooled buffer, since the decoded message copies
				// what it keeps.
				pooled = getBuf(r.n)
				whole = *pooled
				st.rb.read(whole)
			} else {
				start := len(st.assembling)
				st.assembling = append(st.assembling, make([]byte, r.n)...)
				st.rb.read(st.assembling[start:])
				if !more {
					whole, st.assembling = st.assembling, nil
				}
			}
			st.rb.popRec()
			wu := st.returnCredit(credit)
			st.mu.Unlock()
			if wu {
				st.queueWindowUpdate()
			}
			if more {
				st.mu.Lock()
				continue
			}
			env, err := st.decode(whole)
			putBuf(pooled)
			return env, err
		}
		if st.recvFin && !st.discarded {
			st.mu.Unlock()
			return nil, io.EOF
		}
		if st.term && st.termErr != nil {
			err := st.termErr
			st.mu.Unlock()
			return nil, err
		}
		dl := st.readDL
		st.mu.Unlock()
		st.announce()
		if err := st.wait(ctx, st.readWake, dl); err != nil {
			return nil, err
		}
		st.mu.Lock()
	}
}

// decode unmarshals one role message. The envelope keeps nothing of b:
// both decoders copy every string and bytes field (and unknown fields) out
// of their input, so b may be reused once decode returns.
func (st *Stream) decode(b []byte) (*iopv1.Envelope, error) {
	env, err := decodeEnvelope(b)
	if err != nil {
		ce := &CloseError{Reason: ReasonProtocolError, Detail: "malformed role message"}
		st.sess.closeWith(ce)
		return nil, st.sess.Err()
	}
	if env.Body == nil {
		st.reset(ResetUnsupported, "unknown role message")
		return nil, ErrUnsupportedMessage
	}
	return env, nil
}

// --- send side ----------------------------------------------------------

// reserve waits for send credit and takes it for a frame of up to want
// payload bytes (at least one, unless want is 0). It returns the payload
// size granted.
func (st *Stream) reserve(want int) (int, error) {
	s := st.sess
	for {
		s.wmu.Lock()
		switch {
		case st.sendAborted:
			s.wmu.Unlock()
			return 0, st.sendErr()
		case st.finQueued:
			s.wmu.Unlock()
			return 0, ErrWriteClosed
		case st.isTerminated():
			// Ended by a reset or the session's close, whose purge of the
			// send side (sendAborted) may not have run yet: a write that
			// comes after Done must not be taken.
			s.wmu.Unlock()
			return 0, st.sendErr()
		}
		if avail := st.sendWindow - headerSize; avail > 0 || (want == 0 && avail == 0) {
			n := int(min(int64(want), int64(maxChunk), avail))
			st.sendWindow -= int64(headerSize + n)
			s.wmu.Unlock()
			return n, nil
		}
		held := st.held
		s.wmu.Unlock()
		if held {
			st.Flush() // credit comes back only for frames that left
		}
		if st.isTerminated() {
			return 0, st.sendErr()
		}
		st.mu.Lock()
		dl := st.writeDL
		st.mu.Unlock()
		if err := st.wait(context.Background(), st.writeWake, dl); err != nil {
			return 0, err
		}
	}
}

func (st *Stream) sendErr() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.termErr != nil {
		return st.termErr
	}
	return ErrWriteClosed
}

// enqueue hands one frame to the writer. A small DATA payload joins the
// stream's last queued DATA frame when there is room, so that a writer that
// is behind sends few, full frames (and the credit of the saved header is
// returned).
func (st *Stream) enqueue(typ frameType, flags uint8, p []byte) error {
	s := st.sess
	if typ == frameData {
		s.wmu.Lock()
		if n := len(st.sendQ); n > 0 && !st.sendAborted {
			if t := st.sendQ[n-1]; t.typ == frameData && t.flags == 0 && t.buf != nil &&
				cap(*t.buf)-len(*t.buf) >= len(p) && t.len()+len(p) <= maxChunk {
				*t.buf = append(*t.buf, p...)
				st.sendWindow += headerSize
				st.queued += len(p)
				s.wmu.Unlock()
				return nil
			}
		}
		s.wmu.Unlock()
	}
	f := &outFrame{typ: typ, flags: flags, st: st}
	if len(p) > 0 || typ == frameMessage {
		f.buf = getBuf(headerSize + len(p))
		copy((*f.buf)[headerSize:], p)
	}
	s.wmu.Lock()
	if st.sendAborted {
		s.wmu.Unlock()
		putBuf(f.buf)
		return st.sendErr()
	}
	st.pushFrame(f)
	st.queued += f.len()
	if st.held {
		s.wmu.Unlock()
		return nil
	}
	s.markReadyLocked(st)
	s.wmu.Unlock()
	s.kickWriter()
	return nil
}

// pushFrame appends f to the send queue; the caller holds Session.wmu. An
// empty queue starts over in the stream's own array, so that a stream's
// usual few frames cost no allocation for the queue.
func (st *Stream) pushFrame(f *outFrame) {
	if len(st.sendQ) == 0 {
		st.sendQ = st.sendQArr[:0]
	}
	st.sendQ = append(st.sendQ, f)
}

// Hold keeps the frames this stream queues from here on off the
// connection until Flush or CloseWrite, so that a writer about to send
// several at once (a response head, its body and its end) puts them on
// the connection together: one write for the sender and one wake-up for
// the receiver, where the session's writer could otherwise have taken
// them one by one. Waiting for send credit flushes first, so a held
// stream never stalls on its own queue. Hold is a hint: frames the writer
// is already taking from this stream may take held ones along.
func (st *Stream) Hold() {
	s := st.sess
	s.wmu.Lock()
	st.held = true
	s.wmu.Unlock()
}

// Flush ends a Hold: the frames queued during it leave now, and later
// ones as they come.
func (st *Stream) Flush() {
	s := st.sess
	s.wmu.Lock()
	if !st.held {
		s.wmu.Unlock()
		return
	}
	st.held = false
	if len(st.sendQ) == 0 || st.sendAborted {
		s.wmu.Unlock()
		return
	}
	s.markReadyLocked(st)
	s.wmu.Unlock()
	s.wake()
}

// Write writes p as stream data, waiting for credit as needed. It returns
// the bytes queued before an error (ErrWriteClosed after CloseWrite, the
// terminal after a reset or session close, ErrDeadlineExceeded).
//
// Frames written one by one go to the session's writer, which batches
// them. On a quiet session (one stream open besides a link's control
// stream) Flush and CloseWrite, which end a group of frames, may put the
// group on the connection themselves; that connection write is bounded
// by Config.WriteTimeout, as the writer's are, not by the stream's write
// deadline.
func (st *Stream) Write(p []byte) (int, error) {
	st.wlock.Lock()
	defer st.wlock.Unlock()
	total := 0
	for len(p) > 0 {
		n, err := st.reserve(len(p))
		if err != nil {
			return total, err
		}
		if err := st.enqueue(frameData, 0, p[:n]); err != nil {
			return total, err
		}
		p = p[n:]
		total += n
	}
	return total, nil
}

// WriteMessage sends a role message, split into fragments when it is larger
// than one frame. It fails with ErrMessageTooLarge (sending nothing) when
// the encoded message exceeds Config.MaxMessageSize.
func (st *Stream) WriteMessage(m *iopv1.Envelope) error {
	enc, fast := planTunnel(m)
	var size int
	if fast {
		size = enc.size()
	} else {
		size = proto.Size(m)
	}
	if size > st.sess.cfg.maxMessageSize {
		return ErrMessageTooLarge
	}
	var b []byte
	var pooled *[]byte
	if size <= MaxFramePayload {
		pooled = getBuf(size)
		b = (*pooled)[:0]
	}
	var err error
	if fast {
		b = appendTunnel(b, m, enc)
	} else if b, err = (proto.MarshalOptions{}).MarshalAppend(b, m); err != nil {
		putBuf(pooled)
		return err
	}
	defer putBuf(pooled)
	st.wlock.Lock()
	defer st.wlock.Unlock()
	for first := true; first || len(b) > 0; first = false {
		n, err := st.reserve(len(b))
		if err != nil {
			// Fragments already queued would leave the peer inside a
			// message forever: abort the stream instead.
			if !first {
				st.reset(ResetInternal, "message write interrupted")
			}
			return err
		}
		var flags uint8
		if n < len(b) {
			flags = flagMore
		}
		if err := st.enqueue(frameMessage, flags, b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// CloseWrite ends this side's direction: the peer reads io.EOF after the
// data already written. It does not wait for the peer and is idempotent.
func (st *Stream) CloseWrite() error {
	st.wlock.Lock()
	defer st.wlock.Unlock()
	s := st.sess
	s.wmu.Lock()
	if st.finQueued {
		s.wmu.Unlock()
		return nil
	}
	if st.sendAborted || st.isTerminated() { // see reserve
		s.wmu.Unlock()
		return st.sendErr()
	}
	st.finQueued = true
	st.held = false
	if n := len(st.sendQ); n > 0 && st.sendQ[n-1].flags&flagMore == 0 {
		st.sendQ[n-1].flags |= flagFin
	} else {
		st.pushFrame(&outFrame{typ: frameData, flags: flagFin, st: st})
	}
	s.markReadyLocked(st)
	s.wmu.Unlock()
	s.wake()
	return nil
}

// StreamStats is a snapshot of one stream's flow-control state.
type StreamStats struct {
	// Buffered is received payload (in charged bytes) not yet read; it
	// never exceeds the stream window.
	Buffered int
	// RecvCredit is how much more the peer may send before it must wait.
	RecvCredit int
	// SendCredit is how much this side may still send.
	SendCredit int
	// QueuedSend is payload queued for the writer.
	QueuedSend int
}

// Stats returns the stream's flow-control state.
func (st *Stream) Stats() StreamStats {
	st.mu.Lock()
	buffered := int(st.sess.cfg.streamWindow) - int(st.recvAvail)
	recv := int(st.recvAvail)
	st.mu.Unlock()
	st.sess.wmu.Lock()
	defer st.sess.wmu.Unlock()
	return StreamStats{Buffered: buffered, RecvCredit: recv, SendCredit: int(st.sendWindow), QueuedSend: st.queued}
}
