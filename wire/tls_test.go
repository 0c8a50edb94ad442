package wire

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/internal/testpki"
)

// tlsPair dials and accepts over real TLS on loopback. It returns the
// client session (or error) and the server's error channel.
func tlsPair(t *testing.T, clientTLS, serverTLS *tls.Config) (*Session, error, *Session, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		s   *Session
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			ch <- res{nil, err}
			return
		}
		s, err := Accept(context.Background(), c, serverTLS, &Config{HandshakeTimeout: 5 * time.Second})
		ch <- res{s, err}
	}()
	c, cerr := Dial(ctx(t), "tcp", ln.Addr().String(), clientTLS, nil)
	r := <-ch
	for _, s := range []*Session{c, r.s} {
		if s != nil {
			t.Cleanup(func() { s.Close() })
		}
	}
	return c, cerr, r.s, r.err
}

func TestTLS(t *testing.T) {
	ca := testpki.NewCA(t, "edge ca")
	other := testpki.NewCA(t, "other ca")
	serverCert := ca.Issue(t, testpki.Leaf{})
	nodeCert := ca.Issue(t, testpki.Leaf{URIs: []string{"spiffe://iop.test/node/n1"}})
	foreignCert := other.Issue(t, testpki.Leaf{URIs: []string{"spiffe://iop.test/node/n1"}})
	expiredCert := ca.Issue(t, testpki.Leaf{NotAfter: time.Now().Add(-time.Hour)})
	elsewhereCert := ca.Issue(t, testpki.Leaf{DNSNames: []string{"edge.example"}})

	serverTLS := &tls.Config{Certificates: []tls.Certificate{serverCert}}
	mutualTLS := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.Pool}
	client := func(certs ...tls.Certificate) *tls.Config {
		return &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", Certificates: certs}
	}

	t.Run("server auth", func(t *testing.T) {
		c, cerr, s, serr := tlsPair(t, client(), serverTLS)
		if cerr != nil || serr != nil {
			t.Fatalf("dial %v / accept %v", cerr, serr)
		}
		state, ok := c.ConnectionState()
		if !ok || state.Version != tls.VersionTLS13 || state.NegotiatedProtocol != ALPN {
			t.Fatalf("tls state: ok=%v version=%x alpn=%q", ok, state.Version, state.NegotiatedProtocol)
		}
		done := echo(t, s)
		st, _ := c.OpenStream(ctx(t))
		st.Write([]byte("over tls"))
		st.CloseWrite()
		if b, err := io.ReadAll(st); err != nil || string(b) != "over tls" {
			t.Fatalf("%q %v", b, err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("server name from the address", func(t *testing.T) {
		// No ServerName: the address's host (127.0.0.1) is verified, as
		// tls.Dial does.
		_, cerr, _, serr := tlsPair(t, &tls.Config{RootCAs: ca.Pool}, serverTLS)
		if cerr != nil || serr != nil {
			t.Fatalf("dial %v / accept %v", cerr, serr)
		}
	})
	t.Run("mutual", func(t *testing.T) {
		_, cerr, s, serr := tlsPair(t, client(nodeCert), mutualTLS)
		if cerr != nil || serr != nil {
			t.Fatalf("dial %v / accept %v", cerr, serr)
		}
		state, _ := s.ConnectionState()
		if len(state.PeerCertificates) == 0 || state.PeerCertificates[0].URIs[0].String() != "spiffe://iop.test/node/n1" {
			t.Fatalf("server did not see the node identity: %v", state.PeerCertificates)
		}
	})
	refused := []struct {
		name   string
		client *tls.Config
		server *tls.Config
	}{
		{"mutual without a client certificate", client(), mutualTLS},
		{"client certificate from another CA", client(foreignCert), mutualTLS},
		{"expired client certificate", client(expiredCert), mutualTLS},
		{"server from an unknown CA", &tls.Config{RootCAs: other.Pool, ServerName: "localhost"}, serverTLS},
		{"server certificate for another name", &tls.Config{RootCAs: ca.Pool}, &tls.Config{Certificates: []tls.Certificate{elsewhereCert}}},
		{"TLS 1.2 client", &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", MaxVersion: tls.VersionTLS12}, serverTLS},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			if tc.client.MaxVersion == tls.VersionTLS12 {
				// Dial forces TLS 1.3 as the minimum; a client capped at 1.2
				// cannot even be built through it, so drive tls directly.
				ln, _ := net.Listen("tcp", "127.0.0.1:0")
				defer ln.Close()
				errc := make(chan error, 1)
				go func() {
					c, err := ln.Accept()
					if err != nil {
						errc <- err
						return
					}
					_, err = Accept(context.Background(), c, tc.server, nil)
					errc <- err
				}()
				conn, err := tls.Dial("tcp", ln.Addr().String(), tc.client)
				if err == nil {
					conn.Close()
				}
				if err := <-errc; err == nil {
					t.Fatal("server accepted a TLS 1.2 client")
				}
				return
			}
			c, cerr, s, serr := tlsPair(t, tc.client, tc.server)
			if serr == nil && cerr == nil {
				t.Fatalf("session established: %v %v", c, s)
			}
			if serr == nil && s != nil {
				// In TLS 1.3 the client may finish before the server
				// rejects its certificate; the session must still die.
				closeErrOf(t, s)
			}
		})
	}
	t.Run("wrong ALPN", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// A TLS server that knows no ALPN completes the handshake
			// without choosing a protocol.
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{serverCert}})
			tc.Handshake()
			io.Copy(io.Discard, tc)
			tc.Close()
		}()
		_, err := Dial(ctx(t), "tcp", ln.Addr().String(), client(), nil)
		if !errors.Is(err, ErrALPN) {
			t.Fatalf("Dial = %v, want ErrALPN", err)
		}
	})
	t.Run("server config forces client auth when CAs are set", func(t *testing.T) {
		c := TLSServerConfig(&tls.Config{ClientCAs: ca.Pool})
		if c.ClientAuth != tls.RequireAndVerifyClientCert || c.MinVersion != tls.VersionTLS13 {
			t.Fatalf("ClientAuth %v MinVersion %x", c.ClientAuth, c.MinVersion)
		}
	})
}

