package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/iop-dev/iop/wire/iopv1"
)

// ctrlItem is a queued session frame: OPEN, WINDOW or CONTROL.
type ctrlItem struct {
	typ    frameType
	stream uint64
	ctl    *iopv1.Control
	st     *Stream // WINDOW: the stream whose consumed credit to return; OPEN: the stream opened
	// peerInduced marks frames the peer made this side queue (heartbeat
	// responses, refusals); they count against MaxQueuedControl.
	peerInduced bool
	// heartbeat marks heartbeat requests and responses, whose delay behind
	// data is recorded in the stats.
	heartbeat bool
	// dataAtQueue is the count of stream frame bytes flushed when it was
	// queued.
	dataAtQueue uint64
}

// outFrame is a queued stream frame: DATA or MESSAGE. Its buffer holds the
// whole frame, headerSize bytes of room for the header (filled in by the
// writer) and then the payload, so that a large frame leaves in one piece.
type outFrame struct {
	typ   frameType
	flags uint8
	buf   *[]byte // nil for an empty DATA frame with FIN
	st    *Stream
}

// len returns the payload length.
func (f *outFrame) len() int {
	if f.buf == nil {
		return 0
	}
	return len(*f.buf) - headerSize
}

// batchBudget bounds the stream frames written per flush: two full chunks.
// Control frames queued during a flush therefore wait behind at most two
// chunks' worth of bytes, whatever the number of busy streams.
const batchBudget = 2 * (headerSize + maxChunk)

// sink assembles one batch. Small pieces (headers, control frames, small
// payloads) are copied into one scratch buffer; large payloads are
// referenced where they are. On a TCP connection the batch leaves in one
// writev with no further copy; on other connections (TLS, pipes) it is
// copied into one buffer and written once, never one Write per frame.
type sink struct {
	scratch  *[]byte
	buf      []byte
	segStart int
	vec      net.Buffers
	size     int
	writev   bool
}

// largePayload is the smallest payload worth a separate iovec.
const largePayload = 4 << 10

var scratchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 16<<10)
	return &b
}}

func (s *Session) newSink() *sink {
	sc := scratchPool.Get().(*[]byte)
	return &sink{scratch: sc, buf: (*sc)[:0], writev: s.writev}
}

func (o *sink) len() int { return o.size }

func (o *sink) header(h header) {
	var b [headerSize]byte
	h.encode(b[:])
	o.small(b[:])
}

func (o *sink) small(p []byte) {
	o.buf = append(o.buf, p...)
	o.size += len(p)
}

func (o *sink) control(stream uint64, c *iopv1.Control) {
	n := len(o.buf)
	o.buf = encodeControl(o.buf, stream, c)
	o.size += len(o.buf) - n
}

// frame adds a whole frame (header and payload): small ones are copied,
// large ones referenced.
func (o *sink) frame(p []byte) {
	if len(p) < largePayload {
		o.small(p)
		return
	}
	o.cut()
	o.vec = append(o.vec, p)
	o.size += len(p)
}

// cut ends the current scratch segment. Appends after a cut may move buf,
// but earlier segments keep pointing at bytes that no longer change.
func (o *sink) cut() {
	if len(o.buf) > o.segStart {
		o.vec = append(o.vec, o.buf[o.segStart:])
		o.segStart = len(o.buf)
	}
}

// flush writes the batch: one writev on TCP; on other connections (TLS,
// pipes) one Write of the batch gathered into one buffer.
func (o *sink) flush(conn net.Conn) error {
	o.cut()
	if o.writev || len(o.vec) == 1 {
		_, err := o.vec.WriteTo(conn)
		return err
	}
	bw := writerPool.Get().(*bufio.Writer)
	bw.Reset(conn)
	for _, b := range o.vec {
		bw.Write(b)
	}
	err := bw.Flush()
	bw.Reset(nil)
	writerPool.Put(bw)
	return err
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, batchBudget+8<<10) }}

func (o *sink) release() {
	if cap(o.buf) <= 64<<10 {
		*o.scratch = o.buf[:0]
		scratchPool.Put(o.scratch)
	}
	clear(o.vec)
	*o = sink{}
}

// queueControl queues a session frame for the writer and wakes it. Frames
// the peer induced are bounded; exceeding the bound closes the session.
func (s *Session) queueControl(it ctrlItem) {
	if s.addControl(it) {
		s.kickWriter()
	}
}

