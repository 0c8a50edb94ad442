// Package sse reads and writes Server-Sent Events as the HTML standard
// defines them (the "event stream" format that OpenAI, Anthropic and others
// stream over). The reader is strict about bounds, since it reads bytes from
// upstreams and clients: a line or an event larger than the limit is an
// error, never an unbounded allocation.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
)

// Streamed reports whether an answer of Content-Type ct is an event
// stream: yes for text/event-stream, no for application/json, and asked
// (what the request asked for) for any other type or none. A gateway
// reads an answer as what it is, whatever the stream flag it sent.
func Streamed(ct string, asked bool) bool {
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		return true
	case strings.HasPrefix(ct, "application/json"):
		return false
	}
	return asked
}

// Event is one dispatched event.
type Event struct {
	// Type is the "event:" field; empty means the default "message".
	Type string
	// Data is the "data:" lines joined with "\n".
	Data []byte
	// ID is the last "id:" field seen.
	ID string
}

// ErrTooLarge is returned for a line or event beyond the reader's limit.
var ErrTooLarge = errors.New("sse: event too large")

// DefaultMaxEvent bounds one event's data.
const DefaultMaxEvent = 8 << 20

// Reader parses an event stream. It is resumable: when the underlying
// reader returns an error such as a read deadline, Next returns it and the
// partial line and event are kept, so a later Next continues where it
// stopped.
type Reader struct {
	br      *bufio.Reader
	max     int
	lastID  string
	data    []byte
	typ     []byte
	lastTyp string // the last event type returned; see typeString
	hasData bool
	line    []byte
	skipLF  bool // the last line ended in CR; see readLine
}

// NewReader returns a Reader of r with events of at most maxEvent bytes (0
// means DefaultMaxEvent).
func NewReader(r io.Reader, maxEvent int) *Reader {
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEvent
	}
	br := readers.Get().(*bufio.Reader)
	br.Reset(r)
	return &Reader{br: br, max: maxEvent}
}

// readers holds the buffers of released Readers.
var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

const readBufSize = 16 << 10

// Release gives the reader's read buffer back for another Reader; the
// Reader must not be used after it (a second Release does nothing). A
// Reader never released costs only that its buffer is not reused.
func (r *Reader) Release() {
	if r.br == nil {
		return
	}
	r.br.Reset(nil)
	readers.Put(r.br)
	r.br = nil
}

// Ready reports whether Next would return an event without reading: the
// bytes already buffered end an event (a data line, then a blank line). A
// caller relaying events holds its write only while that is so. Comments
// and blocks without data do not count: a relay that held an event behind
// a comment would hold it until the provider's next bytes.
func (r *Reader) Ready() bool {
	b, _ := r.br.Peek(r.br.Buffered())
	hasData, partial, skipLF := r.hasData, r.line, r.skipLF
	for {
		if skipLF {
			if len(b) == 0 {
				return false
			}
			if b[0] == '\n' {
				b = b[1:]
			}
			skipLF = false
		}
		i := indexEOL(b)
		if i < 0 {
			return false
		}
		switch {
		case len(partial) == 0 && i == 0: // a blank line
			if hasData {
				return true
			}
		case isDataLine(partial, b[:i]):
			hasData = true
		}
		partial, skipLF, b = nil, b[i] == '\r', b[i+1:]
	}
}

// isDataLine reports whether the line that is head followed by tail has
// the field name "data", as next reads it.
func isDataLine(head, tail []byte) bool {
	const name = "data"
	var field [len(name) + 1]byte
	n := copy(field[:], head)
	n += copy(field[n:], tail)
	return n >= len(name) && string(field[:len(name)]) == name && (n == len(name) || field[len(name)] == ':')
}

// Next returns the next event. Comments and events without data are
// skipped, as the standard says. It returns io.EOF at the end of the stream
// (an incomplete final event is discarded, as the standard says).
func (r *Reader) Next() (Event, error) { return r.next(true) }

// NextShared is Next for a caller done with each event before it asks for
// the next: the event's Data is the reader's own buffer, valid only until
// the next call, which saves a copy and an allocation per event.
func (r *Reader) NextShared() (Event, error) { return r.next(false) }

func (r *Reader) next(copyData bool) (Event, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if !r.hasData {
				r.typ = r.typ[:0]
				continue
			}
			ev := Event{Type: r.typeString(), Data: r.data, ID: r.lastID}
			if copyData {
				ev.Data = bytes.Clone(r.data)
			}
			r.data, r.typ, r.hasData = r.data[:0], r.typ[:0], false
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			r.typ = append(r.typ[:0], value...)
		case "data":
			if r.hasData {
				r.data = append(r.data, '\n')
			}
			if len(r.data)+len(value) > r.max {
				return Event{}, ErrTooLarge
			}
			r.data = append(r.data, value...)
			r.hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				r.lastID = string(value)
			}
		}
		// "retry" and unknown fields are ignored.
	}
}

// typeString returns the pending event's type. A stream's events mostly
// repeat a few types (Anthropic's and the Responses API's deltas), so the
// last one is kept and reused rather than allocated again.
func (r *Reader) typeString() string {
	if string(r.typ) != r.lastTyp {
		r.lastTyp = string(r.typ)
	}
	return r.lastTyp
}

// readLine returns one line without its terminator (CRLF, LF or CR). On
// an error the partial line is kept for the next call.
func (r *Reader) readLine() ([]byte, error) {
	for {
		buf, _ := r.br.Peek(r.br.Buffered())
		if len(buf) == 0 {
			if _, err := r.br.Peek(1); err != nil {
				if err == io.EOF && len(r.line) > 0 {
					// A final line without a terminator cannot complete
					// an event; the event is discarded.
					r.line = r.line[:0]
				}
				return nil, err
			}
			continue
		}
		if r.skipLF {
			// The last line ended in CR: an LF right after it belongs to
			// that terminator.
			r.skipLF = false
			if buf[0] == '\n' {
				r.br.Discard(1)
				continue
			}
		}
		i := indexEOL(buf)
		n := i
		if i < 0 {
			n = len(buf)
		}
		if len(r.line)+n > r.max+64 {
			return nil, ErrTooLarge
		}
		r.line = append(r.line, buf[:n]...)
		if i < 0 {
			r.br.Discard(n)
			continue
		}
		r.skipLF = buf[i] == '\r'
		r.br.Discard(i + 1)
		line := r.line
		r.line = r.line[:0]
		return line, nil
	}
}

// indexEOL returns the index of the first CR or LF in b, or -1.
func indexEOL(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		i = len(b)
	}
	if j := bytes.IndexByte(b[:i], '\r'); j >= 0 {
		return j
	}
	if i == len(b) {
		return -1
	}
	return i
}

// AppendEvent appends the wire form of an event: an optional "event:" line,
// one "data:" line per line of data, and the blank line.
func AppendEvent(b []byte, typ string, data []byte) []byte {
	if typ != "" {
		b = append(b, "event: "...)
		b = append(b, typ...)
		b = append(b, '\n')
	}
	for {
		i := bytes.IndexByte(data, '\n')
		b = append(b, "data: "...)
		if i < 0 {
			b = append(b, data...)
			b = append(b, '\n')
			break
		}
		b = append(b, data[:i]...)
		b = append(b, '\n')
		data = data[i+1:]
	}
	return append(b, '\n')
}
