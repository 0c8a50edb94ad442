package wire

import (
	"bytes"
	"crypto/sha256"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStalledReaderHoldsOneWindow checks the two properties a multiplexer
// most often gets wrong: a stream whose reader has stopped buffers at most
// one window (the session reader never blocks on it), and it does not stop
// other streams or the heartbeat.
func TestStalledReaderHoldsOneWindow(t *testing.T) {
	// The heartbeat check needs a ping queued while the writer is
	// flushing, which takes a second P: with one (go test -cpu 1, a
	// one-core machine) the pinger runs only once the writer has parked.
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	const window = 128 << 10
	cfg := &Config{StreamWindow: window}
	client, server := pair(t, cfg, cfg)

	// Stream A: the client writes without end; the server never reads.
	stalled, _ := client.OpenStream(ctx(t))
	stalledWrote := make(chan int, 1)
	go func() {
		chunk := bytes.Repeat([]byte("s"), 8<<10)
		total := 0
		for {
			n, err := stalled.Write(chunk)
			total += n
			if err != nil {
				stalledWrote <- total
				return
			}
		}
	}()
	sa, err := server.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return sa.Stats().Buffered > window-maxChunk },
		"stalled stream buffered %d, want it to fill its window", func() []any { return []any{sa.Stats().Buffered} })

	// Stream B moves 64 MiB while A is stalled.
	const total = 64 << 20
	bulk, _ := client.OpenStream(ctx(t))
	var sent [32]byte
	var wg sync.WaitGroup
	wg.Go(func() {
		h := sha256.New()
		buf := make([]byte, 32<<10)
		for i := range buf {
			buf[i] = byte(i * 7)
		}
		for n := 0; n < total; n += len(buf) {
			buf[0] = byte(n >> 15)
			h.Write(buf)
			if _, err := bulk.Write(buf); err != nil {
				t.Error(err)
				return
			}
		}
		bulk.CloseWrite()
		copy(sent[:], h.Sum(nil))
	})
	sb, err := server.AcceptStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	// Heartbeat round trips in both directions, all through the transfer.
	var pings atomic.Int64
	stopPing := make(chan struct{})
	var pinger sync.WaitGroup
	for _, sess := range []*Session{client, server} {
		pinger.Go(func() {
			for {
				select {
				case <-stopPing:
					return
				default:
				}
				if _, err := sess.Ping(ctx(t)); err != nil {
					t.Error(err)
					return
				}
				pings.Add(1)
			}
		})
	}
	h := sha256.New()
	var maxBuffered int
	buf := make([]byte, 64<<10)
	var got int
	for {
		n, err := sb.Read(buf)
		h.Write(buf[:n])
		got += n
		maxBuffered = max(maxBuffered, sa.Stats().Buffered)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	close(stopPing)
	pinger.Wait()
	wg.Wait()
	if got != total || !bytes.Equal(h.Sum(nil), sent[:]) {
		t.Fatalf("bulk stream delivered %d bytes (hash match %v), want %d", got, bytes.Equal(h.Sum(nil), sent[:]), total)
	}
	if maxBuffered > window {
		t.Errorf("stalled stream buffered %d bytes, more than its window %d", maxBuffered, window)
	}
	if pings.Load() < 20 {
		t.Errorf("only %d heartbeat round trips during the bulk transfer", pings.Load())
	}
	// Control frames jump the data queue: a heartbeat waits behind at most
	// the one batch (two chunks) being flushed when it was queued.
	const twoChunks = 2 * (headerSize + maxChunk)
	for _, s := range []*Session{client, server} {
		if ahead := s.Stats().MaxBytesAheadOfHeartbeat; ahead > twoChunks {
			t.Errorf("client=%v: a heartbeat waited behind %d bytes of stream frames, want <= %d (two chunks)", s.IsClient(), ahead, twoChunks)
		}
	}
	if client.Stats().MaxBytesAheadOfHeartbeat == 0 {
		t.Errorf("no heartbeat was ever queued behind bulk data; the check above proved nothing")
	}

	// The stalled stream still works once read: everything it buffered is
	// delivered, in order.
	stalled.SetWriteDeadline(time.Now()) // stop the endless writer
	n := <-stalledWrote
	stalled.CloseWrite()
	rest, err := io.ReadAll(sa)
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != n || bytes.Count(rest, []byte("s")) != n {
		t.Fatalf("stalled stream delivered %d bytes, writer queued %d", len(rest), n)
	}
}

// TestSlowReaderNoHeadOfLineBlocking: one stream consumed slowly, many
// others complete meanwhile.
func TestSlowReaderNoHeadOfLineBlocking(t *testing.T) {
	client, server := pair(t, nil, nil)
	slow, _ := client.OpenStream(ctx(t))
	var writer sync.WaitGroup
	writer.Go(func() { slow.Write(bytes.Repeat([]byte("z"), 1<<20)) }) // blocks on credit
	defer writer.Wait()
	defer slow.Reset(ResetCancel)
	ss, _ := server.AcceptStream(ctx(t))
	// Read slowly: a little now and then while the others run.
	var reader sync.WaitGroup
	stopReading := make(chan struct{})
	reader.Go(func() {
		b := make([]byte, 1)
		for {
			select {
			case <-stopReading:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if _, err := ss.Read(b); err != nil {
				return
			}
		}
	})
	defer reader.Wait()
	defer close(stopReading)
	const others = 50
	var wg sync.WaitGroup
	for range others {
		wg.Go(func() {
			st, err := server.OpenStream(ctx(t))
			if err != nil {
				t.Error(err)
				return
			}
			st.Write(bytes.Repeat([]byte("o"), 100<<10))
			st.CloseWrite()
		})
	}
	for range others {
		cs, err := client.AcceptStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(cs)
		if err != nil || len(b) != 100<<10 {
			t.Fatalf("other stream: %d bytes, %v", len(b), err)
		}
	}
	wg.Wait()
	if b := ss.Stats().Buffered; b > DefaultStreamWindow {
		t.Errorf("slow stream buffered %d > window", b)
	}
}