// addControl queues a session frame without waking the writer; it
// reports whether the frame was queued.
func (s *Session) addControl(it ctrlItem) bool {
	s.wmu.Lock()
	if s.writerClosing {
		s.wmu.Unlock()
		return false
	}
	if it.peerInduced {
		if s.peerInduced >= s.cfg.maxQueuedControl {
			s.wmu.Unlock()
			s.closeWith(&CloseError{Reason: ReasonControlFlood, Detail: "too many queued control frames"})
			return false
		}
		s.peerInduced++
	}
	if it.heartbeat {
		it.dataAtQueue = s.stats.dataBytesFlushed.Load()
	}
	s.ctrlQ = append(s.ctrlQ, it)
	s.wmu.Unlock()
	return true
}

// quietStreams is the most open streams (a link's control stream and one
// call) at which a session counts as quiet: there is nothing to batch
// with, so a caller writes a group of frames it releases itself (wake)
// and the writer does not yield for batching.
const quietStreams = 2

// inlineBatches bounds the batches a caller writes inline before it leaves
// what is left to the writer goroutine.
const inlineBatches = 4

// wake gets a group of frames a caller has just released (Flush,
// CloseWrite) written. On a quiet session, when no one else is writing,
// the caller writes them itself: handing them to the writer goroutine
// costs a goroutine switch, and with an idle processor a thread wake-up,
// on each end of every exchange (BenchmarkSequentialRequests: about a
// sixth of an exchange's time). On a busy session the writer goroutine
// takes them, batched with other streams' frames. Frames written one by
// one (a stream's body) always go to the writer: written inline, each
// would be a write of its own (on TLS a record of its own) and a wake-up
// for the peer, where the writer, running beside the caller, takes
// several at a time. The reader goroutine never calls wake: it must never
// block on a write.
func (s *Session) wake() {
	if s.nstreams.Load() > quietStreams || !s.wsem.TryLock() {
		s.kickWriter()
		return
	}
	defer s.wsem.Unlock()
	for range inlineBatches {
		if !s.flushBatch() {
			return
		}
	}
	s.kickWriter()
}

// flushBatch writes one batch; the caller holds wsem. It reports whether
// more is queued. A failed write closes the session (and reports false).
func (s *Session) flushBatch() bool {
	more, err := s.writeBatch()
	switch {
	case err == nil:
		return more
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.closeWith(&CloseError{Reason: ReasonWriteTimeout, Cause: err})
	default:
		s.closeWith(&CloseError{Reason: ReasonTransportError, Cause: err})
	}
	return false
}

func (s *Session) kickWriter() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// markReadyLocked puts st in the round-robin ring if it is not there.
func (s *Session) markReadyLocked(st *Stream) {
	if !st.inReady {
		st.inReady = true
		s.ready = append(s.ready, st)
	}
}

// purge drops a reset stream's queued frames.
func (s *Session) purge(st *Stream) {
	s.wmu.Lock()
	st.sendAborted = true
	for i, f := range st.sendQ {
		putBuf(f.buf)
		st.sendQ[i] = nil
	}
	st.sendQ = nil
	s.wmu.Unlock()
	st.wakeWriter()
}

// writeLoop owns the connection's write side and the heartbeat timer.
func (s *Session) writeLoop() {
	hb := heartbeat{next: time.Now().Add(s.cfg.heartbeat.Interval)}
	timer := time.NewTimer(s.cfg.heartbeat.Interval)
	defer timer.Stop()
	// procs is GOMAXPROCS, read again on the heartbeat ticks between
	// batches (the runtime may change it as the process's CPU limit
	// changes) rather than under the scheduler's lock on every wake.
	procs := runtime.GOMAXPROCS(0)
	for {
		select {
		case <-s.kick:
			// Let the goroutines that are runnable now queue their frames
			// before a batch is taken. The goroutine that woke the writer
			// put it first in line, so without this yield the writer runs
			// as soon as its waker blocks and takes that one stream's
			// frames alone: under load one write per stream instead of
			// one per several (the gateway bench counts 0.84 writes per
			// request on each end of the Edge-Node link without it, 0.23
			// with it). With two streams open or fewer (a link's control
			// stream and one call) there is nothing to batch with, and
			// the yield would only delay the write. With one P the yield
			// puts the write behind every goroutine runnable in the
			// process, and the peer idles until they have all run: the
			// gateway bench with each process on a CPU of its own
			// (-placement split) answers about a fifth fewer requests
			// with it than without. (Where both ends share the one P,
			// as in BenchmarkConcurrentRequests with -cpu 1, nothing
			// idles and the yield's bigger batches win; a link's two
			// ends are two processes.)
			if s.nstreams.Load() > quietStreams && procs > 1 {
				runtime.Gosched()
			}
		case <-timer.C:
			s.heartbeatTick(&hb, timer)
			procs = runtime.GOMAXPROCS(0)
			continue
		case <-s.closing:
			s.finish()
			return
		}
		s.wsem.Lock()
		s.drain(&hb, timer)
		s.wsem.Unlock()
	}
}

