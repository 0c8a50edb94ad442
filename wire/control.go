package wire

import (
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/wire/iopv1"
)

// unmarshalStrict decodes a protobuf payload and refuses unknown fields:
// session control is security-relevant, so a field this side does not know
// is an error, not something to skip over.
var unmarshalStrict = proto.UnmarshalOptions{DiscardUnknown: false}

// decodeControl parses the payload of a CONTROL frame on the given stream. It
// enforces the session rules that need no session state: exactly one known
// body, no unknown fields, a reset only on a stream, every other control only
// on stream 0, bounded detail strings.
func decodeControl(stream uint64, payload []byte) (*iopv1.Control, error) {
	c := new(iopv1.Control)
	if err := unmarshalStrict.Unmarshal(payload, c); err != nil {
		return nil, protoErr(ReasonProtocolError, "malformed CONTROL: %v", err)
	}
	if len(c.ProtoReflect().GetUnknown()) != 0 {
		return nil, protoErr(ReasonProtocolError, "CONTROL with unknown fields")
	}
	var detail string
	var sub proto.Message
	switch b := c.Body.(type) {
	case *iopv1.Control_Preface:
		sub = b.Preface
	case *iopv1.Control_HeartbeatRequest:
		sub = b.HeartbeatRequest
	case *iopv1.Control_HeartbeatResponse:
		sub = b.HeartbeatResponse
	case *iopv1.Control_GoAway:
		sub, detail = b.GoAway, b.GoAway.GetDetail()
	case *iopv1.Control_SessionClose:
		sub, detail = b.SessionClose, b.SessionClose.GetDetail()
	case *iopv1.Control_StreamReset:
		sub, detail = b.StreamReset, b.StreamReset.GetDetail()
	default:
		return nil, protoErr(ReasonProtocolError, "CONTROL with no known body")
	}
	if sub == nil || !sub.ProtoReflect().IsValid() {
		// A oneof member set to a nil message cannot come off the wire, but
		// a present-but-empty one can; both are fine except nil.
		return nil, protoErr(ReasonProtocolError, "CONTROL with empty body")
	}
	if len(sub.ProtoReflect().GetUnknown()) != 0 {
		return nil, protoErr(ReasonProtocolError, "CONTROL body with unknown fields")
	}
	if len(detail) > maxDetail {
		return nil, protoErr(ReasonProtocolError, "CONTROL detail of %d bytes", len(detail))
	}
	_, isReset := c.Body.(*iopv1.Control_StreamReset)
	if isReset != (stream != 0) {
		return nil, protoErr(ReasonProtocolError, "CONTROL %T on stream %d", c.Body, stream)
	}
	return c, nil
}

// encodeControl appends the frame (header and payload) for c on stream to b.
func encodeControl(b []byte, stream uint64, c *iopv1.Control) []byte {
	n := proto.Size(c)
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, c)
	if err != nil || len(b)-start-headerSize != n {
		// Control messages are built here from valid values; a failure is
		// a programming error.
		panic("wire: encode control: " + errString(err))
	}
	header{length: uint32(n), typ: frameControl, stream: stream}.encode(b[start:])
	return b
}

func errString(err error) string {
	if err == nil {
		return "size mismatch"
	}
	return err.Error()
}

func ctlPreface(p *iopv1.Preface) *iopv1.Control {
	return &iopv1.Control{Body: &iopv1.Control_Preface{Preface: p}}
}

func ctlPing(id uint64) *iopv1.Control {
	return &iopv1.Control{Body: &iopv1.Control_HeartbeatRequest{HeartbeatRequest: &iopv1.HeartbeatRequest{Id: id}}}
}

func ctlPong(id uint64) *iopv1.Control {
	return &iopv1.Control{Body: &iopv1.Control_HeartbeatResponse{HeartbeatResponse: &iopv1.HeartbeatResponse{Id: id}}}
}

func ctlGoAway(last uint64, detail string) *iopv1.Control {
	return &iopv1.Control{Body: &iopv1.Control_GoAway{GoAway: &iopv1.GoAway{LastStreamId: last, Detail: clipDetail(detail)}}}
}

func ctlClose(r CloseReason, detail string) *iopv1.Control {
	return &iopv1.Control{Body: &iopv1.Control_SessionClose{SessionClose: &iopv1.SessionClose{
		Reason: iopv1.CloseReason(r), Detail: clipDetail(detail),
	}}}
}

func ctlReset(code ResetCode, detail string) *iopv1.Control {
	return &iopv1.Control{Body: &iopv1.Control_StreamReset{StreamReset: &iopv1.StreamReset{
		Code: iopv1.ResetCode(code), Detail: clipDetail(detail),
	}}}
}
