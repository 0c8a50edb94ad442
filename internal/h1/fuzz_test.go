package h1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
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
