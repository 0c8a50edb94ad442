package wire

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/iop-dev/iop/wire/iopv1"
)

func tunnelReq(r *iopv1.ProviderTunnelRequest) *iopv1.Envelope {
	return &iopv1.Envelope{Body: &iopv1.Envelope_ProviderTunnelRequest{ProviderTunnelRequest: r}}
}

func tunnelResp(r *iopv1.ProviderTunnelResponse) *iopv1.Envelope {
	return &iopv1.Envelope{Body: &iopv1.Envelope_ProviderTunnelResponse{ProviderTunnelResponse: r}}
}

func tunnelEnd(r *iopv1.ProviderTunnelEnd) *iopv1.Envelope {
	return &iopv1.Envelope{Body: &iopv1.Envelope_ProviderTunnelEnd{ProviderTunnelEnd: r}}
}

// fastCases are messages the fast codec takes.
func fastCases() []*iopv1.Envelope {
	hs := []*iopv1.Header{
		{Name: "Content-Type", Value: "application/json"},
		{Name: "X-Empty", Value: ""},
		{Name: "", Value: "no name"},
		{},
		{Name: "X-Long", Value: strings.Repeat("v", 300)},
		{Name: "X-Unicode", Value: "héllo ✓"},
	}
	return []*iopv1.Envelope{
		tunnelReq(&iopv1.ProviderTunnelRequest{}),
		tunnelReq(&iopv1.ProviderTunnelRequest{
			Generation: 7, ProviderId: "ollama", Method: "POST", Path: "/v1/chat/completions?x=1",
			Headers: hs, DeadlineUnixMs: 1796000000000, Body: []byte(`{"model":"m"}`), InlineBody: true,
			Slot: "slot-1", Target: "llama3",
		}),
		tunnelReq(&iopv1.ProviderTunnelRequest{Generation: math.MaxUint64, DeadlineUnixMs: -1, Body: bytes.Repeat([]byte{0, 0xff}, 40000)}),
		tunnelResp(&iopv1.ProviderTunnelResponse{}),
		tunnelResp(&iopv1.ProviderTunnelResponse{Status: 200, Headers: hs}),
		tunnelResp(&iopv1.ProviderTunnelResponse{Status: math.MaxUint32}),
		tunnelEnd(&iopv1.ProviderTunnelEnd{}),
		tunnelEnd(&iopv1.ProviderTunnelEnd{Ok: true}),
		tunnelEnd(&iopv1.ProviderTunnelEnd{Error: iopv1.TunnelError_TUNNEL_ERROR_UPSTREAM_BROKEN, Message: "upstream: connection reset"}),
		tunnelEnd(&iopv1.ProviderTunnelEnd{Error: -5}),
		tunnelEnd(&iopv1.ProviderTunnelEnd{Error: 1 << 30}),
	}
}

// TestTunnelCodecMatchesProto holds the fast codec to protobuf-go's bytes
// and values on the messages it takes.
func TestTunnelCodecMatchesProto(t *testing.T) {
	for i, m := range fastCases() {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			enc, ok := planTunnel(m)
			if !ok {
				t.Fatal("planTunnel declined a tunnel message")
			}
			got := appendTunnel(nil, m, enc)
			if size := enc.size(); size != len(got) || !bytes.Equal(got, want) {
				t.Fatalf("encoding: size %d, %d bytes, equal to protobuf-go's %d bytes: %v", size, len(got), len(want), bytes.Equal(got, want))
			}
			dec, ok := decodeTunnelFast(want)
			if !ok {
				t.Fatal("decodeTunnelFast declined protobuf-go's encoding")
			}
			if !proto.Equal(dec, m) {
				t.Fatalf("decoded %v, want %v", dec, m)
			}
		})
	}
}

