package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/iop-dev/iop/wire/iopv1"
)

// echo accepts one stream and sends back every message and byte it reads,
// then ends its direction.
func echo(t *testing.T, s *Session) <-chan error {
	done := make(chan error, 1)
	go func() {
		st, err := s.AcceptStream(ctx(t))
		if err != nil {
			done <- err
			return
		}
		buf := make([]byte, 4096)
		for {
			n, err := st.Read(buf)
			if n > 0 {
				if _, werr := st.Write(buf[:n]); werr != nil {
					done <- werr
					return
				}
			}
			switch {
			case errors.Is(err, ErrMessageNext):
				m, err := st.ReadMessage(ctx(t))
				if err != nil {
					done <- err
					return
				}
				if err := st.WriteMessage(m); err != nil {
					done <- err
					return
				}
			case err == io.EOF:
				done <- st.CloseWrite()
				return
			case err != nil:
				done <- err
				return
			}
		}
	}()
	return done
}

func TestOpenDataMessageEndBothDirections(t *testing.T) {
	client, server := pair(t, nil, nil)
	for _, dir := range []struct {
		name         string
		opener, peer *Session
	}{{"client-opens", client, server}, {"server-opens", server, client}} {
		t.Run(dir.name, func(t *testing.T) {
			done := echo(t, dir.peer)
			st, err := dir.opener.OpenStream(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := st.ID()%2 == 1; got != dir.opener.IsClient() {
				t.Errorf("stream id %d has the wrong parity for its opener", st.ID())
			}
			if _, err := st.Write([]byte("hello ")); err != nil {
				t.Fatal(err)
			}
			want := errEnv("message in the middle")
			if err := st.WriteMessage(want); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Write([]byte("world")); err != nil {
				t.Fatal(err)
			}
			if err := st.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			buf := make([]byte, 3)
			var gotMsg bool
			for {
				n, err := st.Read(buf)
				got.Write(buf[:n])
				if errors.Is(err, ErrMessageNext) {
					m, err := st.ReadMessage(ctx(t))
					if err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(want, m, protocmp.Transform()); d != "" {
						t.Errorf("message (-want +got):\n%s", d)
					}
					gotMsg = true
					continue
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if got.String() != "hello world" || !gotMsg {
				t.Errorf("echo = %q (message %v), want %q and the message", got.String(), gotMsg, "hello world")
			}
			if err := <-done; err != nil {
				t.Fatalf("echo side: %v", err)
			}
			<-st.Done()
			if err := st.Terminal(); err != nil {
				t.Errorf("Terminal() = %v, want nil", err)
			}
		})
	}
	waitOpen(t, client, 0)
	waitOpen(t, server, 0)
}

func waitOpen(t *testing.T, s *Session, want int) {
	t.Helper()
	eventually(t, func() bool { return s.Stats().StreamsOpen == want }, "streams open = %d, want %d", func() []any { return []any{s.Stats().StreamsOpen, want} })
}

func TestHalfClose(t *testing.T) {
	client, server := pair(t, nil, nil)
	st, err := client.OpenStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	st.Write([]byte("request"))
	st.CloseWrite()
	if _, err := st.Write([]byte("more")); !errors.Is(err, ErrWriteClosed) {
		t.Errorf("Write after CloseWrite = %v, want ErrWriteClosed", err)
	}
	ss, err := server.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	req, err := io.ReadAll(ss)
	if err != nil || string(req) != "request" {
		t.Fatalf("server read %q, %v", req, err)
	}
	// The server's direction is still open after the client's ended.
	for i := range 3 {
		if _, err := ss.Write([]byte{byte('a' + i)}); err != nil {
			t.Fatalf("server write after client half-close: %v", err)
		}
	}
	select {
	case <-ss.Done():
		t.Fatal("stream ended while the server's direction was open")
	default:
	}
	ss.CloseWrite()
	resp, err := io.ReadAll(st)
	if err != nil || string(resp) != "abc" {
		t.Fatalf("client read %q, %v", resp, err)
	}
	<-st.Done()
	<-ss.Done()
	if st.Terminal() != nil || ss.Terminal() != nil {
		t.Errorf("terminals %v / %v, want nil", st.Terminal(), ss.Terminal())
	}
}

func TestResetFromEitherSide(t *testing.T) {
	for _, resetter := range []string{"opener", "acceptor"} {
		t.Run(resetter, func(t *testing.T) {
			client, server := pair(t, nil, nil)
			st, _ := client.OpenStream(ctx(t))
			st.Write([]byte("x"))
			ss, err := server.AcceptStream(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			a, b := st, ss
			if resetter == "acceptor" {
				a, b = ss, st
			}
			a.Reset(ResetCancel)
			a.Reset(ResetInternal) // idempotent: the first reset is the terminal
			<-b.Done()
			var se *StreamError
			if !errors.As(b.Terminal(), &se) || se.Code != ResetCancel || !se.Remote {
				t.Fatalf("peer terminal = %v, want remote cancel", b.Terminal())
			}
			if !errors.As(a.Terminal(), &se) || se.Code != ResetCancel || se.Remote {
				t.Fatalf("resetter terminal = %v, want local cancel", a.Terminal())
			}
			if _, err := b.Read(make([]byte, 1)); !errors.As(err, &se) {
				t.Errorf("Read after reset = %v, want *StreamError", err)
			}
			if _, err := b.Write([]byte("y")); !errors.Is(err, ErrStreamReset) {
				t.Errorf("Write after reset = %v, want ErrStreamReset", err)
			}
			waitOpen(t, client, 0)
			waitOpen(t, server, 0)
		})
	}
}

func TestCloseBeforeEOFCancelsPeer(t *testing.T) {
	client, server := pair(t, nil, nil)
	st, _ := client.OpenStream(ctx(t))
	st.Write([]byte("q"))
	ss, _ := server.AcceptStream(ctx(t))
	ss.Write(bytes.Repeat([]byte("z"), 1000)) // response the client no longer wants
	st.Close()
	<-ss.Done()
	var se *StreamError
	if !errors.As(ss.Terminal(), &se) || se.Code != ResetCancel || !se.Remote {
		t.Fatalf("server terminal = %v, want remote cancel", ss.Terminal())
	}
}

func TestUnknownRoleMessageResetsStreamOnly(t *testing.T) {
	client, server := pair(t, nil, nil)
	st, _ := client.OpenStream(ctx(t))
	// An envelope from a newer peer: field 9999 is no body this side knows.
	raw := protowire.AppendTag(nil, 9999, protowire.BytesType)
	raw = protowire.AppendBytes(raw, []byte("future"))
	if _, err := st.reserve(len(raw)); err != nil {
		t.Fatal(err)
	}
	if err := st.enqueue(frameMessage, 0, raw); err != nil {
		t.Fatal(err)
	}
	ss, _ := server.AcceptStream(ctx(t))
	if _, err := ss.ReadMessage(ctx(t)); !errors.Is(err, ErrUnsupportedMessage) {
		t.Fatalf("ReadMessage = %v, want ErrUnsupportedMessage", err)
	}
	<-st.Done()
	var se *StreamError
	if !errors.As(st.Terminal(), &se) || se.Code != ResetUnsupported || !se.Remote {
		t.Fatalf("sender terminal = %v, want remote unsupported", st.Terminal())
	}
	// The session is still up.
	done := echo(t, server)
	st2, err := client.OpenStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	st2.Write([]byte("ok"))
	st2.CloseWrite()
	if b, err := io.ReadAll(st2); err != nil || string(b) != "ok" {
		t.Fatalf("after unsupported message: %q %v", b, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if client.Err() != nil || server.Err() != nil {
		t.Fatalf("session closed: %v / %v", client.Err(), server.Err())
	}
}

func TestLargeMessageFragmentsAndLimits(t *testing.T) {
	client, server := pair(t, nil, &Config{MaxMessageSize: 1 << 20})
	done := echo(t, server)
	st, _ := client.OpenStream(ctx(t))
	big := errEnv(strings.Repeat("0123456789abcdef", (900<<10)/16)) // ~900 KiB: many frames, more than the window
	if err := st.WriteMessage(big); err != nil {
		t.Fatal(err)
	}
	st.CloseWrite()
	got, err := st.ReadMessage(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(big, got, protocmp.Transform()); d != "" {
		t.Fatalf("large message changed (-want +got):\n%.500s", d)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// Over the receiver's limit: the stream is reset, the session stays.
	st2, _ := client.OpenStream(ctx(t))
	huge := errEnv(strings.Repeat("x", 2<<20))
	werr := make(chan error, 1)
	go func() { werr <- st2.WriteMessage(huge) }()
	ss2, err := server.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ss2.ReadMessage(ctx(t)); err == nil {
		t.Fatal("ReadMessage of an oversized message succeeded")
	}
	<-st2.Done()
	var se *StreamError
	if !errors.As(st2.Terminal(), &se) || se.Code != ResetMessageTooLarge || !se.Remote {
		t.Fatalf("sender terminal = %v, want remote message_too_large", st2.Terminal())
	}
	if err := <-werr; !errors.Is(err, ErrStreamReset) {
		t.Errorf("WriteMessage of an oversized message = %v, want a reset", err)
	}
	if server.Err() != nil {
		t.Fatalf("session closed: %v", server.Err())
	}

	// Over the sender's own limit: nothing is sent.
	small, _ := pair(t, &Config{MaxMessageSize: 1024}, nil)
	st3, _ := small.OpenStream(ctx(t))
	if err := st3.WriteMessage(errEnv(strings.Repeat("y", 2048))); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("WriteMessage over own limit = %v, want ErrMessageTooLarge", err)
	}
}

// TestResetRaces resets streams from both sides at once, together with
// data, half-closes and closes, and checks that each side saw exactly one
// terminal per stream.
func TestResetRaces(t *testing.T) {
	client, server := pair(t, nil, nil)
	const n = 200
	var wg sync.WaitGroup
	acceptCtx, stopAccept := context.WithCancel(ctx(t))
	var acceptor, handlers sync.WaitGroup
	acceptor.Go(func() {
		for {
			// Streams the client reset before they were accepted never
			// surface here; they still count as terminals.
			ss, err := server.AcceptStream(acceptCtx)
			if err != nil {
				return
			}
			handlers.Go(func() {
				var inner sync.WaitGroup
				inner.Go(func() { ss.Write([]byte("data")) })
				inner.Go(func() { ss.Reset(ResetCancel) })
				inner.Go(func() { ss.CloseWrite() })
				inner.Wait()
			})
		}
	})
	for i := range n {
		st, err := client.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte("go"))
		wg.Go(func() {
			var inner sync.WaitGroup
			inner.Go(func() { st.Reset(ResetCode(1 + i%2)) })
			inner.Go(func() { st.Reset(ResetCancel) })
			inner.Go(func() { st.Close() })
			inner.Go(func() { io.Copy(io.Discard, st) })
			inner.Wait()
		})
	}
	wg.Wait()
	for _, s := range []*Session{client, server} {
		eventually(t, func() bool { return s.Stats().StreamsEnded >= n }, "%d terminals, want %d",
			func() []any { return []any{s.Stats().StreamsEnded, n} })
	}
	stopAccept()
	acceptor.Wait()
	handlers.Wait()
	for _, s := range []*Session{client, server} {
		// Exactly one terminal per stream: no more than n, and none open.
		if got := s.Stats(); got.StreamsEnded != n || got.StreamsOpen != 0 {
			t.Errorf("client=%v: %d terminals and %d open, want %d and 0", s.IsClient(), got.StreamsEnded, got.StreamsOpen, n)
		}
	}
	if client.Err() != nil || server.Err() != nil {
		t.Fatalf("session closed: %v / %v", client.Err(), server.Err())
	}
}

func TestHandleAndOnAbort(t *testing.T) {
	client, server := pair(t, nil, nil)
	aborted := make(chan struct{})
	server.Handle(func(st *Stream) {
		st.OnAbort(func() { close(aborted) })
		m, err := st.ReadMessage(ctx(t))
		if err != nil {
			return
		}
		st.WriteMessage(m)
		io.Copy(io.Discard, st) // until the client resets
	})
	st, _ := client.OpenStream(ctx(t))
	st.WriteMessage(errEnv("ping"))
	if m, err := st.ReadMessage(ctx(t)); err != nil || m.GetError().GetMessage() != "ping" {
		t.Fatalf("handled stream answered %v %v", m, err)
	}
	st.Reset(ResetCancel)
	<-aborted
	// A hook registered after the abort runs at once; a clean end runs none.
	ran := false
	st.OnAbort(func() { ran = true })
	if !ran {
		t.Fatal("OnAbort after the abort did not run")
	}
	if got := server.Stats().StreamsAccepted; got != 1 {
		t.Fatalf("accepted %d", got)
	}
}

// goid returns the calling goroutine's id, read from its stack header.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := strings.Fields(string(b))
	return f[1] // "goroutine N [running]:"
}

// TestHandleReusesGoroutines checks that handlers run on goroutines kept
// for reuse: one after another, the streams are served by the goroutines
// of the first few (a worker that has counted itself idle but not yet
// started waiting can miss one, so a second may start); after a burst, no
// more than maxIdleWorkers stay waiting; and Close ends them (the
// package's TestMain checks for leaks).
func TestHandleReusesGoroutines(t *testing.T) {
	client, server := pair(t, nil, nil)
	var mu sync.Mutex
	ids := map[string]int{}
	release := make(chan struct{})
	server.Handle(func(st *Stream) {
		mu.Lock()
		ids[goid()]++
		mu.Unlock()
		m, err := st.ReadMessage(ctx(t))
		if err != nil {
			return
		}
		if m.GetError().GetMessage() == "hold" {
			<-release
		}
		st.WriteMessage(m)
		st.CloseWrite()
	})
	ask := func(msg string) {
		st, err := client.OpenStream(ctx(t))
		if err != nil {
			t.Error(err)
			return
		}
		st.WriteMessage(errEnv(msg))
		if _, err := st.ReadMessage(ctx(t)); err != nil {
			t.Error(err)
		}
	}
	for range 20 {
		ask("one at a time")
		// The handler has answered; wait until its goroutine is idle.
		eventually(t, func() bool { return server.idleWorkers.Load() >= 1 }, "idle workers %d, want one at least", func() []any { return []any{server.idleWorkers.Load()} })
	}
	mu.Lock()
	sequential := len(ids)
	mu.Unlock()
	if sequential > 3 {
		t.Fatalf("20 streams one after another ran on %d goroutines; a reused one serves them", sequential)
	}
	const burst = maxIdleWorkers + 36
	var wg sync.WaitGroup
	for range burst {
		wg.Go(func() { ask("hold") })
	}
	handled := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range ids {
			n += c
		}
		return n
	}
	eventually(t, func() bool { return handled() == 20+burst }, "%d handlers ran, want %d", func() []any { return []any{handled(), 20 + burst} })
	close(release)
	wg.Wait()
	eventually(t, func() bool { return server.idleWorkers.Load() == maxIdleWorkers }, "idle workers %d, want %d", func() []any { return []any{server.idleWorkers.Load(), maxIdleWorkers} })
	mu.Lock()
	defer mu.Unlock()
	if len(ids) < burst {
		t.Fatalf("%d concurrent handlers ran on %d goroutines", burst, len(ids))
	}
}

// TestHoldSendsTogether: frames queued under Hold stay off the connection
// while the writer serves other streams, and leave in one write on Flush.
func TestHoldSendsTogether(t *testing.T) {
	client, server := pair(t, nil, nil)
	held, err := client.OpenStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	held.Hold()
	held.WriteMessage(errEnv("head"))
	held.Write([]byte("body"))
	held.WriteMessage(errEnv("end"))
	// Another stream's frames make the writer run a batch; the OPEN of the
	// held stream leaves with it (it is a session frame), its data not.
	other, _ := client.OpenStream(ctx(t))
	other.WriteMessage(errEnv("other"))
	seen := map[string]*Stream{}
	for len(seen) < 2 {
		st, err := server.AcceptStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		seen[fmt.Sprint(st.ID())] = st
	}
	if m, err := seen[fmt.Sprint(other.ID())].ReadMessage(ctx(t)); err != nil || m.GetError().GetMessage() != "other" {
		t.Fatalf("other stream: %v %v", m, err)
	}
	if q := held.Stats().QueuedSend; q == 0 {
		t.Fatal("held frames left before Flush")
	}
	peer := seen[fmt.Sprint(held.ID())]
	if b := peer.Stats().Buffered; b != 0 {
		t.Fatalf("peer holds %d bytes of a held stream", b)
	}
	flushes := client.Stats().Flushes
	held.Flush()
	for _, want := range []string{"head", "body", "end"} {
		if want == "body" {
			b := make([]byte, 4)
			if _, err := io.ReadFull(peer, b); err != nil || string(b) != want {
				t.Fatalf("body %q %v", b, err)
			}
			continue
		}
		if m, err := peer.ReadMessage(ctx(t)); err != nil || m.GetError().GetMessage() != want {
			t.Fatalf("want %s: %v %v", want, m, err)
		}
	}
	if got := client.Stats().Flushes - flushes; got != 1 {
		t.Fatalf("held frames took %d writes, want 1", got)
	}
	// After Flush, frames leave as they come.
	held.WriteMessage(errEnv("later"))
	if m, err := peer.ReadMessage(ctx(t)); err != nil || m.GetError().GetMessage() != "later" {
		t.Fatalf("after Flush: %v %v", m, err)
	}
}

// TestQuietSessionWritesInline: with one stream open (the quiet case) a
// held group of frames is on the connection when Flush returns, written
// by the caller; with more streams open the writer goroutine takes
// writes, and every frame still arrives, in order, whichever goroutine
// wrote it.
func TestQuietSessionWritesInline(t *testing.T) {
	client, server := pair(t, nil, nil)
	st, err := client.OpenStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		before := client.Stats().Flushes
		st.Hold()
		if _, err := st.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		st.Flush()
		if got := client.Stats().Flushes - before; got != 1 {
			t.Fatalf("group %d: %d flushes done when Flush returned, want 1", i, got)
		}
		if st.openUnsent.Load() {
			// A reader waiting now would wake the writer for nothing.
			t.Fatalf("group %d: OPEN written, yet still counted as unsent", i)
		}
	}
	// Two more streams: the session is busy now, and writes from several
	// goroutines mix with the first stream's.
	var busy []*Stream
	for range 2 {
		b, err := client.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		busy = append(busy, b)
	}
	var wg sync.WaitGroup
	for _, b := range append(busy, st) {
		wg.Go(func() {
			for i := 20; i < 220; i++ {
				b.Write([]byte{byte(i)})
			}
			b.CloseWrite()
		})
	}
	wg.Wait()
	for range 3 {
		peer, err := server.AcceptStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(peer)
		if err != nil {
			t.Fatal(err)
		}
		from := 20
		if peer.ID() == st.ID() {
			from = 0
		}
		if len(got) != 220-from {
			t.Fatalf("stream %d: %d bytes, want %d", peer.ID(), len(got), 220-from)
		}
		for i, c := range got {
			if c != byte(from+i) {
				t.Fatalf("stream %d: byte %d is %d, want %d", peer.ID(), i, c, byte(from+i))
			}
		}
	}
}

// TestHoldFlushesForCredit: a held stream that runs out of send credit
// flushes instead of waiting on its own queue.
func TestHoldFlushesForCredit(t *testing.T) {
	client, server := pair(t, nil, nil)
	st, _ := client.OpenStream(ctx(t))
	st.Hold()
	big := bytes.Repeat([]byte("x"), 4*int(DefaultStreamWindow))
	done := make(chan error, 1)
	go func() {
		_, err := st.Write(big)
		if err == nil {
			err = st.CloseWrite()
		}
		done <- err
	}()
	peer, err := server.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(peer)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOpenLeavesWithFirstFrameOrRead: a new stream's OPEN shares the first
// frame's write, and a stream whose opener waits to read first is still
// announced to the peer.
func TestOpenLeavesWithFirstFrameOrRead(t *testing.T) {
	client, server := pair(t, nil, nil)
	flushes := client.Stats().Flushes
	st, _ := client.OpenStream(ctx(t))
	st.WriteMessage(errEnv("first"))
	peer, err := server.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := peer.ReadMessage(ctx(t)); err != nil || m.GetError().GetMessage() != "first" {
		t.Fatalf("%v %v", m, err)
	}
	if got := client.Stats().Flushes - flushes; got != 1 {
		t.Fatalf("OPEN and first frame took %d writes, want 1", got)
	}

	quiet, _ := client.OpenStream(ctx(t))
	go func() {
		p, err := server.AcceptStream(ctx(t))
		if err == nil {
			p.WriteMessage(errEnv("you called?"))
		}
	}()
	if m, err := quiet.ReadMessage(ctx(t)); err != nil || m.GetError().GetMessage() != "you called?" {
		t.Fatalf("a stream opened to read was never announced: %v %v", m, err)
	}
}

// TestDecodedMessageOwnsItsBytes guards what ReadMessage relies on to
// decode from a pooled buffer: the envelope keeps no reference to the
// input, so overwriting the buffer after decoding (its next use) leaves
// every string, bytes and unknown field intact.
func TestDecodedMessageOwnsItsBytes(t *testing.T) {
	want := &iopv1.Envelope{Body: &iopv1.Envelope_ProviderTunnelRequest{ProviderTunnelRequest: &iopv1.ProviderTunnelRequest{
		ProviderId: "p", Method: "POST", Path: "/v1/chat/completions", Body: []byte(`{"model":"m"}`), InlineBody: true,
		Headers: []*iopv1.Header{{Name: "Content-Type", Value: "application/json"}},
	}}}
	b, err := proto.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	b = protowire.AppendTag(b, 9999, protowire.BytesType) // an unknown field
	b = protowire.AppendBytes(b, []byte("from a newer peer"))
	var st Stream
	got, err := st.decode(b)
	if err != nil {
		t.Fatal(err)
	}
	snapshot := proto.Clone(got)
	for i := range b {
		b[i] = 0xAA
	}
	if diff := cmp.Diff(snapshot, got, protocmp.Transform()); diff != "" {
		t.Fatalf("overwriting the input changed the decoded message (-before +after):\n%s", diff)
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Fatal("unknown field not kept; the test no longer covers it")
	}
}

// TestReadTakesEveryBufferedFrame: one Read returns all the DATA frames
// that arrived, up to its buffer, and stops at a message.
func TestReadTakesEveryBufferedFrame(t *testing.T) {
	client, server := pair(t, nil, nil)
	st, err := client.OpenStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"data: a\n\n", "data: b\n\n", "data: c\n\n"} {
		// Each its own frame: a write queued behind a frame not yet
		// written would join it.
		st.Hold()
		if _, err := st.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		st.Flush()
	}
	msg := &iopv1.Envelope{Body: &iopv1.Envelope_ProviderTunnelRequest{ProviderTunnelRequest: &iopv1.ProviderTunnelRequest{Path: "/x"}}}
	if err := st.WriteMessage(msg); err != nil {
		t.Fatal(err)
	}
	st.Write([]byte("tail"))
	st.CloseWrite()
	peer, err := server.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	finished := func() bool {
		peer.mu.Lock()
		defer peer.mu.Unlock()
		return peer.recvFin
	}
	eventually(t, finished, "the stream's frames never all arrived", func() []any { return nil })
	buf := make([]byte, 64)
	n, err := peer.Read(buf)
	if err != nil || string(buf[:n]) != "data: a\n\ndata: b\n\ndata: c\n\n" {
		t.Fatalf("first read: %q, %v; want the three frames", buf[:n], err)
	}
	if _, err := peer.Read(buf[:1]); !errors.Is(err, ErrMessageNext) {
		t.Fatalf("read before the message: %v, want ErrMessageNext", err)
	}
	if _, err := peer.ReadMessage(ctx(t)); err != nil {
		t.Fatal(err)
	}
	// A buffer shorter than what is here takes a part; the rest stays.
	n, _ = peer.Read(buf[:2])
	m, _ := peer.Read(buf[2:])
	if got := string(buf[:n+m]); n != 2 || got != "tail" {
		t.Fatalf("after the message: %q in reads of %d and %d bytes, want \"tail\" as 2 + 2", got, n, m)
	}
	if _, err := peer.Read(buf); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
	if got := peer.Stats().Buffered; got != 0 {
		t.Fatalf("%d bytes of credit not returned", got)
	}
}

// TestWriteAfterResetFails: once Done reports a reset, Write and CloseWrite
// return the terminal, even while the reset's clean-up of the send side
// may still be running on the session's reader.
func TestWriteAfterResetFails(t *testing.T) {
	client, server := pair(t, nil, nil)
	for i := range 200 {
		st, err := client.OpenStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		st.Write([]byte("x"))
		ss, err := server.AcceptStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		st.Reset(ResetCancel)
		<-ss.Done()
		if _, err := ss.Write([]byte("y")); !errors.Is(err, ErrStreamReset) {
			t.Fatalf("round %d: Write after reset = %v, want ErrStreamReset", i, err)
		}
		if err := ss.CloseWrite(); !errors.Is(err, ErrStreamReset) {
			t.Fatalf("round %d: CloseWrite after reset = %v, want ErrStreamReset", i, err)
		}
	}
}
