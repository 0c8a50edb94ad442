package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"testing"
	"time"
)

// byteConn is a connection whose peer's whole answer is fixed bytes.
type byteConn struct {
	r *bytes.Reader
}

func (c *byteConn) Read(p []byte) (int, error)      { return c.r.Read(p) }
func (c *byteConn) Write(p []byte) (int, error)     { return len(p), nil }
func (c *byteConn) Close() error                    { return nil }
func (c *byteConn) LocalAddr() net.Addr             { return &net.TCPAddr{} }
func (c *byteConn) RemoteAddr() net.Addr            { return &net.TCPAddr{} }
func (c *byteConn) SetDeadline(time.Time) error     { return nil }
func (c *byteConn) SetReadDeadline(time.Time) error { return nil }
func (c *byteConn) SetWriteDeadline(time.Time) error {
	return nil
}

// FuzzResponse reads arbitrary bytes as an upstream's answer. It must
// never panic or hang, and an answer this transport reads whole must read
// the same through net/http's parser: same status, same body.
func FuzzResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil close",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 1\r\n\r\nz",
		"HTTP/1.1 200\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, reply []byte) {
		tr := &Transport{
			MaxResponseHeaderBytes: 8 << 10,
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				return &byteConn{r: bytes.NewReader(reply)}, nil
			},
		}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, "http://upstream.test/v1/models", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return
		}
		std, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(reply)), req)
		if err != nil {
			t.Fatalf("read whole here (status %d, %d body bytes), refused by net/http: %v", resp.StatusCode, len(got), err)
		}
		if std.StatusCode < 200 {
			return // net/http returns the 1xx this transport skipped
		}
		want, err := io.ReadAll(std.Body)
		if err != nil {
			t.Fatalf("read whole here, net/http body failed: %v", err)
		}
		if std.StatusCode != resp.StatusCode || !bytes.Equal(got, want) {
			t.Fatalf("status %d body %q here; net/http: status %d body %q", resp.StatusCode, got, std.StatusCode, want)
		}
	})
}

// captureConn records what the transport writes and answers 204.
type captureConn struct {
	byteConn
	wrote bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error) { return c.wrote.Write(p) }

// FuzzRequest writes requests with arbitrary methods, paths, hosts and
// header fields. Each is either refused with ErrInvalidRequest or written
// so that net/http's server parser reads back exactly what was asked: the
// same method, target, host, header value and body, and nothing injected.
func FuzzRequest(f *testing.F) {
	f.Add("POST", "/v1/chat/completions", "", "X-Key", "value", []byte(`{"a":1}`))
	f.Add("GET", "/a b", "h.test:80", "X", "a\r\nEvil: 1", []byte(nil))
	f.Add("GET", "/", "h.test\r\nX: 1", "host", "other", []byte(nil))
	f.Add("PUT", "/x", "", "content-length", "9", []byte("abc"))
	f.Fuzz(func(t *testing.T, method, path, host, name, value string, body []byte) {
		conn := &captureConn{byteConn: byteConn{r: bytes.NewReader([]byte("HTTP/1.1 204 No Content\r\n\r\n"))}}
		tr := &Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return conn, nil }}
		defer tr.CloseIdleConnections()
		u := &url.URL{Scheme: "http", Host: "upstream.test", Path: path}
		req := (&http.Request{Method: method, URL: u, Host: host, Header: http.Header{name: {value}}}).WithContext(context.Background())
		if len(body) > 0 {
			req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("RoundTrip: %v", err)
			}
			return
		}
		resp.Body.Close()
		got, err := http.ReadRequest(bufio.NewReader(&conn.wrote))
		if err != nil {
			t.Fatalf("written request unreadable: %v\n%q", err, conn.wrote.Bytes())
		}
		wantMethod, wantHost := method, host
		if wantMethod == "" {
			wantMethod = http.MethodGet
		}
		if wantHost == "" {
			wantHost = u.Host
		}
		if got.Method != wantMethod || got.RequestURI != u.RequestURI() || got.Host != wantHost {
			t.Fatalf("read back %q %q host %q; want %q %q host %q", got.Method, got.RequestURI, got.Host, wantMethod, u.RequestURI(), wantHost)
		}
		switch ck := textproto.CanonicalMIMEHeaderKey(name); ck {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection", "User-Agent":
		default:
			if vs := got.Header[ck]; len(vs) != 1 || vs[0] != textproto.TrimString(value) {
				t.Fatalf("header %s read back as %q, want %q", ck, vs, value)
			}
		}
		b, err := io.ReadAll(got.Body)
		if err != nil || !bytes.Equal(b, body) {
			t.Fatalf("body read back %q (%v), want %q", b, err, body)
		}
		if conn.wrote.Len() != 0 {
			t.Fatalf("%d bytes after the request: %q", conn.wrote.Len(), conn.wrote.Bytes())
		}
	})
}
