package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
)

// FuzzFrameDecoder feeds arbitrary bytes to the frame decoder. It must never
// panic or allocate beyond MaxFramePayload for one frame, and every header
// it accepts must re-encode to the same bytes.
func FuzzFrameDecoder(f *testing.F) {
	for _, seed := range seedFrames() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bufio.NewReader(bytes.NewReader(b))
		var hb [headerSize]byte
		for {
			h, err := readHeader(r, hb[:])
			if err != nil {
				var pe *protocolError
				if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &pe) {
					t.Fatalf("untyped decode error %v", err)
				}
				return
			}
			var again [headerSize]byte
			h.encode(again[:])
			if again != hb {
				t.Fatalf("header %v re-encodes to %x, read %x", h, again, hb)
			}
			if h.length > MaxFramePayload {
				t.Fatalf("accepted length %d", h.length)
			}
			payload := make([]byte, h.length)
			if _, err := io.ReadFull(r, payload); err != nil {
				return
			}
			if h.typ == frameControl {
				decodeControl(h.stream, payload)
			}
		}
	})
}

// FuzzControlDecoder checks the control-message decoder: no panic, and an
// accepted message survives a round trip unchanged.
func FuzzControlDecoder(f *testing.F) {
	for _, seed := range seedControls() {
		f.Add(uint64(0), seed)
		f.Add(uint64(1), seed)
	}
	f.Fuzz(func(t *testing.T, stream uint64, payload []byte) {
		c, err := decodeControl(stream, payload)
		if err != nil {
			var pe *protocolError
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		frame := encodeControl(nil, stream, c)
		h, err := decodeHeader(frame)
		if err != nil {
			t.Fatalf("re-encoded control rejected: %v", err)
		}
		c2, err := decodeControl(h.stream, frame[headerSize:])
		if err != nil || !proto.Equal(c, c2) {
			t.Fatalf("round trip: %v, %v != %v", err, c2, c)
		}
	})
}

// FuzzSession feeds arbitrary bytes, after a valid handshake, to a real
// server session over net.Pipe. The session must either stay up or close
// with a typed reason, never panic, and stop its goroutines.
func FuzzSession(f *testing.F) {
	for _, seed := range seedFrames() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c1, c2 := net.Pipe()
		sch := make(chan *Session, 1)
		go func() {
			s, _ := Server(c2, &Config{CloseLinger: time.Millisecond, HandshakeTimeout: time.Second})
			sch <- s
		}()
		drained := make(chan struct{})
		go func() {
			io.Copy(io.Discard, c1)
			close(drained)
		}()
		c1.Write(validHello(1 << 20))
		s := <-sch
		if s == nil {
			c1.Close()
			<-drained
			t.Fatal("handshake failed")
		}
		c1.SetWriteDeadline(time.Now().Add(time.Second))
		c1.Write(b)
		c1.Close()
		<-s.Done()
		var ce *CloseError
		if !errors.As(s.Err(), &ce) || ce.Reason.String() == "" {
			t.Fatalf("session ended with %v", s.Err())
		}
		s.Close()
		<-drained
	})
}
