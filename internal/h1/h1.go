// Package h1 is a lean HTTP/1.1 client transport for plain-HTTP upstreams
// (a model server on the Node's own machine or network: Ollama, vLLM,
// llama.cpp's server).
//
// net/http's Transport runs every exchange on three goroutines (the
// caller's, a connection's reader and its writer) and hands the request
// and the response between them; on a loopback upstream those handoffs
// cost more than the exchange. Transport here writes the request and reads
// the response on the caller's goroutine: an exchange wakes nobody but the
// caller, and an idle connection holds no goroutine and no buffer.
//
// It does less than net/http on purpose: no TLS, no proxies, no HTTP/2, no
// transparent gzip, no Expect: 100-continue, no protocol upgrades. A
// response framed in a way HTTP/1.1 does not define exactly (both a length
// and a transfer coding, a coding other than chunked, distinct lengths, a
// status line that is not HTTP/1.x) is refused with ErrMalformedResponse,
// never guessed around. Use it only where those limits hold; the
// upstream package does, and keeps net/http for https and proxied URLs.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"sync"
	"time"
)

// Errors a round trip returns, wrapped with detail; test with errors.Is.
var (
	// ErrMalformedResponse: the upstream's answer is not HTTP/1.1 this
	// transport reads without guessing.
	ErrMalformedResponse = errors.New("h1: malformed response")
	// ErrInvalidRequest: the request cannot be written as HTTP/1.1 (a
	// scheme other than http, a bad method, header or host).
	ErrInvalidRequest = errors.New("h1: invalid request")
	// ErrHeaderTooLarge: the response head exceeded MaxResponseHeaderBytes.
	ErrHeaderTooLarge = errors.New("h1: response header too large")
)

// Defaults of the zero Transport.
const (
	DefaultMaxIdleConnsPerHost    = 64
	DefaultIdleConnTimeout        = 90 * time.Second
	DefaultMaxResponseHeaderBytes = 1 << 20
	defaultDialTimeout            = 30 * time.Second
	maxInformational              = 8 // 1xx answers skipped before the final one
	bufSize                       = 4 << 10
	// sweepInterval is how often idle connections are checked for an
	// upstream's close (a shorter IdleConnTimeout is used instead).
	sweepInterval = 5 * time.Second
)

// Transport is an http.RoundTripper for "http" URLs. The zero value is
// ready to use; it is safe for concurrent use and must not be copied after
// first use.
type Transport struct {
	// DialContext opens a connection; nil means a net.Dialer with a 30 s
	// timeout and TCP keep-alives.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// MaxIdleConnsPerHost bounds the idle connections kept per host:port
	// (0: DefaultMaxIdleConnsPerHost; negative: keep none).
	MaxIdleConnsPerHost int
	// IdleConnTimeout closes a connection idle this long (0:
	// DefaultIdleConnTimeout). One the upstream closes while idle is
	// closed here too, within 5 s.
	IdleConnTimeout time.Duration
	// MaxResponseHeaderBytes bounds a response head (0:
	// DefaultMaxResponseHeaderBytes). A chunked body's trailer must fit
	// the 4 KiB read buffer, as in net/http.
	MaxResponseHeaderBytes int64

	mu     sync.Mutex
	idle   map[string][]*conn // per host:port, oldest first
	nidle  int
	reaper *time.Timer // armed while any connection is idle
	// sweep, when set, replaces sweepInterval, and sweeps counts reap's
	// runs (tests).
	sweep  time.Duration
	sweeps int
}

// conn is one connection. Its buffered reader lives only while an exchange
// is on it: an idle connection holds none.
type conn struct {
	nc     net.Conn
	key    string
	br     *bufio.Reader
	tp     textproto.Reader
	limit  int64 // bytes the reader may still take; bounds a head
	nread  int64 // bytes read over the connection's life
	idleAt time.Time
	reused bool
	// Made once per connection, not per exchange: the cancel an
	// exchange's context runs, the liveness peek, and the scratch of a
	// request's write.
	cancel func()
	peek   peeker
	ws     writeScratch
}

