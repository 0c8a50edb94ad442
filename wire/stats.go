package wire

import "sync/atomic"

// Stats is a snapshot of a session's counters.
type Stats struct {
	// StreamsOpen is the number of streams without a terminal.
	StreamsOpen int
	// StreamsOpened and StreamsAccepted count streams opened by this side
	// and accepted from the peer.
	StreamsOpened, StreamsAccepted uint64
	// StreamsEnded counts streams that reached their terminal.
	StreamsEnded uint64
	// StreamsRefused counts peer streams refused (limit, backlog, goaway).
	StreamsRefused uint64
	// FramesSent, FramesReceived, BytesSent and BytesReceived count frames
	// and their encoded bytes, headers included.
	FramesSent, FramesReceived uint64
	BytesSent, BytesReceived   uint64
	// Flushes counts coalesced writes to the connection.
	Flushes uint64
	// ResetsSent and ResetsReceived count stream resets.
	ResetsSent, ResetsReceived uint64
	// HeartbeatsSent and HeartbeatsAcked count the session's own heartbeat
	// requests and the responses seen for them.
	HeartbeatsSent, HeartbeatsAcked uint64
	// MaxStreamBuffered is, at the time of the snapshot, the most received
	// bytes any one stream holds unread; it never exceeds the stream
	// window.
	MaxStreamBuffered int
	// MaxBytesAheadOfHeartbeat is the most stream-frame bytes ever flushed
	// between a heartbeat request or response being queued and written:
	// how far control traffic can fall behind bulk data. The writer keeps it
	// at or below two full chunks (2 x (14 + 32 KiB)).
	MaxBytesAheadOfHeartbeat uint64
}

type sessionStats struct {
	streamsOpened, streamsAccepted, refused atomic.Uint64
	streamsEnded                            atomic.Uint64
	framesSent, framesRecv                  atomic.Uint64
	bytesSent, bytesRecv                    atomic.Uint64
	flushes, dataBytesFlushed               atomic.Uint64
	resetsSent, resetsRecv                  atomic.Uint64
	heartbeatsSent, heartbeatsAcked         atomic.Uint64
	maxHBAhead                              atomic.Uint64
}

func (s *sessionStats) noteHeartbeatAhead(n uint64) {
	for {
		cur := s.maxHBAhead.Load()
		if n <= cur || s.maxHBAhead.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Stats returns a snapshot of the session's counters.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	open := len(s.streams)
	streams := make([]*Stream, 0, open)
	for _, st := range s.streams {
		streams = append(streams, st)
	}
	s.mu.Unlock()
	maxBuf := 0
	for _, st := range streams {
		st.mu.Lock()
		b := int(s.cfg.streamWindow) - int(st.recvAvail)
		st.mu.Unlock()
		maxBuf = max(maxBuf, b)
	}
	st := &s.stats
	return Stats{
		StreamsOpen:              open,
		MaxStreamBuffered:        maxBuf,
		StreamsOpened:            st.streamsOpened.Load(),
		StreamsAccepted:          st.streamsAccepted.Load(),
		StreamsEnded:             st.streamsEnded.Load(),
		StreamsRefused:           st.refused.Load(),
		FramesSent:               st.framesSent.Load(),
		FramesReceived:           st.framesRecv.Load(),
		BytesSent:                st.bytesSent.Load(),
		BytesReceived:            st.bytesRecv.Load(),
		Flushes:                  st.flushes.Load(),
		ResetsSent:               st.resetsSent.Load(),
		ResetsReceived:           st.resetsRecv.Load(),
		HeartbeatsSent:           st.heartbeatsSent.Load(),
		HeartbeatsAcked:          st.heartbeatsAcked.Load(),
		MaxBytesAheadOfHeartbeat: st.maxHBAhead.Load(),
	}
}
