package wire

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/iop-dev/iop/wire/iopv1"
)

// A tunnel exchange sends three role messages per request: the
// ProviderTunnelRequest, the ProviderTunnelResponse and the
// ProviderTunnelEnd. protobuf-go's reflective codec spends most of its time
// (and, on decode, one allocation per string and header) on bookkeeping
// those three flat messages do not need. This file codes exactly those
// three, and only in the cases where the result is the one protobuf-go
// gives (a repeated scalar or string field: the last one wins, as there).
// Anything else declines, and the caller uses protobuf-go: another
// message, an envelope with more than one field, an unknown field, a known
// field with an unexpected wire type, invalid UTF-8 in a string, a
// credential grant, unknown fields kept from an earlier decode.
// FuzzTunnelCodec holds the two to the same result on any input, and
// TestTunnelCodecCoversSchema fails when one of the messages changes.

// decodeEnvelope unmarshals one role message.
func decodeEnvelope(b []byte) (*iopv1.Envelope, error) {
	if env, ok := decodeTunnelFast(b); ok {
		return env, nil
	}
	env := new(iopv1.Envelope)
	if err := proto.Unmarshal(b, env); err != nil {
		return nil, err
	}
	return env, nil
}

// Envelope field numbers of the tunnel messages.
const (
	envTunnelRequest  = 300
	envTunnelResponse = 301
	envTunnelEnd      = 302
)

// decodeTunnelFast decodes an envelope holding exactly one tunnel message,
// or reports false.
func decodeTunnelFast(b []byte) (*iopv1.Envelope, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || typ != protowire.BytesType {
		return nil, false
	}
	body, m := protowire.ConsumeBytes(b[n:])
	if m < 0 || n+m != len(b) {
		return nil, false // not exactly one field
	}
	switch num {
	case envTunnelRequest:
		blk := new(struct {
			env  iopv1.Envelope
			wrap iopv1.Envelope_ProviderTunnelRequest
			msg  iopv1.ProviderTunnelRequest
		})
		if !decodeTunnelRequest(body, &blk.msg) {
			return nil, false
		}
		blk.wrap.ProviderTunnelRequest = &blk.msg
		blk.env.Body = &blk.wrap
		return &blk.env, true
	case envTunnelResponse:
		blk := new(struct {
			env  iopv1.Envelope
			wrap iopv1.Envelope_ProviderTunnelResponse
			msg  iopv1.ProviderTunnelResponse
		})
		if !decodeTunnelResponse(body, &blk.msg) {
			return nil, false
		}
		blk.wrap.ProviderTunnelResponse = &blk.msg
		blk.env.Body = &blk.wrap
		return &blk.env, true
	case envTunnelEnd:
		blk := new(struct {
			env  iopv1.Envelope
			wrap iopv1.Envelope_ProviderTunnelEnd
			msg  iopv1.ProviderTunnelEnd
		})
		if !decodeTunnelEnd(body, &blk.msg) {
			return nil, false
		}
		blk.wrap.ProviderTunnelEnd = &blk.msg
		blk.env.Body = &blk.wrap
		return &blk.env, true
	}
	return nil, false
}

// field is one field of a flat message: its number, wire type, and value
// (v for a varint, p for length-delimited bytes).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   uint64
	p   []byte
}

// nextField consumes one varint or length-delimited field from b. It
// returns the bytes left and false on malformed input or another wire type.
// A field with a one-byte tag and a one-byte varint or length (nearly
// every field of a tunnel message) is read inline.
func nextField(b []byte) (field, []byte, bool) {
	if len(b) >= 2 && b[0] < 0x80 && b[0] >= 8 && b[1] < 0x80 {
		num, typ, v := protowire.Number(b[0]>>3), protowire.Type(b[0]&7), int(b[1])
		if typ == protowire.VarintType {
			return field{num: num, typ: typ, v: uint64(v)}, b[2:], true
		}
		if typ == protowire.BytesType && len(b)-2 >= v {
			return field{num: num, typ: typ, p: b[2 : 2+v]}, b[2+v:], true
		}
	}
	return nextFieldSlow(b)
}

