package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// countingServer is a real net/http server that counts the connections
// it accepted.
func countingServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func newClient(t *testing.T, tr *Transport) *http.Client {
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

func TestExchangesWithNetHTTPServer(t *testing.T) {
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Len", fmt.Sprint(r.ContentLength))
			w.Header().Set("X-Te", strings.Join(r.TransferEncoding, ","))
			w.Header().Set("X-Auth", r.Header.Get("Authorization"))
			w.Write(b)
		case "/chunked":
			f := w.(http.Flusher)
			for i := range 3 {
				fmt.Fprintf(w, "part%d;", i)
				f.Flush()
			}
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/query":
			io.WriteString(w, r.URL.RawQuery+" "+r.Method+" "+r.Host)
		default:
			http.NotFound(w, r)
		}
	}))
	c := newClient(t, &Transport{})

	// Known length, one request.
	resp, err := c.Post(srv.URL+"/echo", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "hello" || resp.Header.Get("X-Len") != "5" || resp.ContentLength != 5 {
		t.Fatalf("echo: %q len %s cl %d", got, resp.Header.Get("X-Len"), resp.ContentLength)
	}

	// Unknown length goes chunked, and a large body arrives whole.
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/echo", io.MultiReader(bytes.NewReader(big)))
	req.Header.Set("Authorization", "Bearer k")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != string(big) || resp.Header.Get("X-Te") != "chunked" || resp.Header.Get("X-Auth") != "Bearer k" {
		t.Fatalf("chunked echo: %d bytes, te %q auth %q", len(got), resp.Header.Get("X-Te"), resp.Header.Get("X-Auth"))
	}

	// A chunked answer, flushed in parts.
	resp, err = c.Get(srv.URL + "/chunked")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "part0;part1;part2;" || resp.ContentLength != -1 || len(resp.TransferEncoding) != 1 {
		t.Fatalf("chunked: %q cl %d te %v", got, resp.ContentLength, resp.TransferEncoding)
	}

	// No body: 204, and HEAD.
	resp, err = c.Get(srv.URL + "/empty")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "" || resp.StatusCode != 204 {
		t.Fatalf("204: %q %d", got, resp.StatusCode)
	}
	resp, err = c.Head(srv.URL + "/query?a=1")
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "" || resp.StatusCode != 200 {
		t.Fatalf("HEAD: %q %d", got, resp.StatusCode)
	}
	resp, err = c.Get(srv.URL + "/query?a=1&b=%20")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := readAll(t, resp), "a=1&b=%20 GET "+strings.TrimPrefix(srv.URL, "http://"); got != want {
		t.Fatalf("query: %q, want %q", got, want)
	}
	resp, err = c.Get(srv.URL + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 404 || resp.Status != "404 Not Found" || resp.Proto != "HTTP/1.1" {
		t.Fatalf("404: %q %q", resp.Status, resp.Proto)
	}

	// Every exchange above, read to its end, kept the one connection.
	if n := conns.Load(); n != 1 {
		t.Fatalf("server accepted %d connections for sequential exchanges, want 1", n)
	}
}

func TestConcurrentExchangesShareThePool(t *testing.T) {
	srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	c := newClient(t, &Transport{MaxIdleConnsPerHost: 8})
	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				msg := fmt.Sprintf("w%d-%d", w, i)
				resp, err := c.Post(srv.URL, "text/plain", strings.NewReader(msg))
				if err != nil {
					errs <- err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != msg {
					errs <- fmt.Errorf("got %q, %v; want %q", b, err, msg)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := conns.Load(); n > workers {
		t.Fatalf("%d connections for %d workers: the pool did not reuse", n, workers)
	}
}

// scripted is a raw TCP server: each accepted connection runs serve.
func scripted(t *testing.T, serve func(n int, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns []net.Conn
	var mu sync.Mutex
	wg.Go(func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(n, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// readRequest reads one request head and body off br.
func readRequest(br *bufio.Reader) (*http.Request, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, req.Body)
	return req, nil
}

func TestMalformedResponsesRefused(t *testing.T) {
	cases := []struct {
		name, reply string
		want        error // from RoundTrip; nil: from reading the body
		bodyErr     error
	}{
		{"not http", "SSH-2.0-OpenSSH\r\n\r\n", ErrMalformedResponse, nil},
		{"http/2 line", "HTTP/2.0 200 OK\r\n\r\n", ErrMalformedResponse, nil},
		{"short code", "HTTP/1.1 20 OK\r\n\r\n", ErrMalformedResponse, nil},
		{"signed code", "HTTP/1.1 +20 OK\r\n\r\n", ErrMalformedResponse, nil},
		{"header without colon", "HTTP/1.1 200 OK\r\nBroken\r\n\r\n", ErrMalformedResponse, nil},
		{"length and coding", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ErrMalformedResponse, nil},
		{"gzip coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", ErrMalformedResponse, nil},
		{"coding twice", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ErrMalformedResponse, nil},
		{"coding on 1.0", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", ErrMalformedResponse, nil},
		{"distinct lengths", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", ErrMalformedResponse, nil},
		{"bad length on 204", "HTTP/1.1 204 No Content\r\nContent-Length: A\r\n\r\n", ErrMalformedResponse, nil},
		{"length with a vertical tab", "HTTP/1.1 200 OK\r\nContent-Length: 2\v\r\n\r\nok", ErrMalformedResponse, nil},
		{"coding with a Kelvin sign", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chun\u212aed\r\n\r\n0\r\n\r\n", ErrMalformedResponse, nil},
		{"negative length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", ErrMalformedResponse, nil},
		{"length list", "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\n\r\nabc", ErrMalformedResponse, nil},
		{"switching protocols", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", ErrMalformedResponse, nil},
		{"endless 1xx", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", 20), ErrMalformedResponse, nil},
		{"huge head", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n", ErrHeaderTooLarge, nil},
		{"closed before answer", "", io.ErrUnexpectedEOF, nil},
		{"cut head", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", io.ErrUnexpectedEOF, nil},
		{"cut header line", "HTTP/1.1 200 OK\r\nContent-Le", ErrMalformedResponse, nil},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", nil, io.ErrUnexpectedEOF},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", nil, ErrMalformedResponse},
		{"cut chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", nil, io.ErrUnexpectedEOF},
		{"huge trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: " + strings.Repeat("a", 9000) + "\r\n\r\n", nil, ErrHeaderTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := scripted(t, func(_ int, c net.Conn) {
				defer c.Close()
				if _, err := readRequest(bufio.NewReader(c)); err != nil {
					return
				}
				io.WriteString(c, tc.reply)
			})
			c := newClient(t, &Transport{MaxResponseHeaderBytes: 4096})
			resp, err := c.Get(url + "/x")
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("RoundTrip error %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("RoundTrip: %v", err)
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if !errors.Is(err, tc.bodyErr) {
				t.Fatalf("body error %v, want %v", err, tc.bodyErr)
			}
		})
	}
}

func TestInformationalAnswersSkipped(t *testing.T) {
	url := scripted(t, func(_ int, c net.Conn) {
		defer c.Close()
		readRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	c := newClient(t, &Transport{})
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); got != "ok" || resp.StatusCode != 200 || resp.Header.Get("Link") != "" {
		t.Fatalf("got %d %q, header %v", resp.StatusCode, got, resp.Header)
	}
}

// A connection is reused only when its answer ended cleanly, and never
// after "Connection: close", an answer read to the connection's end, extra
// bytes after the answer, or a body closed early.
func TestReuseOnlyAfterACleanEnd(t *testing.T) {
	cases := []struct {
		name  string
		reply string
		read  bool // read the body to its end
		reuse bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true, true},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n", true, true},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true, false},
		{"http/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", true, false},
		{"extra bytes", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokJUNK", true, false},
		{"closed early", "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var accepted atomic.Int64
			url := scripted(t, func(_ int, c net.Conn) {
				accepted.Add(1)
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := readRequest(br); err != nil {
						return
					}
					io.WriteString(c, tc.reply)
				}
			})
			c := newClient(t, &Transport{})
			for range 2 {
				resp, err := c.Get(url)
				if err != nil {
					t.Fatal(err)
				}
				if tc.read {
					io.ReadAll(resp.Body)
				}
				resp.Body.Close()
			}
			want := int64(2)
			if tc.reuse {
				want = 1
			}
			if n := accepted.Load(); n != want {
				t.Fatalf("%d connections for two exchanges, want %d", n, want)
			}
		})
	}
}

// An idle connection the upstream closed is found before a request goes
// on it; a connection that dies after taking a request is retried once on
// a new one, when the body can be replayed.
func TestClosedIdleConnection(t *testing.T) {
	t.Run("closed while idle", func(t *testing.T) {
		var accepted atomic.Int64
		closed := make(chan struct{}, 3)
		url := scripted(t, func(_ int, c net.Conn) {
			accepted.Add(1)
			readRequest(bufio.NewReader(c))
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			c.Close() // the client still holds it as idle
			closed <- struct{}{}
		})
		c := newClient(t, &Transport{})
		for i := range 3 {
			resp, err := c.Post(url, "text/plain", io.MultiReader(strings.NewReader("not replayable")))
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			readAll(t, resp)
			<-closed // on loopback the FIN is in the client's socket when Close returns
		}
		if n := accepted.Load(); n != 3 {
			t.Fatalf("%d connections for three exchanges, want 3", n)
		}
	})
	t.Run("dies after the request", func(t *testing.T) {
		url, c := dyingConnection(t)
		resp, err := c.Post(url, "text/plain", strings.NewReader("replayable"))
		if err != nil {
			t.Fatalf("replayable request on a dying connection: %v", err)
		}
		if got := readAll(t, resp); got != "ok" {
			t.Fatalf("got %q", got)
		}
	})
	t.Run("dies with a body that cannot be replayed", func(t *testing.T) {
		url, c := dyingConnection(t)
		body := &countingBody{r: strings.NewReader("stream")}
		req, _ := http.NewRequest(http.MethodPost, url, body)
		if _, err := c.Do(req); err == nil {
			t.Fatal("a request whose body is spent was sent again")
		}
		if n := body.closes.Load(); n != 1 {
			t.Fatalf("body closed %d times, want 1", n)
		}
	})
}

// dyingConnection starts an upstream whose first connection answers one
// exchange, then takes the next request and drops it; later connections
// answer every request. It returns the upstream's URL and a client whose
// one idle connection is that first one.
func dyingConnection(t *testing.T) (string, *http.Client) {
	t.Helper()
	const ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
	url := scripted(t, func(n int, c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		readRequest(br)
		io.WriteString(c, ok)
		if n == 0 {
			readRequest(br) // take the second request, then drop it
			return
		}
		for {
			if _, err := readRequest(br); err != nil {
				return
			}
			io.WriteString(c, ok)
		}
	})
	c := newClient(t, &Transport{})
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	return url, c
}

type countingBody struct {
	r      io.Reader
	err    error
	closes atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	return b.r.Read(p)
}
func (b *countingBody) Close() error { b.closes.Add(1); return nil }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCancelUnblocksTheBody(t *testing.T) {
	closed := make(chan struct{})
	url := scripted(t, func(_ int, c net.Conn) {
		defer c.Close()
		readRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
		io.Copy(io.Discard, c) // until the client closes
		close(closed)
	})
	c := newClient(t, &Transport{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := resp.Body.Read(buf)
	if string(buf[:n]) != "first" || err != nil {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	go cancel()
	for err == nil {
		_, err = resp.Body.Read(buf)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v, want context.Canceled", err)
	}
	<-closed
	resp.Body.Close()
}

func TestCloseUnblocksARead(t *testing.T) {
	url := scripted(t, func(_ int, c net.Conn) {
		defer c.Close()
		readRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
		io.Copy(io.Discard, c)
	})
	c := newClient(t, &Transport{})
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := resp.Body.Read(make([]byte, 8))
		done <- err
	}()
	time.Sleep(5 * time.Millisecond) // let the read block (either order passes)
	resp.Body.Close()
	if err := <-done; err == nil {
		t.Fatal("read returned nil after Close")
	}
	if _, err := resp.Body.Read(make([]byte, 8)); !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after close: %v", err)
	}
}

// A request that cannot be written without injecting into the message is
// refused before any connection is made, and its body is closed.
func TestInvalidRequestsRefused(t *testing.T) {
	var dials atomic.Int64
	tr := &Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("no dial expected")
	}}
	mk := func(method, url string, h http.Header) *http.Request {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Method = method
		req.Header = h
		return req
	}
	cases := map[string]*http.Request{
		"https":            mk("GET", "https://example.com/", nil),
		"method":           mk("GE T", "http://example.com/", nil),
		"header name":      mk("GET", "http://example.com/", http.Header{"X Y": {"1"}}),
		"header value lf":  mk("GET", "http://example.com/", http.Header{"X": {"1\r\nEvil: 2"}}),
		"header value nul": mk("GET", "http://example.com/", http.Header{"X": {"a\x00"}}),
		"credentials":      mk("GET", "http://u:p@example.com/", nil),
	}
	opaque := mk("GET", "http://example.com/", nil)
	opaque.URL.Opaque = "x"
	cases["target not a path"] = opaque
	length := mk("POST", "http://example.com/", nil)
	length.ContentLength = 5
	cases["length without body"] = length
	host := mk("GET", "http://example.com/", nil)
	host.Host = "example.com\r\nEvil: 1"
	cases["host"] = host
	for name, req := range cases {
		body := &countingBody{r: strings.NewReader("x")}
		if req.ContentLength == 0 {
			req.Body = body
		}
		if _, err := tr.RoundTrip(req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
		if n := body.closes.Load(); req.Body != nil && n != 1 {
			t.Errorf("%s: body closed %d times", name, n)
		}
	}
	if n := dials.Load(); n != 0 {
		t.Fatalf("%d dials for refused requests", n)
	}
}

// A body that fails mid-way fails the exchange at once: the upstream,
// waiting for the rest, is not waited for.
func TestRequestBodyFailure(t *testing.T) {
	url := scripted(t, func(_ int, c net.Conn) {
		defer c.Close()
		io.Copy(io.Discard, c) // never answers
	})
	c := newClient(t, &Transport{})
	boom := errors.New("edge went away")
	body := &countingBody{r: strings.NewReader(""), err: boom}
	req, _ := http.NewRequest(http.MethodPost, url, body)
	req.ContentLength = -1
	if _, err := c.Do(req); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the body's error", err)
	}
	if n := body.closes.Load(); n != 1 {
		t.Fatalf("body closed %d times", n)
	}
}

func TestDialFailure(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	url := "http://" + ln.Addr().String()
	ln.Close()
	c := newClient(t, &Transport{})
	body := &countingBody{r: strings.NewReader("x")}
	req, _ := http.NewRequest(http.MethodPost, url, body)
	if _, err := c.Do(req); err == nil {
		t.Fatal("dial to a closed port succeeded")
	}
	if n := body.closes.Load(); n != 1 {
		t.Fatalf("body closed %d times", n)
	}
}

func TestIdleConnectionsReaped(t *testing.T) {
	var closedConns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closedConns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := &Transport{IdleConnTimeout: 20 * time.Millisecond}
	c := newClient(t, tr)
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	waitFor(t, func() bool { return closedConns.Load() == 1 })
	waitFor(t, func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.nidle == 0 && tr.reaper == nil
	})
}

// TestDeadIdleConnectionsSwept: an idle connection the upstream closed is
// closed here at the next sweep, long before IdleConnTimeout, and a live
// one stays for the next exchange however many sweeps pass.
func TestDeadIdleConnectionsSwept(t *testing.T) {
	t.Run("closed by the upstream", func(t *testing.T) {
		url := scripted(t, func(_ int, c net.Conn) {
			readRequest(bufio.NewReader(c))
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			c.Close() // the client keeps it as idle
		})
		tr := &Transport{sweep: time.Millisecond}
		c := newClient(t, tr)
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		waitFor(t, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return tr.nidle == 0 && tr.reaper == nil
		})
	})
	t.Run("alive", func(t *testing.T) {
		srv, conns := countingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
		tr := &Transport{sweep: time.Millisecond}
		c := newClient(t, tr)
		for i := range 2 {
			resp, err := c.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if i == 0 {
				tr.mu.Lock()
				from := tr.sweeps
				tr.mu.Unlock()
				waitFor(t, func() bool {
					tr.mu.Lock()
					defer tr.mu.Unlock()
					return tr.sweeps >= from+3
				})
			}
		}
		if n := conns.Load(); n != 1 {
			t.Fatalf("%d connections for two exchanges three sweeps apart, want 1", n)
		}
	})
}
