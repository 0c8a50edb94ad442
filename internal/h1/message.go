package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
)

// validRequest refuses what cannot be written as HTTP/1.1 without
// injecting into the message: a bad scheme, method, host, target, header
// name or value.
func validRequest(req *http.Request) error {
	u := req.URL
	if u == nil || u.Scheme != "http" || u.Host == "" || u.User != nil {
		return fmt.Errorf("%w: want an http URL with a host and no credentials", ErrInvalidRequest)
	}
	if req.ContentLength > 0 && (req.Body == nil || req.Body == http.NoBody) {
		return fmt.Errorf("%w: ContentLength %d without a body", ErrInvalidRequest, req.ContentLength)
	}
	if req.Method != "" && !IsToken(req.Method) {
		return fmt.Errorf("%w: method %q", ErrInvalidRequest, req.Method)
	}
	host := req.Host
	if host == "" {
		host = u.Host
	}
	if !validValue(host) || strings.ContainsAny(host, " \t") {
		return fmt.Errorf("%w: host %q", ErrInvalidRequest, host)
	}
	if uri := u.RequestURI(); !strings.HasPrefix(uri, "/") || !validValue(uri) || strings.ContainsAny(uri, " \t") {
		return fmt.Errorf("%w: request target %q is not an absolute path", ErrInvalidRequest, trunc(uri))
	}
	for k, vs := range req.Header {
		if !IsToken(k) {
			return fmt.Errorf("%w: header name %q", ErrInvalidRequest, k)
		}
		for _, v := range vs {
			if !validValue(v) {
				return fmt.Errorf("%w: value of header %s", ErrInvalidRequest, k)
			}
		}
	}
	return nil
}

// IsToken reports whether s is an RFC 9110 token (a method or a header
// name).
func IsToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// validValue reports whether s holds no control byte but tab: no CR or
// LF can end a line early.
func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// bodyError marks a failure of the caller's request body, not of the
// connection.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "h1: request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// bodyReader records the body's own read error, so a failed copy tells the
// body's failure from the connection's.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// writerOnly hides the connection's ReadFrom, so the buffered writer copies
// a body through its own buffer instead of a fresh 32 KiB one.
type writerOnly struct{ io.Writer }

// writeScratch is what writing a request needs besides the buffer; a
// connection keeps one, so that a write allocates none of it.
type writeScratch struct {
	wo   writerOnly // the connection
	body bodyReader
	lim  io.LimitedReader
	one  [1]byte
}

// writeRequest writes req's head and body (from body, which it closes) to
// ws's connection in as few writes as the buffer allows: a small request
// is one write. A failure of the body itself is a *bodyError, unwrapped.
func writeRequest(ws *writeScratch, req *http.Request, body io.ReadCloser) error {
	if body != nil {
		defer body.Close()
	}
	bw := writers.Get().(*bufio.Writer)
	bw.Reset(&ws.wo)
	defer func() {
		bw.Reset(nil)
		writers.Put(bw)
	}()
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	bw.WriteString(method)
	bw.WriteByte(' ')
	bw.WriteString(req.URL.RequestURI())
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(host)
	bw.WriteString("\r\n")
	if _, ok := req.Header["User-Agent"]; !ok {
		bw.WriteString("User-Agent: Go-http-client/1.1\r\n")
	}
	for k, vs := range req.Header {
		switch textproto.CanonicalMIMEHeaderKey(k) { // a key may be in any case
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection":
			continue // framing and the connection are this transport's
		}
		for _, v := range vs {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if req.Close || hasToken(req.Header["Connection"], "close") {
		bw.WriteString("Connection: close\r\n")
	}
	switch {
	case body == nil:
		if method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
			bw.WriteString("Content-Length: 0\r\n")
		}
		bw.WriteString("\r\n")
	case req.ContentLength > 0:
		bw.WriteString("Content-Length: ")
		bw.WriteString(strconv.FormatInt(req.ContentLength, 10))
		bw.WriteString("\r\n\r\n")
		br := &ws.body
		*br = bodyReader{r: body}
		ws.lim = io.LimitedReader{R: br, N: req.ContentLength}
		n, err := io.Copy(bw, &ws.lim)
		ws.lim.R = nil
		br.r = nil
		if br.err != nil {
			return &bodyError{br.err}
		}
		if err != nil {
			return err
		}
		if n < req.ContentLength {
			return &bodyError{fmt.Errorf("%d bytes where ContentLength is %d", n, req.ContentLength)}
		}
		if k, _ := body.Read(ws.one[:]); k > 0 {
			return &bodyError{fmt.Errorf("longer than ContentLength %d", req.ContentLength)}
		}
	default: // length unknown: chunked
		bw.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		cw := httputil.NewChunkedWriter(bw)
		br := &ws.body
		*br = bodyReader{r: body}
		bp := copyBuf.Get().(*[]byte)
		_, err := io.CopyBuffer(cw, br, *bp)
		copyBuf.Put(bp)
		br.r = nil
		if br.err != nil {
			return &bodyError{br.err}
		}
		if err != nil {
			return err
		}
		cw.Close() // the last chunk; the empty trailer follows
		bw.WriteString("\r\n")
	}
	return bw.Flush()
}

// hasToken reports whether a comma-separated header holds token.
func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if asciiEqualFold(textproto.TrimString(f), token) {
				return true
			}
		}
	}
	return false
}