func newConn(nc net.Conn, key string) *conn {
	c := &conn{nc: nc, key: key, limit: math.MaxInt64}
	c.cancel = func() { c.nc.SetDeadline(aLongTimeAgo) }
	c.peek.init(nc)
	c.ws.wo.Writer = nc
	return c
}

// releaseReader returns the exchange's buffered reader to its pool.
func (c *conn) releaseReader() {
	br := c.br
	c.br, c.tp.R = nil, nil
	br.Reset(nil)
	readers.Put(br)
}

func (c *conn) Read(p []byte) (int, error) {
	if c.limit <= 0 {
		return 0, ErrHeaderTooLarge
	}
	if int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.nc.Read(p)
	c.limit -= int64(n)
	c.nread += int64(n)
	return n, err
}

var (
	readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, bufSize) }}
	writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, bufSize) }}
	copyBuf = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
)

// RoundTrip sends req and returns the response head; the body streams from
// the connection as the caller reads it. The request's context cancels the
// dial, the write and every read of the body. A request on a reused
// connection that the upstream had closed is sent once more on a new one
// when its body can be replayed (none, or GetBody set). RoundTrip closes
// the request body, as http.RoundTripper requires.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	if err := validRequest(req); err != nil {
		if body != nil {
			body.Close()
		}
		return nil, err
	}
	ctx := req.Context()
	key := addr(req.URL)
	for attempt := 0; ; attempt++ {
		c, err := t.get(ctx, key, attempt > 0)
		if err != nil {
			if body != nil {
				body.Close()
			}
			return nil, err
		}
		resp, fresh, err := t.exchange(ctx, c, req, body) // closes body
		if err == nil {
			return resp, nil
		}
		// Retry only a request the upstream never started to answer, on
		// a connection it had closed while idle.
		if !fresh || !c.reused || attempt > 0 || ctx.Err() != nil || (body != nil && req.GetBody == nil) {
			return nil, err
		}
		if body != nil {
			if body, err = req.GetBody(); err != nil {
				return nil, fmt.Errorf("h1: replay body: %w", err)
			}
		}
	}
}

// exchange writes req on c and reads the response head. fresh reports that
// no byte of an answer had arrived when it failed.
func (t *Transport) exchange(ctx context.Context, c *conn, req *http.Request, body io.ReadCloser) (_ *http.Response, fresh bool, _ error) {
	stop := context.AfterFunc(ctx, c.cancel)
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(c)
	c.tp.R = c.br
	start := c.nread
	fail := func(err error) (*http.Response, bool, error) {
		stop()
		c.nc.Close()
		c.releaseReader()
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("h1: %s %s: %w", req.Method, req.URL.Host, ctx.Err())
		}
		return nil, c.nread == start, err
	}
	werr := writeRequest(&c.ws, req, body)
	if _, ok := werr.(*bodyError); ok {
		// The caller's body failed: the upstream waits for the rest,
		// which will not come.
		return fail(werr)
	}
	// After a failed write the upstream may still have answered (a 413
	// before it read the whole body); its answer wins.
	resp, err := t.readResponse(c, req)
	if err != nil {
		if werr != nil {
			err = werr
		}
		return fail(err)
	}
	b := resp.Body.(*respBody)
	b.t, b.c, b.ctx, b.stop = t, c, ctx, stop
	if werr != nil || req.Close {
		b.reuse = false
	}
	if b.n == 0 { // no body: the connection is done now
		b.finish(io.EOF)
	}
	return resp, false, nil
}

var aLongTimeAgo = time.Unix(1, 0)