// TestTunnelCodecDeclines checks that the fast codec leaves to protobuf-go
// what it cannot decode or encode exactly as protobuf-go does, and that
// the result is then protobuf-go's.
func TestTunnelCodecDeclines(t *testing.T) {
	good, _ := proto.Marshal(tunnelResp(&iopv1.ProviderTunnelResponse{Status: 200}))
	withUnknown := tunnelResp(&iopv1.ProviderTunnelResponse{Status: 200})
	withUnknown.GetProviderTunnelResponse().ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	unknownBytes, _ := proto.Marshal(withUnknown)
	grant := tunnelReq(&iopv1.ProviderTunnelRequest{Grant: &iopv1.CredentialGrant{}})
	grantBytes, _ := proto.Marshal(grant)
	badUTF8Resp := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType),
		protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte{0xff}))
	env := func(num protowire.Number, body []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), body)
	}
	other, _ := proto.Marshal(&iopv1.Envelope{Body: &iopv1.Envelope_Error{Error: &iopv1.Error{Message: "x"}}})

	decodes := map[string][]byte{
		"another message":          other,
		"empty envelope":           nil,
		"two bodies":               append(append([]byte(nil), good...), good...),
		"unknown field":            unknownBytes,
		"credential grant":         grantBytes,
		"invalid UTF-8 header":     env(envTunnelResponse, badUTF8Resp),
		"wrong wire type":          env(envTunnelEnd, protowire.AppendFixed32(protowire.AppendTag(nil, 1, protowire.Fixed32Type), 1)),
		"status as bytes":          env(envTunnelResponse, env(1, []byte{1})),
		"truncated":                good[:len(good)-1],
		"header with a varint":     env(envTunnelRequest, protowire.AppendVarint(protowire.AppendTag(nil, 5, protowire.VarintType), 1)),
		"header with bad content":  env(envTunnelRequest, env(5, []byte{0x80})),
		"envelope field as varint": protowire.AppendVarint(protowire.AppendTag(nil, envTunnelEnd, protowire.VarintType), 1),
	}
	for name, b := range decodes {
		t.Run("decode/"+name, func(t *testing.T) {
			if _, ok := decodeTunnelFast(b); ok {
				t.Fatal("decodeTunnelFast accepted it")
			}
			var want iopv1.Envelope
			werr := proto.Unmarshal(b, &want)
			got, gerr := decodeEnvelope(b)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("decodeEnvelope error %v, protobuf-go's %v", gerr, werr)
			}
			if werr == nil && !proto.Equal(got, &want) {
				t.Fatalf("decodeEnvelope gave %v, protobuf-go %v", got, &want)
			}
		})
	}

	encodes := map[string]*iopv1.Envelope{
		"another message":       {Body: &iopv1.Envelope_Error{Error: &iopv1.Error{}}},
		"no body":               {},
		"nil tunnel message":    {Body: &iopv1.Envelope_ProviderTunnelEnd{}},
		"unknown field":         withUnknown,
		"credential grant":      grant,
		"invalid UTF-8 header":  tunnelResp(&iopv1.ProviderTunnelResponse{Headers: []*iopv1.Header{{Value: "\xff"}}}),
		"nil header":            tunnelResp(&iopv1.ProviderTunnelResponse{Headers: []*iopv1.Header{nil}}),
		"invalid UTF-8 path":    tunnelReq(&iopv1.ProviderTunnelRequest{Path: "/\xc0"}),
		"invalid UTF-8 message": tunnelEnd(&iopv1.ProviderTunnelEnd{Message: "\xfe"}),
	}
	for name, m := range encodes {
		t.Run("encode/"+name, func(t *testing.T) {
			if _, ok := planTunnel(m); ok {
				t.Fatal("planTunnel accepted it")
			}
		})
	}
}

// TestTunnelCodecCoversSchema fails when one of the messages the fast
// codec handles gains, loses or changes a field: the codec would
// otherwise drop a new field on encode without a word.
func TestTunnelCodecCoversSchema(t *testing.T) {
	want := map[string][]string{
		"iop.v1.ProviderTunnelRequest": {
			"1 generation uint64", "2 provider_id string", "3 method string", "4 path string",
			"5 headers message repeated", "6 deadline_unix_ms int64", "7 body bytes", "8 inline_body bool",
			"9 slot string", "10 target string",
			"11 grant message", // declined: left to protobuf-go
		},
		"iop.v1.ProviderTunnelResponse": {"1 status uint32", "2 headers message repeated"},
		"iop.v1.ProviderTunnelEnd":      {"1 ok bool", "2 error enum", "3 message string"},
		"iop.v1.Header":                 {"1 name string", "2 value string"},
	}
	for _, m := range []proto.Message{&iopv1.ProviderTunnelRequest{}, &iopv1.ProviderTunnelResponse{}, &iopv1.ProviderTunnelEnd{}, &iopv1.Header{}} {
		d := m.ProtoReflect().Descriptor()
		var got []string
		fs := d.Fields()
		for i := 0; i < fs.Len(); i++ {
			f := fs.Get(i)
			s := fmt.Sprintf("%d %s %s", f.Number(), f.Name(), f.Kind())
			if f.Cardinality() == protoreflect.Repeated {
				s += " repeated"
			}
			if f.HasPresence() && f.Kind() != protoreflect.MessageKind {
				s += " optional"
			}
			got = append(got, s)
		}
		w := want[string(d.FullName())]
		sort.Strings(got)
		sort.Strings(w)
		if strings.Join(got, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s fields changed; update wire/tunnelcodec.go and this list:\ngot  %q\nwant %q", d.FullName(), got, w)
		}
	}
	env := (&iopv1.Envelope{}).ProtoReflect().Descriptor().Fields()
	for num, name := range map[protowire.Number]string{envTunnelRequest: "provider_tunnel_request", envTunnelResponse: "provider_tunnel_response", envTunnelEnd: "provider_tunnel_end"} {
		if f := env.ByNumber(num); f == nil || string(f.Name()) != name {
			t.Errorf("Envelope field %d is not %s", num, name)
		}
	}
}