func nextFieldSlow(b []byte) (field, []byte, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return field{}, nil, false
	}
	b = b[n:]
	f := field{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		f.v, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.p, n = protowire.ConsumeBytes(b)
	default:
		return field{}, nil, false
	}
	if n < 0 {
		return field{}, nil, false
	}
	return f, b[n:], true
}

// strAcc gathers the strings of one message so that they take one
// allocation: each string field's bytes are appended as the message is
// read, and once it is read whole every string is cut from one copy (so a
// string kept keeps its message head's others alive: a few hundred
// bytes). The caller gives it stack arrays to start in.
type strAcc struct {
	buf  []byte
	refs []strRef
}

// strRef is where a gathered string goes and where its bytes are.
type strRef struct {
	dst      *string
	off, end int
}

// add gathers one proto3 string field, which must be valid UTF-8 (as
// protobuf-go requires). A later value for the same field replaces an
// earlier one, as in protobuf-go, since refs are set in order.
// It takes and returns the accumulator by value: assigning through a
// pointer would make the compiler move the caller's stack arrays to the
// heap.
func (sa strAcc) add(dst *string, p []byte) (strAcc, bool) {
	if !utf8.Valid(p) {
		return sa, false
	}
	off := len(sa.buf)
	sa.buf = append(sa.buf, p...)
	sa.refs = append(sa.refs, strRef{dst: dst, off: off, end: len(sa.buf)})
	return sa, true
}

// set stores every gathered string.
func (sa strAcc) set() {
	all := string(sa.buf)
	for _, r := range sa.refs {
		*r.dst = all[r.off:r.end]
	}
}

// headerBlock holds the headers of one message, allocated at once.
type headerBlock struct {
	vals []iopv1.Header
	ptrs []*iopv1.Header
}

// countHeaders counts the top-level length-delimited fields numbered num
// in b (malformed input is found by the decode that follows).
func countHeaders(b []byte, num protowire.Number) int {
	n := 0
	for len(b) > 0 {
		f, rest, ok := nextField(b)
		if !ok {
			break
		}
		if f.num == num && f.typ == protowire.BytesType {
			n++
		}
		b = rest
	}
	return n
}

func newHeaderBlock(n int) headerBlock {
	if n == 0 {
		return headerBlock{}
	}
	return headerBlock{vals: make([]iopv1.Header, n), ptrs: make([]*iopv1.Header, 0, n)}
}

// decode decodes one Header message into the block's next entry.
func (hb *headerBlock) decode(p []byte, sa strAcc) (strAcc, bool) {
	if len(hb.ptrs) == len(hb.vals) {
		return sa, false // countHeaders counted fewer: never, for the same bytes
	}
	h := &hb.vals[len(hb.ptrs)]
	hb.ptrs = append(hb.ptrs, h)
	for len(p) > 0 {
		f, rest, ok := nextField(p)
		if !ok || f.typ != protowire.BytesType {
			return sa, false
		}
		switch f.num {
		case 1:
			sa, ok = sa.add(&h.Name, f.p)
		case 2:
			sa, ok = sa.add(&h.Value, f.p)
		default:
			return sa, false
		}
		if !ok {
			return sa, false
		}
		p = rest
	}
	return sa, true
}

func decodeTunnelRequest(b []byte, m *iopv1.ProviderTunnelRequest) bool {
	hb := newHeaderBlock(countHeaders(b, 5))
	var bufA [512]byte
	var refA [24]strRef
	sa := strAcc{buf: bufA[:0], refs: refA[:0]}
	for len(b) > 0 {
		f, rest, ok := nextField(b)
		if !ok {
			return false
		}
		b = rest
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			m.Generation = f.v
		case f.num == 2 && f.typ == protowire.BytesType:
			sa, ok = sa.add(&m.ProviderId, f.p)
		case f.num == 3 && f.typ == protowire.BytesType:
			sa, ok = sa.add(&m.Method, f.p)
		case f.num == 4 && f.typ == protowire.BytesType:
			sa, ok = sa.add(&m.Path, f.p)
		case f.num == 5 && f.typ == protowire.BytesType:
			sa, ok = hb.decode(f.p, sa)
		case f.num == 6 && f.typ == protowire.VarintType:
			m.DeadlineUnixMs = int64(f.v)
		case f.num == 7 && f.typ == protowire.BytesType:
			m.Body = nil // as protobuf-go: the last one, nil when empty
			if len(f.p) > 0 {
				m.Body = append([]byte(nil), f.p...)
			}
		case f.num == 8 && f.typ == protowire.VarintType:
			m.InlineBody = protowire.DecodeBool(f.v)
		case f.num == 9 && f.typ == protowire.BytesType:
			sa, ok = sa.add(&m.Slot, f.p)
		case f.num == 10 && f.typ == protowire.BytesType:
			sa, ok = sa.add(&m.Target, f.p)
		default:
			return false // the grant, or a field this codec does not know
		}
		if !ok {
			return false
		}
	}
	sa.set()
	if len(hb.ptrs) > 0 {
		m.Headers = hb.ptrs
	}
	return true
}

