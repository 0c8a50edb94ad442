package sse

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readAll reads every event with Next, and again with NextShared (each
// event's data copied before the next call), and fails the test when the
// two differ.
func readAll(t testing.TB, in string, max int) ([]Event, error) {
	t.Helper()
	out, err := readEvents(in, max, false)
	shared, serr := readEvents(in, max, true)
	if d := cmp.Diff(out, shared); d != "" || !errors.Is(serr, err) {
		t.Fatalf("NextShared differs from Next (-Next +NextShared):\n%s\nerrors %v, %v", d, err, serr)
	}
	return out, err
}

func readEvents(in string, max int, shared bool) ([]Event, error) {
	r := NewReader(strings.NewReader(in), max)
	defer r.Release()
	var out []Event
	for {
		var ev Event
		var err error
		if shared {
			ev, err = r.NextShared()
			ev.Data = bytes.Clone(ev.Data)
		} else {
			ev, err = r.Next()
		}
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev)
	}
}

// TestNextDataIsTheCallers: Next's data survives later events; NextShared's
// is overwritten by them, which is its documented bargain.
func TestNextDataIsTheCallers(t *testing.T) {
	in := "data: first\n\ndata: other\n\n"
	r := NewReader(strings.NewReader(in), 0)
	a, _ := r.Next()
	r.Next()
	if string(a.Data) != "first" {
		t.Fatalf("Next's data became %q", a.Data)
	}
	r = NewReader(strings.NewReader(in), 0)
	b, _ := r.NextShared()
	r.NextShared()
	if string(b.Data) == "first" {
		t.Fatal("NextShared copied its data: the test no longer tells the two apart")
	}
}

// TestReleasedBufferStartsClean: a reader built on a released buffer sees
// only its own stream, never bytes the previous one had buffered.
func TestReleasedBufferStartsClean(t *testing.T) {
	for range 20 {
		r := NewReader(strings.NewReader("data: one\n\ndata: left over in the buffer\n\n"), 0)
		if ev, err := r.Next(); err != nil || string(ev.Data) != "one" {
			t.Fatalf("first reader: %q %v", ev.Data, err)
		}
		r.Release()
		r.Release() // a second Release does nothing
		got, err := readAll(t, "data: two\n\n", 0)
		if err != nil || len(got) != 1 || string(got[0].Data) != "two" {
			t.Fatalf("reader on a released buffer read %+v, %v", got, err)
		}
	}
}

func TestReader(t *testing.T) {
	in := ": comment\n" +
		"data: {\"a\":1}\n\n" +
		"event: message_start\r\ndata: x\r\n\r\n" +
		"event: multi\ndata: line1\ndata:line2\nid: 7\n\n" +
		"event: nodata\n\n" +
		"data\n\n" +
		"retry: 10\ndata: after retry\rdata: cr\r\r" +
		"data: [DONE]\n\n" +
		"data: incomplete"
	got, err := readAll(t, in, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{
		{Data: []byte(`{"a":1}`)},
		{Type: "message_start", Data: []byte("x")},
		{Type: "multi", Data: []byte("line1\nline2"), ID: "7"},
		{Data: []byte(""), ID: "7"},
		{Data: []byte("after retry\ncr"), ID: "7"},
		{Data: []byte("[DONE]"), ID: "7"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("events (-want +got):\n%s", d)
	}
}

func TestReaderBounds(t *testing.T) {
	big := "data: " + strings.Repeat("x", 100) + "\n\n"
	if _, err := readAll(t, big, 50); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("long line: %v", err)
	}
	many := strings.Repeat("data: 0123456789\n", 10) + "\n"
	if _, err := readAll(t, many, 50); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("many data lines: %v", err)
	}
}

