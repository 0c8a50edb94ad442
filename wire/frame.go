package wire

import (
	"encoding/binary"
	"fmt"
	"io"
)

// Frame layout. Every frame is a fixed 14-byte header followed by its payload:
//
//	offset size field
//	0      4    payload length, big endian (at most MaxFramePayload)
//	4      1    frame type
//	5      1    flags
//	6      8    stream id, big endian (0 for session frames)
//
// The connection starts with the 8 magic bytes, sent by each side before its
// first frame, and each side's first frame is a CONTROL frame carrying a
// Preface.
const (
	headerSize = 14

	// MaxFramePayload is the largest payload a frame may carry. A header
	// announcing more closes the session with FRAME_TOO_LARGE before any
	// payload byte is read or allocated.
	MaxFramePayload = 64 << 10

	// maxChunk is the largest DATA or MESSAGE fragment a sender produces; the
	// writer sends one chunk per stream per round-robin turn. It matches the
	// 32 KiB writes of io.Copy, so that a copied stream is one frame per
	// write.
	maxChunk = 32 << 10

	// maxControlPayload bounds a CONTROL frame; control messages are small
	// and their detail strings are clipped to maxDetail.
	maxControlPayload = 1 << 10

	// ProtocolVersion is the wire protocol version this package speaks.
	ProtocolVersion = 1

	// ALPN is the TLS application protocol negotiated for IOP sessions.
	ALPN = "iop/1"
)

// magic opens every connection. The high first byte and the CR LF pair catch
// a peer that is not speaking IOP (an HTTP client, a text-mode mangler).
var magic = [8]byte{0x89, 'I', 'O', 'P', '\r', '\n', 0x1a, '\n'}

// frameType identifies a frame's payload.
type frameType uint8

const (
	// frameData carries raw stream bytes. Flags: flagFin.
	frameData frameType = 0
	// frameMessage carries an encoded Envelope or a fragment of one. Flags:
	// flagFin, flagMore.
	frameMessage frameType = 1
	// frameOpen opens a stream. No payload, no flags.
	frameOpen frameType = 2
	// frameWindow returns receive credit: a 4-byte big-endian increment.
	frameWindow frameType = 3
	// frameControl carries a Control message: session controls on stream 0,
	// a StreamReset on the stream it ends.
	frameControl frameType = 4

	numFrameTypes = 5
)

func (t frameType) String() string {
	switch t {
	case frameData:
		return "DATA"
	case frameMessage:
		return "MESSAGE"
	case frameOpen:
		return "OPEN"
	case frameWindow:
		return "WINDOW"
	case frameControl:
		return "CONTROL"
	}
	return fmt.Sprintf("frameType(%d)", uint8(t))
}

const (
	// flagFin half-closes the sender's direction after this frame.
	flagFin uint8 = 1 << 0
	// flagMore marks a MESSAGE fragment that the next MESSAGE frame continues.
	flagMore uint8 = 1 << 1
)

// allowedFlags lists, per frame type, the only flags it may carry. Anything
// else is a protocol error: unknown bits are refused, not ignored.
var allowedFlags = [numFrameTypes]uint8{
	frameData:    flagFin,
	frameMessage: flagFin | flagMore,
	frameOpen:    0,
	frameWindow:  0,
	frameControl: 0,
}

// header is a decoded frame header.
type header struct {
	length uint32
	typ    frameType
	flags  uint8
	stream uint64
}

func (h header) String() string {
	return fmt.Sprintf("%s stream=%d len=%d flags=%#x", h.typ, h.stream, h.length, h.flags)
}

func (h header) encode(b []byte) {
	_ = b[headerSize-1]
	binary.BigEndian.PutUint32(b[0:4], h.length)
	b[4] = byte(h.typ)
	b[5] = h.flags
	binary.BigEndian.PutUint64(b[6:14], h.stream)
}

// decodeHeader parses and validates a header. Every check that does not need
// session state happens here, before the payload is read, so that nothing is
// allocated for a frame that will be refused.
func decodeHeader(b []byte) (header, error) {
	_ = b[headerSize-1]
	h := header{
		length: binary.BigEndian.Uint32(b[0:4]),
		typ:    frameType(b[4]),
		flags:  b[5],
		stream: binary.BigEndian.Uint64(b[6:14]),
	}
	if h.length > MaxFramePayload {
		return h, protoErr(ReasonFrameTooLarge, "frame payload %d bytes exceeds %d", h.length, MaxFramePayload)
	}
	if h.typ >= numFrameTypes {
		return h, protoErr(ReasonProtocolError, "unknown frame type %d", uint8(h.typ))
	}
	if h.flags&^allowedFlags[h.typ] != 0 {
		return h, protoErr(ReasonProtocolError, "%s frame with flags %#x", h.typ, h.flags)
	}
	switch h.typ {
	case frameData:
		if h.stream == 0 {
			return h, protoErr(ReasonProtocolError, "DATA on stream 0")
		}
		if h.length == 0 && h.flags&flagFin == 0 {
			// Empty DATA frames are free of charge only when they end the
			// direction; without FIN they would be an unmetered flood.
			return h, protoErr(ReasonProtocolError, "empty DATA frame without FIN")
		}
	case frameMessage:
		if h.stream == 0 {
			return h, protoErr(ReasonProtocolError, "MESSAGE on stream 0")
		}
		if h.flags&flagMore != 0 && h.flags&flagFin != 0 {
			return h, protoErr(ReasonProtocolError, "MESSAGE fragment with both MORE and FIN")
		}
	case frameOpen:
		if h.stream == 0 || h.length != 0 {
			return h, protoErr(ReasonProtocolError, "malformed OPEN (stream %d, %d bytes)", h.stream, h.length)
		}
	case frameWindow:
		if h.stream == 0 || h.length != 4 {
			return h, protoErr(ReasonProtocolError, "malformed WINDOW (stream %d, %d bytes)", h.stream, h.length)
		}
	case frameControl:
		if h.length == 0 || h.length > maxControlPayload {
			return h, protoErr(ReasonProtocolError, "CONTROL frame of %d bytes", h.length)
		}
	}
	return h, nil
}

// charge is what a frame costs against its stream's credit window: its
// encoded size, header included, for every frame that carries stream payload.
// An empty DATA frame with FIN is free (it can occur once per stream); every
// other frame type is a session frame and free.
func (h header) charge() uint32 {
	switch h.typ {
	case frameData:
		if h.length == 0 {
			return 0
		}
		return headerSize + h.length
	case frameMessage:
		return headerSize + h.length
	}
	return 0
}

// readHeader reads one header from r into buf (len >= headerSize).
func readHeader(r io.Reader, buf []byte) (header, error) {
	if _, err := io.ReadFull(r, buf[:headerSize]); err != nil {
		return header{}, err
	}
	return decodeHeader(buf)
}