func decodeTunnelResponse(b []byte, m *iopv1.ProviderTunnelResponse) bool {
	hb := newHeaderBlock(countHeaders(b, 2))
	var bufA [512]byte
	var refA [24]strRef
	sa := strAcc{buf: bufA[:0], refs: refA[:0]}
	for len(b) > 0 {
		f, rest, ok := nextField(b)
		if !ok {
			return false
		}
		b = rest
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			m.Status = uint32(f.v)
		case f.num == 2 && f.typ == protowire.BytesType:
			sa, ok = hb.decode(f.p, sa)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	sa.set()
	if len(hb.ptrs) > 0 {
		m.Headers = hb.ptrs
	}
	return true
}

func decodeTunnelEnd(b []byte, m *iopv1.ProviderTunnelEnd) bool {
	for len(b) > 0 {
		f, rest, ok := nextField(b)
		if !ok {
			return false
		}
		b = rest
		switch {
		case f.num == 1 && f.typ == protowire.VarintType:
			m.Ok = protowire.DecodeBool(f.v)
		case f.num == 2 && f.typ == protowire.VarintType:
			m.Error = iopv1.TunnelError(int32(f.v))
		case f.num == 3 && f.typ == protowire.BytesType:
			if !utf8.Valid(f.p) {
				return false
			}
			m.Message = string(f.p)
		default:
			return false
		}
	}
	return true
}

// --- encode ---------------------------------------------------------------

// tunnelEnc is what planTunnel found for appendTunnel: the envelope field
// and the size of the message in it, so that the message is sized (and
// its strings checked) once.
type tunnelEnc struct {
	num   protowire.Number
	inner int
}

// size is the encoded size of the whole envelope.
func (e tunnelEnc) size() int { return protowire.SizeTag(e.num) + protowire.SizeBytes(e.inner) }

// planTunnel reports whether the fast encoder can encode m and, when it
// can, what appendTunnel needs.
func planTunnel(m *iopv1.Envelope) (tunnelEnc, bool) {
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		return tunnelEnc{}, false
	}
	switch b := m.Body.(type) {
	case *iopv1.Envelope_ProviderTunnelRequest:
		r := b.ProviderTunnelRequest
		if r == nil || r.Grant != nil || len(r.ProtoReflect().GetUnknown()) > 0 {
			return tunnelEnc{}, false
		}
		n, ok := requestSize(r)
		return tunnelEnc{envTunnelRequest, n}, ok
	case *iopv1.Envelope_ProviderTunnelResponse:
		r := b.ProviderTunnelResponse
		if r == nil || len(r.ProtoReflect().GetUnknown()) > 0 {
			return tunnelEnc{}, false
		}
		n, ok := responseSize(r)
		return tunnelEnc{envTunnelResponse, n}, ok
	case *iopv1.Envelope_ProviderTunnelEnd:
		r := b.ProviderTunnelEnd
		if r == nil || len(r.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(r.Message) {
			return tunnelEnc{}, false
		}
		return tunnelEnc{envTunnelEnd, endSize(r)}, true
	}
	return tunnelEnc{}, false
}

// appendTunnel appends m, as planTunnel planned it.
func appendTunnel(b []byte, m *iopv1.Envelope, e tunnelEnc) []byte {
	b = protowire.AppendTag(b, e.num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(e.inner))
	switch x := m.Body.(type) {
	case *iopv1.Envelope_ProviderTunnelRequest:
		return appendRequest(b, x.ProviderTunnelRequest)
	case *iopv1.Envelope_ProviderTunnelResponse:
		return appendResponse(b, x.ProviderTunnelResponse)
	case *iopv1.Envelope_ProviderTunnelEnd:
		return appendEnd(b, x.ProviderTunnelEnd)
	}
	panic("wire: appendTunnel called on a message planTunnel declined")
}

// sizeString is the size of a proto3 string field (0 when empty).
func sizeString(s string) int {
	if s == "" {
		return 0
	}
	return 1 + protowire.SizeBytes(len(s)) // every field here has a one-byte tag
}

func sizeVarint(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1 + protowire.SizeVarint(v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func boolVarint(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// headerMsgSize is the size of one Header message, and false for one the
// fast encoder leaves to protobuf-go.
func headerMsgSize(h *iopv1.Header) (int, bool) {
	if h == nil || len(h.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(h.Name) || !utf8.ValidString(h.Value) {
		return 0, false
	}
	return sizeString(h.Name) + sizeString(h.Value), true
}

func headersSize(hs []*iopv1.Header) (int, bool) {
	n := 0
	for _, h := range hs {
		s, ok := headerMsgSize(h)
		if !ok {
			return 0, false
		}
		n += 1 + protowire.SizeBytes(s)
	}
	return n, true
}

func appendHeaders(b []byte, num protowire.Number, hs []*iopv1.Header) []byte {
	for _, h := range hs {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeString(h.Name)+sizeString(h.Value)))
		b = appendString(b, 1, h.Name)
		b = appendString(b, 2, h.Value)
	}
	return b
}

func requestSize(r *iopv1.ProviderTunnelRequest) (int, bool) {
	for _, s := range [...]string{r.ProviderId, r.Method, r.Path, r.Slot, r.Target} {
		if !utf8.ValidString(s) {
			return 0, false
		}
	}
	hs, ok := headersSize(r.Headers)
	if !ok {
		return 0, false
	}
	n := sizeVarint(r.Generation) + sizeString(r.ProviderId) + sizeString(r.Method) + sizeString(r.Path) + hs +
		sizeVarint(uint64(r.DeadlineUnixMs)) + sizeVarint(boolVarint(r.InlineBody)) + sizeString(r.Slot) + sizeString(r.Target)
	if len(r.Body) > 0 {
		n += 1 + protowire.SizeBytes(len(r.Body))
	}
	return n, true
}

func appendRequest(b []byte, r *iopv1.ProviderTunnelRequest) []byte {
	b = appendVarint(b, 1, r.Generation)
	b = appendString(b, 2, r.ProviderId)
	b = appendString(b, 3, r.Method)
	b = appendString(b, 4, r.Path)
	b = appendHeaders(b, 5, r.Headers)
	b = appendVarint(b, 6, uint64(r.DeadlineUnixMs))
	if len(r.Body) > 0 {
		b = protowire.AppendTag(b, 7, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Body)
	}
	b = appendVarint(b, 8, boolVarint(r.InlineBody))
	b = appendString(b, 9, r.Slot)
	return appendString(b, 10, r.Target)
}

func responseSize(r *iopv1.ProviderTunnelResponse) (int, bool) {
	hs, ok := headersSize(r.Headers)
	if !ok {
		return 0, false
	}
	return sizeVarint(uint64(r.Status)) + hs, true
}

func appendResponse(b []byte, r *iopv1.ProviderTunnelResponse) []byte {
	b = appendVarint(b, 1, uint64(r.Status))
	return appendHeaders(b, 2, r.Headers)
}

func endSize(r *iopv1.ProviderTunnelEnd) int {
	// An enum is encoded as its int32 value sign-extended to 64 bits.
	return sizeVarint(boolVarint(r.Ok)) + sizeVarint(uint64(int64(r.Error))) + sizeString(r.Message)
}

func appendEnd(b []byte, r *iopv1.ProviderTunnelEnd) []byte {
	b = appendVarint(b, 1, boolVarint(r.Ok))
	b = appendVarint(b, 2, uint64(int64(r.Error)))
	return appendString(b, 3, r.Message)
}
