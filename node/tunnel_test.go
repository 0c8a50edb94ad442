package node

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/iop-dev/iop/wire"
)

// linkedStream opens a stream on a session pair over loopback TCP and
// returns the Node's end, its session, and the Edge's end, accepted once
// the stream's OPEN (which leaves with its first frame) arrives.
func linkedStream(t *testing.T) (*wire.Stream, *wire.Session, func() *wire.Stream) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan *wire.Session, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		s, _ := wire.Server(c, nil)
		accepted <- s
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nodeSess, err := wire.Client(c, nil)
	edgeSess := <-accepted
	if edgeSess != nil {
		t.Cleanup(func() { edgeSess.Close() })
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nodeSess.Close() })
	if edgeSess == nil {
		t.Fatal("no server session")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	st, err := nodeSess.OpenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st, nodeSess, func() *wire.Stream {
		peer, err := edgeSess.AcceptStream(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return peer
	}
}

func sseHeader() http.Header { return http.Header{"Content-Type": {"text/event-stream"}} }

// readHead reads the tunnel's response head at the Edge's end and checks
// its status.
func readHead(t *testing.T, peer *wire.Stream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := peer.ReadMessage(ctx)
	if err != nil || m.GetProviderTunnelResponse().GetStatus() != 200 {
		t.Fatalf("head: %v %v", m, err)
	}
}

// TestStreamedHeadLeavesWithFirstBytes: an event stream's head waits for
// its first body bytes and leaves with them, in one write. (The hold is
// long here, so that a slow test machine cannot let it expire first; the
// write may be the caller's or the writer goroutine's, whichever holds
// the connection, and is counted once the peer has read it.)
func TestStreamedHeadLeavesWithFirstBytes(t *testing.T) {
	st, sess, accept := linkedStream(t)
	w := &tunnelWriter{st: st, hold: time.Minute}
	before := sess.Stats().Flushes
	if err := w.WriteHead(200, sseHeader()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("data: {}\n\n")); err != nil {
		t.Fatal(err)
	}
	peer := accept()
	readHead(t, peer)
	b := make([]byte, 10)
	if _, err := io.ReadFull(peer, b); err != nil || string(b) != "data: {}\n\n" {
		t.Fatalf("body %q %v", b, err)
	}
	if got := sess.Stats().Flushes - before; got != 1 {
		t.Fatalf("head and first bytes took %d writes, want 1", got)
	}
}

// TestStreamedHeadLeavesAloneWhenBodyIsSlow: a provider slow to its first
// event still has its head passed on, after headHold.
func TestStreamedHeadLeavesAloneWhenBodyIsSlow(t *testing.T) {
	st, _, accept := linkedStream(t)
	w := &tunnelWriter{st: st}
	if err := w.WriteHead(200, sseHeader()); err != nil {
		t.Fatal(err)
	}
	peer := accept()
	readHead(t, peer)
	// Later bytes leave as they come.
	if _, err := w.Write([]byte("late")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if _, err := io.ReadFull(peer, b); err != nil || string(b) != "late" {
		t.Fatalf("body %q %v", b, err)
	}
	w.finish(nil)
}