// asciiEqualFold compares s and t folding ASCII case only: no Unicode
// letter (a Kelvin sign for a k) may pass for a framing token.
func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		a, b := s[i], t[i]
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if a != b {
			return false
		}
	}
	return true
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformedResponse}, args...)...)
}

// readResponse reads the final response head (skipping 1xx answers) and
// decides how its body is framed (RFC 9112 section 6.3).
func (t *Transport) readResponse(c *conn, req *http.Request) (*http.Response, error) {
	resp := &http.Response{Request: req, ContentLength: -1}
	for n := 0; ; n++ {
		c.limit = t.maxHeader()
		line, err := c.tp.ReadLine()
		if err != nil {
			return nil, headError(err)
		}
		if err := parseStatusLine(resp, line); err != nil {
			return nil, err
		}
		hdr, err := c.tp.ReadMIMEHeader()
		if err != nil {
			return nil, headError(err)
		}
		resp.Header = http.Header(hdr)
		if resp.StatusCode >= 200 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return nil, malformed("101 Switching Protocols to a request that asked for no upgrade")
		}
		if n+1 >= maxInformational {
			return nil, malformed("more than %d informational answers", maxInformational)
		}
	}
	c.limit = math.MaxInt64

	b := &respBody{n: -1, reuse: resp.ProtoMinor == 1 && !hasToken(resp.Header["Connection"], "close")}
	// The framing headers must be sound whether or not the answer has a
	// body: an answer with a malformed one is not trusted with anything.
	te, hasTE := resp.Header["Transfer-Encoding"]
	cl, hasCL := resp.Header["Content-Length"]
	length := int64(-1)
	switch {
	case hasTE:
		if resp.ProtoMinor == 0 || len(te) != 1 || !asciiEqualFold(te[0], "chunked") {
			return nil, malformed("transfer coding %q", te)
		}
		if hasCL {
			return nil, malformed("both Content-Length and Transfer-Encoding")
		}
		delete(resp.Header, "Transfer-Encoding")
		resp.TransferEncoding = []string{"chunked"}
	case hasCL:
		n, err := parseContentLength(cl)
		if err != nil {
			return nil, err
		}
		length = n
	}
	switch {
	case resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified:
		b.n, resp.ContentLength = 0, 0 // no body, whatever the head says
	case req.Method == http.MethodHead:
		b.n, resp.ContentLength = 0, length // the length of the GET's body
	case hasTE:
		b.r = httputil.NewChunkedReader(c.br)
	case hasCL:
		resp.ContentLength, b.n = length, length
	default: // delimited by the connection's close
		b.reuse = false
	}
	resp.Close = !b.reuse
	resp.Body = b
	return resp, nil
}

func headError(err error) error {
	var pe textproto.ProtocolError
	switch {
	case errors.Is(err, ErrHeaderTooLarge):
		return ErrHeaderTooLarge
	case errors.As(err, &pe):
		return malformed("%v", pe)
	case err == io.EOF:
		return fmt.Errorf("h1: connection closed before a response: %w", io.ErrUnexpectedEOF)
	}
	return fmt.Errorf("h1: read response: %w", err)
}

