package wire

import "github.com/iop-dev/iop/wire/iopv1"

// seedControls returns one valid payload of every control message.
func seedControls() [][]byte {
	var out [][]byte
	for _, c := range []*iopv1.Control{
		ctlPreface(&iopv1.Preface{Version: 1, StreamWindow: 1 << 18, MaxStreams: 1024}),
		ctlPing(7),
		ctlPong(7),
		ctlGoAway(9, "draining"),
		ctlClose(ReasonHeartbeatTimeout, "no response"),
		ctlReset(ResetRefused, "backlog"),
	} {
		out = append(out, encodeControl(nil, 0, c)[headerSize:])
	}
	return out
}

// seedFrames returns frame sequences a peer might send, valid and not.
func seedFrames() [][]byte {
	frame := func(h header, payload []byte) []byte {
		h.length = uint32(len(payload))
		b := make([]byte, headerSize)
		h.encode(b)
		return append(b, payload...)
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	env := []byte{0x0a, 0x04, 0x08, 0x04, 0x12, 0x00} // Envelope{error{code:NOT_FOUND}}
	return [][]byte{
		cat(frame(header{typ: frameOpen, stream: 1}, nil),
			frame(header{typ: frameData, stream: 1}, []byte("hello")),
			frame(header{typ: frameMessage, stream: 1, flags: flagMore}, env[:3]),
			frame(header{typ: frameMessage, stream: 1}, env[3:]),
			frame(header{typ: frameWindow, stream: 1}, []byte{0, 0, 16, 0}),
			frame(header{typ: frameData, stream: 1, flags: flagFin}, nil)),
		encodeControl(nil, 0, ctlPing(1)),
		encodeControl(nil, 0, ctlGoAway(0, "")),
		cat(frame(header{typ: frameOpen, stream: 3}, nil), encodeControl(nil, 3, ctlReset(ResetCancel, ""))),
		encodeControl(nil, 0, ctlClose(ReasonNormal, "")),
		frame(header{typ: frameOpen, stream: 2}, nil),
		frame(header{typ: frameData, stream: 5}, []byte("x")),
		{0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
		{0xff, 0xff, 0xff, 0xff, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	}
}