func TestAppendEventRoundTrip(t *testing.T) {
	var b []byte
	b = AppendEvent(b, "content_block_delta", []byte("{\"x\":\"a\"}"))
	b = AppendEvent(b, "", []byte("two\nlines"))
	got, err := readAll(t, string(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{Type: "content_block_delta", Data: []byte(`{"x":"a"}`)}, {Data: []byte("two\nlines")}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// FuzzReader: no panic, bounded events, and every event it yields survives
// a write/read round trip.
func FuzzReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: b\n\n"))
	f.Add([]byte("data: x\r\ndata: y\r\n\r\n:c\n"))
	f.Add([]byte("data\n\nid: 1\x00\ndata: z\n\n"))
	f.Add([]byte("data: a\n\n: keep\n\ndata: b\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		readAll(t, string(in), 1024) // Next and NextShared agree
		for _, piece := range []int{1, 3, 64, 4096} {
			checkReady(t, in, piece, 1024)
		}
		r := NewReader(bytes.NewReader(in), 1024)
		for {
			ev, err := r.Next()
			if err != nil {
				return
			}
			if len(ev.Data) > 1024 {
				t.Fatalf("event of %d bytes beyond the limit", len(ev.Data))
			}
			if strings.ContainsAny(ev.Type, "\r\n") {
				continue // not representable on the wire; nothing to round-trip
			}
			again, err := NewReader(bytes.NewReader(AppendEvent(nil, ev.Type, ev.Data)), 4096).Next()
			if err != nil || again.Type != ev.Type || !bytes.Equal(again.Data, ev.Data) {
				t.Fatalf("round trip of %+v gave %+v, %v", ev, again, err)
			}
		}
	})
}

// pieces serves b a piece at a time with a timeout between pieces, and
// counts its reads.
type pieces struct {
	b     []byte
	size  int
	odd   bool
	reads int
}

func (p *pieces) Read(buf []byte) (int, error) {
	p.reads++
	if p.odd = !p.odd; p.odd && len(p.b) > 0 {
		return 0, errTimeout
	}
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := copy(buf, p.b[:min(p.size, len(p.b))])
	p.b = p.b[n:]
	return n, nil
}

// checkReady holds Ready to its word: before every Next (after events,
// timeouts and partial lines alike), Ready reports true exactly when that
// Next returns an event without reading.
func checkReady(t *testing.T, in []byte, piece, max int) {
	t.Helper()
	src := &pieces{b: in, size: piece}
	r := NewReader(src, max)
	defer r.Release()
	for range 4*len(in) + 8 {
		ready := r.Ready()
		before := src.reads
		_, err := r.Next()
		if errors.Is(err, ErrTooLarge) {
			return
		}
		if got := err == nil && src.reads == before; got != ready {
			t.Fatalf("%q in pieces of %d: Ready said %v, but Next read %d times and returned %v", in, piece, ready, src.reads-before, err)
		}
		if err == io.EOF {
			return
		}
	}
	t.Fatalf("%q: no end", in)
}

func TestReady(t *testing.T) {
	for _, in := range []string{
		"data: a\n\ndata: b\n\n",
		"data: a\n\n: keep-alive\n\n",
		": keep-alive\n\ndata: a\n\n",
		"data: a\n\nevent: nodata\n\nid: 3\n\n",
		"data: a\r\n\r\ndata: b\r\n\r\n",
		"data: a\r\rdata: b\r\r",
		"data: a\r\n\r\n\ndata: b\r\n\r\n",
		"data\n\ndata:\n\ndatum: x\n\ndata: y\n\n",
		"event: x\ndata: one\ndata: two\n\n",
		"data: " + strings.Repeat("x", 5000) + "\n\n: c\n\ndata: z\n\n",
		"data: incomplete",
	} {
		for _, piece := range []int{1, 2, 3, 5, 7, 64, 1 << 20} {
			checkReady(t, []byte(in), piece, 0)
		}
	}
}

// flaky returns a timeout error between every byte.
type flaky struct {
	b   []byte
	odd bool
}

var errTimeout = errors.New("timeout")

func (f *flaky) Read(p []byte) (int, error) {
	f.odd = !f.odd
	if f.odd {
		return 0, errTimeout
	}
	if len(f.b) == 0 {
		return 0, io.EOF
	}
	p[0] = f.b[0]
	f.b = f.b[1:]
	return 1, nil
}

// readThroughTimeouts reads r's events to io.EOF like readAll, but reads
// on after each injected timeout, as the Edge's relay does after its
// keep-alive deadline.
func readThroughTimeouts(t *testing.T, r *Reader) []Event {
	t.Helper()
	var got []Event
	for {
		ev, err := r.Next()
		if errors.Is(err, errTimeout) {
			continue
		}
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
}

func TestReaderResumesAfterErrors(t *testing.T) {
	in := "event: a\ndata: one\ndata: two\n\ndata: three\r\n\r\n"
	got := readThroughTimeouts(t, NewReader(&flaky{b: []byte(in)}, 0))
	want := []Event{{Type: "a", Data: []byte("one\ntwo")}, {Data: []byte("three")}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
}

// TestReaderCRLFSplitByError: a CR LF pair split by a read error (a
// deadline) is one line terminator, not a line and an empty line (which
// would end the event early).
func TestReaderCRLFSplitByError(t *testing.T) {
	in := "data: a\r\ndata: b\r\n\r\ndata: c\rdata: d\r\r"
	for _, r := range []*Reader{NewReader(&flaky{b: []byte(in)}, 0), NewReader(strings.NewReader(in), 0)} {
		var got []string
		for _, ev := range readThroughTimeouts(t, r) {
			got = append(got, string(ev.Data))
		}
		if want := []string{"a\nb", "c\nd"}; !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
}

func BenchmarkReader(b *testing.B) {
	var in bytes.Buffer
	for range 200 {
		in.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"tok "}}]}` + "\n\n")
	}
	b.SetBytes(int64(in.Len()))
	for b.Loop() {
		r := NewReader(bytes.NewReader(in.Bytes()), 0)
		for {
			if _, err := r.Next(); err != nil {
				break
			}
		}
	}
}

func TestStreamed(t *testing.T) {
	for _, tc := range []struct {
		ct          string
		asked, want bool
	}{
		{"text/event-stream", false, true},
		{"text/event-stream; charset=utf-8", false, true},
		{"application/json", true, false},
		{"application/json; charset=utf-8", true, false},
		{"", true, true},
		{"", false, false},
		{"text/plain", true, true},
		{"application/x-ndjson", false, false},
	} {
		if got := Streamed(tc.ct, tc.asked); got != tc.want {
			t.Errorf("Streamed(%q, %v) = %v", tc.ct, tc.asked, got)
		}
	}
}