// TestBulkStreamsWithoutWritev: streams of every frame size, several at
// once, cross intact where a batch cannot leave in one writev (TLS, and an
// in-process pipe) and is gathered into one buffer instead: small frames
// copied, large ones referenced, in the order queued.
func TestBulkStreamsWithoutWritev(t *testing.T) {
	ca := testpki.NewCA(t, "bulk ca")
	cert := ca.Issue(t, testpki.Leaf{})
	for name, open := range map[string]func(t *testing.T) (*Session, *Session){
		"tls": func(t *testing.T) (*Session, *Session) {
			c, cerr, s, serr := tlsPair(t, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}, &tls.Config{Certificates: []tls.Certificate{cert}})
			if cerr != nil || serr != nil {
				t.Fatalf("dial %v / accept %v", cerr, serr)
			}
			return c, s
		},
		"pipe": pipeSessions,
	} {
		t.Run(name, func(t *testing.T) {
			client, server := open(t)
			if client.writev || server.writev {
				t.Fatal("this session writes with writev; the test is for those that cannot")
			}
			var srv sync.WaitGroup
			defer srv.Wait()
			srv.Go(func() {
				for {
					st, err := server.AcceptStream(context.Background())
					if err != nil {
						return
					}
					srv.Go(func() {
						if _, err := io.Copy(st, st); err != nil {
							t.Errorf("echo: %v", err)
						}
						st.CloseWrite()
					})
				}
			})
			const streams = 6
			var wg sync.WaitGroup
			for i := range streams {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(i), 7))
					payload := make([]byte, 1<<20+rng.IntN(1<<16))
					for j := range payload {
						payload[j] = byte(rng.Uint32())
					}
					st, err := client.OpenStream(ctx(t))
					if err != nil {
						t.Error(err)
						return
					}
					// A corrupted batch may leave the peer waiting for bytes
					// that never come: fail, do not hang.
					st.SetDeadline(time.Now().Add(30 * time.Second))
					got := make(chan []byte, 1)
					go func() {
						b, err := io.ReadAll(st)
						if err != nil {
							t.Errorf("stream %d: read: %v", i, err)
						}
						got <- b
					}()
					for rest := payload; len(rest) > 0; {
						// From single bytes to more than a frame: every path
						// through the batch.
						n := min(len(rest), []int{1, 100, 3 << 10, 4 << 10, 20 << 10, 70 << 10}[rng.IntN(6)])
						if _, err := st.Write(rest[:n]); err != nil {
							t.Errorf("stream %d: write: %v", i, err)
							st.Reset(ResetCancel)
							<-got // the reader ends with the reset
							return
						}
						rest = rest[n:]
					}
					st.CloseWrite()
					if b := <-got; !bytes.Equal(b, payload) {
						t.Errorf("stream %d: %d bytes back of %d, equal %v", i, len(b), len(payload), bytes.Equal(b, payload))
					}
				})
			}
			wg.Wait()
			client.Close()
		})
	}
}
