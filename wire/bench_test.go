package wire

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/internal/testpki"
)

// Benchmarks compare the session against the connection it runs on, in the
// same run. Run them with:
//
//	go test -run '^$' -bench . -benchtime 2s ./wire
//
// BenchmarkIdleMemory reports bytes per idle session and stream; use
// -benchtime 1x for it.

const benchChunk = 32 << 10

// tcpConns returns both ends of a loopback TCP connection, optionally TLS.
func tcpConns(b *testing.B, useTLS bool) (client, server net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	s := <-ch
	if !useTLS {
		return c, s
	}
	tc, ts := tlsConfigs(b)
	cc := tls.Client(c, TLSClientConfig(tc))
	sc := tls.Server(s, TLSServerConfig(ts))
	errc := make(chan error, 1)
	go func() { errc <- sc.Handshake() }()
	if err := cc.Handshake(); err != nil {
		b.Fatal(err)
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return cc, sc
}

func tlsConfigs(b testing.TB) (client, server *tls.Config) {
	ca := testpki.NewCA(b, "bench")
	cert := ca.Issue(b, testpki.Leaf{})
	return &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}, &tls.Config{Certificates: []tls.Certificate{cert}}
}

func sessionsOver(b *testing.B, c, s net.Conn) (*Session, *Session) {
	ch := make(chan *Session, 1)
	go func() {
		ss, err := Server(s, nil)
		if err != nil {
			b.Error(err)
		}
		ch <- ss
	}()
	cs, err := Client(c, nil)
	if err != nil {
		b.Fatal(err)
	}
	return cs, <-ch
}

// echoSessions returns the client end of a session pair whose server end
// answers each stream's message with the same message, then ends the
// stream: on a goroutine per stream when perStream, else one stream at a
// time; with hold, message and FIN leave in one frame (Stream.Hold). Both
// ends close, and the server's goroutines are waited for, when b ends.
func echoSessions(b *testing.B, useTLS, perStream, hold bool) *Session {
	c, s := tcpConns(b, useTLS)
	cs, ss := sessionsOver(b, c, s)
	var srv sync.WaitGroup
	b.Cleanup(srv.Wait) // runs last: after the sessions close below
	b.Cleanup(func() { cs.Close() })
	b.Cleanup(func() { ss.Close() })
	answer := func(st *Stream) {
		m, err := st.ReadMessage(context.Background())
		if err != nil {
			return
		}
		if hold {
			st.Hold()
		}
		st.WriteMessage(m)
		st.CloseWrite()
		io.Copy(io.Discard, st)
	}
	srv.Go(func() {
		for {
			st, err := ss.AcceptStream(context.Background())
			if err != nil {
				return
			}
			if perStream {
				srv.Go(func() { answer(st) })
			} else {
				answer(st)
			}
		}
	})
	return cs
}

