// Package wire is IOP's transport: many concurrent, flow-controlled streams
// multiplexed over one connection (TCP, TLS 1.3 or an in-process pipe), with
// a heartbeat, graceful shutdown and typed close reasons.
//
// Every IOP link (Node to Edge, Edge to Control Plane) is one Session. The
// side that dialed calls Client (or Dial), the side that accepted calls
// Server (or Accept). Either side opens streams with OpenStream and takes
// the peer's with AcceptStream. A stream carries raw bytes (Read, Write) and
// role messages, protobuf iopv1.Envelope values (ReadMessage,
// WriteMessage), in one ordered sequence per direction.
//
// # What it guarantees
//
//   - Framing: a 14-byte header (length, type, flags, stream id) before each
//     payload; the length is checked against MaxFramePayload before anything
//     is read or allocated. The dialer opens with magic bytes and a preface
//     carrying the protocol version; a mismatch ends with
//     ReasonVersionMismatch on both sides.
//   - Streams: the dialer's ids are odd, the acceptor's even; ids increase
//     and are never reused. A frame for an ended stream is discarded; a
//     frame for an id that was never opened closes the session. Each
//     direction half-closes on its own, and every stream ends in exactly
//     one terminal on each side (Stream.Done, Stream.Terminal).
//   - Flow control: every DATA and MESSAGE frame is charged at its encoded
//     size against its stream's window (Config.StreamWindow, announced in
//     the preface). The session reader never waits for a consumer: it
//     queues payloads per stream, so a stream whose reader has stopped
//     holds at most one window and blocks nobody else. A peer that sends
//     beyond a window is closed with ReasonFlowControlError.
//   - Scheduling: one writer sends control frames first, then stream frames
//     round-robin, one chunk (32 KiB) per stream per turn and at most two
//     chunks per flush, so a heartbeat never waits behind more than two
//     chunks. A flush is one writev on TCP and one Write of a gathered
//     buffer elsewhere, under Config.WriteTimeout. A new stream's OPEN
//     leaves with its first frame, and Stream.Hold lets a sender put a
//     whole exchange (head, body, end) into one write: one wake-up for the
//     peer instead of one per frame. On a quiet session (one stream open
//     besides a link's control stream) the goroutine that releases such a
//     group (Flush, CloseWrite) writes it itself when no one else is
//     writing, saving the hand-off to the writer; a busy session's frames
//     all go through the writer, which batches them. Streams served
//     through Handle run on handler goroutines the session keeps for
//     reuse.
//   - Limits: concurrent streams and the accept backlog (beyond them a
//     stream is reset with ResetRefused), resets per second of streams
//     the peer opened under a second before (rapid reset; a cancelled
//     older stream is work under way, bounded by the stream limit),
//     control frames the peer can make this side queue, message size.
//   - Liveness: both sides send a heartbeat every 30 s and close with
//     ReasonHeartbeatTimeout when one is unanswered 45 s after it was
//     queued. Output silence on a stream is never a failure; only the
//     heartbeat judges the link.
//   - Ending: GoAway refuses new peer streams and tells the peer the last
//     one accepted (its streams above it never ran: IsRefused). Shutdown
//     drains until a deadline; Close ends at once. Either way the peer
//     reads the reason (CloseError.Remote), and both goroutines of the
//     session (reader and writer) have stopped when Close or Shutdown
//     returns.
//
// # Memory
//
// Received payload is bounded per session by MaxStreams x StreamWindow (by
// default 1024 x 512 KiB; lower either for a tighter bound), plus one write
// batch of about 64 KiB. An idle session holds no payload buffer: on the
// reference machine an idle plaintext session costs about 22 KiB of Go
// memory for both ends together, and an idle stream about 1.5 KiB.
//
// # What it must never do
//
// Package wire never interprets role messages beyond decoding the
// Envelope, never retries or reroutes a stream, and never logs payloads.
// Malformed input from the peer closes the session with a typed reason; it
// never panics.
package wire