// drain writes batches until none is queued or the session closes; the
// caller holds wsem.
func (s *Session) drain(hb *heartbeat, timer *time.Timer) {
	for s.flushBatch() {
		select {
		case <-s.closing:
			return
		case <-timer.C:
			// A writer kept busy by bulk data still sends heartbeats.
			s.heartbeatTick(hb, timer)
		default:
		}
	}
}

// heartbeat is the writer's heartbeat state: one request outstanding at a
// time, the wait measured from when it was queued.
type heartbeat struct {
	waiting  bool
	id       uint64
	queuedAt time.Time
	next     time.Time
}

func (s *Session) heartbeatTick(hb *heartbeat, timer *time.Timer) {
	now := time.Now()
	prof := s.cfg.heartbeat
	if hb.waiting {
		if s.hbAcked.Load() == hb.id {
			hb.waiting = false
			s.stats.heartbeatsAcked.Add(1)
		} else if wait := hb.queuedAt.Add(prof.Timeout).Sub(now); wait > 0 {
			timer.Reset(wait)
			return
		} else {
			s.closeWith(&CloseError{Reason: ReasonHeartbeatTimeout, Detail: "no heartbeat response within " + prof.Timeout.String()})
			return
		}
	}
	if wait := hb.next.Sub(now); wait > 0 {
		timer.Reset(wait)
		return
	}
	hb.id = s.pingSeq.Add(1)
	hb.queuedAt = now
	hb.waiting = true
	hb.next = now.Add(prof.Interval)
	s.stats.heartbeatsSent.Add(1)
	s.queueControl(ctrlItem{typ: frameControl, ctl: ctlPing(hb.id), heartbeat: true})
	timer.Reset(min(prof.Interval, prof.Timeout))
}

// maxKeptBatch is the most frame slots the writer keeps between batches.
const maxKeptBatch = 256