// FuzzTunnelCodec holds the fast decoder to protobuf-go on any bytes:
// whatever it accepts, protobuf-go accepts with an equal result; and
// whatever tunnel message protobuf-go decodes, the fast encoder encodes to
// protobuf-go's bytes.
func FuzzTunnelCodec(f *testing.F) {
	for _, m := range fastCases() {
		b, _ := proto.Marshal(m)
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte{0xe2, 0x12, 0x02, 0x12, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ref iopv1.Envelope
		rerr := proto.Unmarshal(b, &ref)
		got, ok := decodeTunnelFast(b)
		if ok {
			if rerr != nil {
				t.Fatalf("fast decode accepted what protobuf-go refuses (%v)", rerr)
			}
			if !proto.Equal(got, &ref) {
				t.Fatalf("fast decode %v, protobuf-go %v", got, &ref)
			}
		}
		if rerr != nil {
			return
		}
		enc, ok := planTunnel(&ref)
		if !ok {
			return
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(&ref)
		if err != nil {
			t.Fatalf("protobuf-go cannot encode what the fast encoder takes: %v", err)
		}
		if got := appendTunnel(nil, &ref, enc); !bytes.Equal(got, want) {
			t.Fatalf("fast encoding %x, protobuf-go %x", got, want)
		}
	})
}

// BenchmarkTunnelCodec compares the tunnel codec with protobuf-go's on
// one exchange's three messages, as the bench gateway's client sends
// them: a request with four headers and an inline body, a response head
// with three headers, and the end.
func BenchmarkTunnelCodec(b *testing.B) {
	hs := []*iopv1.Header{{Name: "Content-Type", Value: "application/json"}, {Name: "Accept", Value: "application/json"},
		{Name: "User-Agent", Value: "OpenAI/Python 1.54.0"}, {Name: "X-Stainless-Retry-Count", Value: "0"}}
	msgs := []*iopv1.Envelope{
		tunnelReq(&iopv1.ProviderTunnelRequest{Generation: 3, ProviderId: "ollama", Method: "POST", Path: "/v1/chat/completions",
			Headers: hs, DeadlineUnixMs: 1796000000000, Body: make([]byte, 180), InlineBody: true, Slot: "d-000123", Target: "llama3"}),
		tunnelResp(&iopv1.ProviderTunnelResponse{Status: 200, Headers: []*iopv1.Header{{Name: "Content-Type", Value: "application/json"},
			{Name: "Date", Value: "Tue, 01 Dec 2026 15:00:00 GMT"}, {Name: "Content-Length", Value: "310"}}}),
		tunnelEnd(&iopv1.ProviderTunnelEnd{Ok: true}),
	}
	var enc [][]byte
	for _, m := range msgs {
		x, _ := proto.Marshal(m)
		enc = append(enc, x)
	}
	buf := make([]byte, 0, 1024)
	b.Run("encode/protobuf-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				_ = proto.Size(m)
				buf, _ = proto.MarshalOptions{}.MarshalAppend(buf[:0], m)
			}
		}
	})
	b.Run("encode/tunnel", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, m := range msgs {
				enc, _ := planTunnel(m)
				buf = appendTunnel(buf[:0], m, enc)
			}
		}
	})
	b.Run("decode/protobuf-go", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, x := range enc {
				if err := proto.Unmarshal(x, new(iopv1.Envelope)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("decode/tunnel", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, x := range enc {
				if _, ok := decodeTunnelFast(x); !ok {
					b.Fatal("declined")
				}
			}
		}
	})
}