// get returns an idle connection to key or dials one.
func (t *Transport) get(ctx context.Context, key string, mustDial bool) (*conn, error) {
	for !mustDial {
		c := t.takeIdle(key)
		if c == nil {
			break
		}
		if time.Since(c.idleAt) < t.idleTimeout() && c.peek.alive() {
			c.reused = true
			return c, nil
		}
		c.nc.Close()
	}
	dial := t.DialContext
	if dial == nil {
		d := &net.Dialer{Timeout: defaultDialTimeout, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	nc, err := dial(ctx, "tcp", key)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("h1: dial %s: %w", key, ctx.Err())
		}
		return nil, fmt.Errorf("h1: dial %s: %w", key, err)
	}
	return newConn(nc, key), nil
}

func (t *Transport) takeIdle(key string) *conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.idle[key]
	if len(s) == 0 {
		return nil
	}
	c := s[len(s)-1]
	s[len(s)-1] = nil
	t.idle[key] = s[:len(s)-1]
	t.nidle--
	return c
}

// put keeps c for the next exchange to its host, or closes it.
func (t *Transport) put(c *conn) {
	max := t.MaxIdleConnsPerHost
	if max == 0 {
		max = DefaultMaxIdleConnsPerHost
	}
	c.idleAt = time.Now()
	t.mu.Lock()
	if t.idle == nil {
		t.idle = make(map[string][]*conn)
	}
	s := t.idle[c.key]
	if len(s) >= max {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	t.idle[c.key] = append(s, c)
	t.nidle++
	if t.reaper == nil {
		t.reaper = time.AfterFunc(t.sweepEvery(), t.reap)
	}
	t.mu.Unlock()
}

// reap closes the idle connections that have been idle longer than
// IdleConnTimeout, or that the upstream has closed (or sent something
// unasked on) since: a server that closes idle connections after a few
// seconds (uvicorn under vLLM closes after 5) would otherwise leave them
// open here, in CLOSE_WAIT, until the timeout. It runs again while any
// connection stays idle, at most every sweepInterval; each run peeks at
// every idle connection once, without blocking.
func (t *Transport) reap() {
	cutoff := time.Now().Add(-t.idleTimeout())
	var old []*conn
	t.mu.Lock()
	t.sweeps++
	for key, s := range t.idle {
		kept := s[:0] // the order, oldest first, is kept
		for _, c := range s {
			// The idle list owns c: nothing else reads it or its peek.
			if c.idleAt.Before(cutoff) || !c.peek.alive() {
				old = append(old, c)
				continue
			}
			kept = append(kept, c)
		}
		clear(s[len(kept):])
		t.nidle -= len(s) - len(kept)
		if len(kept) == 0 {
			delete(t.idle, key)
		} else {
			t.idle[key] = kept
		}
	}
	if t.nidle > 0 {
		t.reaper.Reset(t.sweepEvery())
	} else {
		t.reaper = nil
	}
	t.mu.Unlock()
	for _, c := range old {
		c.nc.Close()
	}
}

// sweepEvery is how often reap runs while connections are idle.
func (t *Transport) sweepEvery() time.Duration {
	if t.sweep > 0 {
		return t.sweep
	}
	return min(t.idleTimeout(), sweepInterval)
}

// CloseIdleConnections closes every idle connection; exchanges in
// progress are not touched.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.nidle = nil, 0
	if t.reaper != nil {
		t.reaper.Stop()
		t.reaper = nil
	}
	t.mu.Unlock()
	for _, s := range idle {
		for _, c := range s {
			c.nc.Close()
		}
	}
}

func (t *Transport) idleTimeout() time.Duration {
	if t.IdleConnTimeout > 0 {
		return t.IdleConnTimeout
	}
	return DefaultIdleConnTimeout
}

func (t *Transport) maxHeader() int64 {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return DefaultMaxResponseHeaderBytes
}

// addr is u's host:port, port 80 when u names none.
func addr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host // already host:port, an IPv6 host in brackets
	}
	return net.JoinHostPort(u.Hostname(), "80")
}