// parseStatusLine fills resp from "HTTP/1.x NNN reason".
func parseStatusLine(resp *http.Response, line string) error {
	proto, rest, ok := strings.Cut(line, " ")
	if !ok {
		return malformed("status line %q", trunc(line))
	}
	major, minor, ok := http.ParseHTTPVersion(proto)
	if !ok || major != 1 {
		return malformed("protocol %q", trunc(proto))
	}
	code, _, _ := strings.Cut(rest, " ")
	if len(code) != 3 || !isDigits(code) || code[0] == '0' {
		return malformed("status code %q", trunc(code))
	}
	resp.StatusCode, _ = strconv.Atoi(code)
	resp.Status = rest
	resp.Proto, resp.ProtoMajor, resp.ProtoMinor = proto, major, minor
	return nil
}

// parseContentLength takes one length, or the same length repeated.
func parseContentLength(vs []string) (int64, error) {
	first := textproto.TrimString(vs[0])
	for _, v := range vs[1:] {
		if textproto.TrimString(v) != first {
			return 0, malformed("distinct Content-Length values")
		}
	}
	if !isDigits(first) || len(first) > 18 {
		return 0, malformed("Content-Length %q", trunc(first))
	}
	n, _ := strconv.ParseInt(first, 10, 64)
	return n, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func trunc(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// respBody is a response body read straight off the connection. When it is
// read to its end, the connection goes back to the idle pool; a Close
// before the end, a malformed body or a cancelled context closes it.
// Close may run while a Read blocks in another goroutine: it unblocks it.
type respBody struct {
	t     *Transport
	c     *conn
	ctx   context.Context
	stop  func() bool // ends the context's watch on the connection
	r     io.Reader   // the chunked decoder; nil for other framings
	n     int64       // bytes left under Content-Length; -1 for other framings
	reuse bool        // the connection may carry another exchange

	mu  sync.Mutex
	err error // set once the body ended: io.EOF, a failure or http.ErrBodyReadAfterClose
}

func (b *respBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	err := b.err
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	switch {
	case b.n == 0:
		err = io.EOF
	case b.n > 0:
		if int64(len(p)) > b.n {
			p = p[:b.n]
		}
		n, err = b.c.br.Read(p)
		b.n -= int64(n)
		if b.n == 0 {
			err = io.EOF // with the last bytes: no extra call to learn it
		} else if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
	case b.r != nil:
		n, err = b.r.Read(p)
		if err == io.EOF {
			if terr := b.readTrailer(); terr != nil {
				err = terr
			}
		} else if err != nil && !isNetError(err) {
			err = malformed("chunked body: %v", err)
		}
	default:
		n, err = b.c.br.Read(p)
	}
	if err != nil {
		err = b.finish(err)
	}
	return n, err
}

// readTrailer reads the trailer after the last chunk and drops it. Like
// net/http, it takes a trailer only when its end (CRLF CRLF) is within the
// 4 KiB read buffer.
func (b *respBody) readTrailer() error {
	br := b.c.br
	if p, _ := br.Peek(2); string(p) == "\r\n" {
		br.Discard(2)
		return nil // the usual case: no trailer
	}
	for size := 4; ; size++ {
		p, err := br.Peek(size)
		if bytes.HasSuffix(p, []byte("\r\n\r\n")) {
			break
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			return fmt.Errorf("%w: trailer longer than %d bytes", ErrHeaderTooLarge, bufSize)
		case err == io.EOF:
			return fmt.Errorf("h1: trailer: %w", io.ErrUnexpectedEOF)
		case err != nil:
			return fmt.Errorf("h1: trailer: %w", err)
		}
	}
	if _, err := b.c.tp.ReadMIMEHeader(); err != nil {
		return headError(err)
	}
	return nil
}

func isNetError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

// finish ends the body with err (io.EOF for a whole body) and settles the
// connection: back to the pool when it is clean, else closed. It returns
// the error Read reports.
func (b *respBody) finish(err error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil { // closed meanwhile
		return b.err
	}
	stopped := b.stop()
	c := b.c
	// The reader goes back to its pool either way: finish runs on the
	// reading goroutine, and after it nothing reads the connection.
	if err == io.EOF && b.reuse && stopped && c.br.Buffered() == 0 {
		c.releaseReader()
		b.t.put(c)
	} else {
		c.nc.Close()
		c.releaseReader()
		if err != io.EOF && b.ctx.Err() != nil {
			err = fmt.Errorf("h1: response body: %w", b.ctx.Err())
		}
	}
	b.err = err
	return err
}

// Close ends the body. Before its end that closes the connection: the
// rest of the body is never read.
func (b *respBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return nil
	}
	b.stop()
	b.c.nc.Close()
	b.err = http.ErrBodyReadAfterClose
	return nil
}