// BenchmarkThroughput moves b.N chunks of 32 KiB one way: over a raw
// connection (the baseline) and over one stream of a session on the same
// kind of connection.
func BenchmarkThroughput(b *testing.B) {
	for _, useTLS := range []bool{false, true} {
		name := "plain"
		if useTLS {
			name = "tls"
		}
		b.Run(name+"/raw", func(b *testing.B) {
			c, s := tcpConns(b, useTLS)
			defer c.Close()
			defer s.Close()
			runThroughput(b, c, s)
		})
		b.Run(name+"/session", func(b *testing.B) {
			c, s := tcpConns(b, useTLS)
			cs, ss := sessionsOver(b, c, s)
			defer cs.Close()
			defer ss.Close()
			st, err := cs.OpenStream(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			st.Write([]byte{0}) // make the stream known to the acceptor
			rs, err := ss.AcceptStream(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			io.ReadFull(rs, make([]byte, 1))
			runThroughput(b, st, rs)
		})
	}
}

func runThroughput(b *testing.B, w io.Writer, r io.Reader) {
	buf := make([]byte, benchChunk)
	b.SetBytes(benchChunk)
	b.ReportAllocs()
	done := make(chan error, 1)
	want := int64(b.N) * benchChunk
	go func() {
		rb := make([]byte, 64<<10)
		var got int64
		for got < want {
			n, err := r.Read(rb)
			got += int64(n)
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	b.ResetTimer()
	for range b.N {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConcurrentRequests runs 1,000 concurrent request/response
// exchanges (a 128-byte message each way on its own stream) per op, and
// reports exchanges per second and the p99 exchange latency.
func BenchmarkConcurrentRequests(b *testing.B) {
	for _, useTLS := range []bool{false, true} {
		name := "plain"
		if useTLS {
			name = "tls"
		}
		b.Run(name, func(b *testing.B) {
			cs := echoSessions(b, useTLS, true, false)
			const conc = 1000
			req := errEnv(string(make([]byte, 128)))
			lat := make([]time.Duration, 0, conc*b.N)
			var mu sync.Mutex
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				var wg sync.WaitGroup
				for range conc {
					wg.Go(func() {
						t0 := time.Now()
						st, err := cs.OpenStream(context.Background())
						if err != nil {
							b.Error(err)
							return
						}
						st.WriteMessage(req)
						st.CloseWrite()
						if _, err := st.ReadMessage(context.Background()); err != nil {
							b.Error(err)
							return
						}
						io.Copy(io.Discard, st)
						d := time.Since(t0)
						mu.Lock()
						lat = append(lat, d)
						mu.Unlock()
					})
				}
				wg.Wait()
			}
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "exchanges/s")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-us")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
		})
	}
}

// BenchmarkSequentialRequests runs request/response exchanges one at a
// time (a 128-byte message each way on its own stream), the way a lone
// client's requests cross a quiet link; an op is one exchange.
func BenchmarkSequentialRequests(b *testing.B) {
	cs := echoSessions(b, false, false, true)
	req := errEnv(string(make([]byte, 128)))
	b.ReportAllocs()
	for b.Loop() {
		st, err := cs.OpenStream(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		st.Hold()
		st.WriteMessage(req)
		st.CloseWrite()
		if _, err := st.ReadMessage(context.Background()); err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, st)
	}
}

// BenchmarkIdleMemory opens 500 idle plaintext session pairs on loopback,
// then 10,000 idle streams on one of them, and reports the Go memory each
// costs (HeapInuse + StackInuse after GC), both ends together.
func BenchmarkIdleMemory(b *testing.B) {
	for range b.N {
		const sessions = 500
		base := inuse()
		var pairs [][2]*Session
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		for range sessions {
			ch := make(chan *Session, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					ch <- nil
					return
				}
				s, _ := Server(c, nil)
				ch <- s
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			cs, err := Client(conn, nil)
			if err != nil {
				b.Fatal(err)
			}
			pairs = append(pairs, [2]*Session{cs, <-ch})
		}
		ln.Close()
		perSession := float64(inuse()-base) / sessions

		for _, p := range pairs {
			p[0].Close()
			p[1].Close()
		}

		const streams = 10000
		many := &Config{MaxStreams: 2 * streams, AcceptBacklog: 2 * streams}
		c, srv := net.Pipe()
		sch := make(chan *Session, 1)
		go func() {
			s, _ := Server(srv, many)
			sch <- s
		}()
		cs, err := Client(c, many)
		if err != nil {
			b.Fatal(err)
		}
		ss := <-sch
		base = inuse()
		var held []*Stream
		for range streams {
			st, err := cs.OpenStream(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, st)
		}
		for range streams {
			st, err := ss.AcceptStream(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, st)
		}
		perStream := float64(inuse()-base) / streams
		b.ReportMetric(perSession, "B/idle-session-pair")
		b.ReportMetric(perStream, "B/idle-stream-both-ends")
		runtime.KeepAlive(held)
		cs.Close()
		ss.Close()
	}
}

func inuse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}