// writeBatch takes every queued control frame and one round-robin turn of
// stream frames (up to batchBudget bytes), writes them through one buffer
// and flushes once under the write deadline. It reports whether more work
// is queued.
func (s *Session) writeBatch() (more bool, err error) {
	s.wmu.Lock()
	if s.writerClosing {
		s.wmu.Unlock()
		return false, nil
	}
	ctrl := s.ctrlQ
	s.ctrlQ = nil
	induced := 0
	for i := range ctrl {
		if ctrl[i].peerInduced {
			induced++
		}
		switch ctrl[i].typ {
		case frameWindow:
			ctrl[i].st.wuQueued = false
		case frameOpen:
			// On its way: a reader about to wait need not wake the
			// writer for it (Stream.announce). That idle wake-up cost
			// each end of the gateway bench's Edge-Node link a thread
			// switch per exchange; only with both ends in one process
			// did it pay, by leaving a spinning thread that found the
			// peer's read sooner (BenchmarkSequentialRequests: about
			// 25 us an exchange with it, 31 us without).
			ctrl[i].st.openUnsent.Store(false)
		}
	}
	s.peerInduced -= induced
	frames := s.batch[:0]
	taken := 0
	for s.readyHead < len(s.ready) && taken < batchBudget {
		st := s.ready[s.readyHead]
		s.ready[s.readyHead] = nil
		s.readyHead++
		if len(st.sendQ) == 0 {
			st.inReady = false
			continue
		}
		f := st.sendQ[0]
		if taken > 0 && taken+headerSize+f.len() > batchBudget {
			// Next batch; st keeps its place at the head of the ring.
			s.readyHead--
			s.ready[s.readyHead] = st
			break
		}
		st.sendQ[0] = nil
		st.sendQ = st.sendQ[1:]
		st.queued -= f.len()
		frames = append(frames, f)
		taken += headerSize + f.len()
		if len(st.sendQ) > 0 {
			s.ready = append(s.ready, st)
		} else {
			st.inReady = false
			st.sendQ = nil
		}
	}
	if s.readyHead == len(s.ready) {
		s.ready = s.ready[:0]
		s.readyHead = 0
	} else if s.readyHead >= 64 && s.readyHead*2 >= len(s.ready) {
		n := copy(s.ready, s.ready[s.readyHead:])
		clear(s.ready[n:])
		s.ready = s.ready[:n]
		s.readyHead = 0
	}
	more = len(s.ready) > 0 || len(s.ctrlQ) > 0
	if len(ctrl) == 0 && len(frames) == 0 {
		s.wmu.Unlock()
		return more, nil
	}
	s.conn.SetWriteDeadline(time.Now().Add(s.cfg.writeTimeout))
	s.wmu.Unlock()

	out := s.newSink()
	defer out.release()
	dataBefore := s.stats.dataBytesFlushed.Load()
	for i := range ctrl {
		it := &ctrl[i]
		n := out.len()
		switch it.typ {
		case frameOpen:
			out.header(header{typ: frameOpen, stream: it.stream})
		case frameWindow:
			inc := it.st.takeCredit()
			if inc == 0 {
				continue
			}
			out.header(header{length: 4, typ: frameWindow, stream: it.st.id})
			out.small(binary.BigEndian.AppendUint32(nil, inc))
		case frameControl:
			out.control(it.stream, it.ctl)
			if it.heartbeat {
				s.stats.noteHeartbeatAhead(dataBefore - it.dataAtQueue)
			}
			if it.ctl.GetStreamReset() != nil {
				s.stats.resetsSent.Add(1)
			}
		}
		s.stats.framesSent.Add(1)
		s.stats.bytesSent.Add(uint64(out.len() - n))
	}
	for _, f := range frames {
		h := header{length: uint32(f.len()), typ: f.typ, flags: f.flags, stream: f.st.id}
		if f.buf == nil {
			out.header(h)
		} else {
			h.encode(*f.buf)
			out.frame(*f.buf)
		}
		s.stats.framesSent.Add(1)
		s.stats.bytesSent.Add(uint64(headerSize + f.len()))
		// A FIN in this batch frees its stream's slot before the write:
		// the peer may see the stream done and open the next as soon as
		// the bytes are on their way (Stream.freeSlotLocked).
		if f.flags&flagFin != 0 && !f.st.local {
			f.st.finLeavingNow()
		}
	}
	// Counted as it is issued: once the peer has read a batch, its write
	// shows in Stats.
	s.stats.flushes.Add(1)
	err = out.flush(s.conn)
	s.stats.dataBytesFlushed.Add(uint64(taken))
	for _, f := range frames {
		putBuf(f.buf)
		f.buf = nil
		if err == nil && f.flags&flagFin != 0 {
			f.st.finWritten()
		}
	}
	clear(frames)
	if cap(frames) <= maxKeptBatch {
		s.batch = frames[:0]
	} else {
		s.batch = nil // a burst of tiny frames: an idle session keeps no large slice
	}
	return more, err
}

// finish is the writer's last act: for a local close it sends the reason,
// half-closes, and waits (bounded by CloseLinger) for the peer to close its
// side; then it closes the connection. A GOAWAY still queued leaves
// before a graceful close's reason: the peer learns from it which of its
// streams were never processed (those above its last), which it may send
// elsewhere, where the close alone would end them as if cut off.
func (s *Session) finish() {
	// A caller's inline batch may still be on the wire (closeWith set a
	// deadline that bounds it); the close frame must not cut into it.
	s.wsem.Lock()
	defer s.wsem.Unlock()
	e := s.closeErr // set before closing was closed
	if !e.Remote && e.Reason != ReasonTransportError && e.Reason != ReasonWriteTimeout {
		var scratch [2 * (maxControlPayload + headerSize)]byte
		b := scratch[:0]
		if e.Reason == ReasonNormal {
			if ga := s.queuedGoAway(); ga != nil {
				b = encodeControl(b, 0, ga)
			}
		}
		if _, err := s.conn.Write(encodeControl(b, 0, ctlClose(e.Reason, e.Detail))); err == nil {
			if cw, ok := s.conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
			s.conn.SetReadDeadline(time.Now().Add(s.cfg.closeLinger))
			t := time.NewTimer(s.cfg.closeLinger)
			select {
			case <-s.readerDone:
			case <-t.C:
			}
			t.Stop()
		}
	}
	s.conn.Close()
}

// queuedGoAway returns the GOAWAY queued and not yet written, if any.
func (s *Session) queuedGoAway() *iopv1.Control {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, it := range s.ctrlQ {
		if it.typ == frameControl && it.ctl.GetGoAway() != nil {
			return it.ctl
		}
	}
	return nil
}
