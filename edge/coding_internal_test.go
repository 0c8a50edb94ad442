package edge

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// compress returns b in coding ("gzip", "zlib" or "flate").
func compress(t testing.TB, coding string, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "gzip":
		w = gzip.NewWriter(&out)
	case "zlib":
		w = zlib.NewWriter(&out)
	case "flate":
		w, _ = flate.NewWriter(&out, flate.DefaultCompression)
	default:
		t.Fatalf("coding %q", coding)
	}
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// TestContentCoding: a request body's Content-Encoding names gzip (or
// x-gzip), deflate, or nothing (identity, in any case, or no header); any
// other coding, or two, is refused.
func TestContentCoding(t *testing.T) {
	for _, tc := range []struct {
		values []string
		want   string
		ok     bool
	}{
		{nil, "", true},
		{[]string{"identity"}, "", true},
		{[]string{"GZip"}, "gzip", true},
		{[]string{"x-gzip"}, "gzip", true},
		{[]string{" deflate , identity"}, "deflate", true},
		{[]string{"identity", "gzip"}, "gzip", true},
		{[]string{"zstd"}, "", false},
		{[]string{"br"}, "", false},
		{[]string{"gzip, deflate"}, "", false},
		{[]string{"gzip", "gzip"}, "", false},
		{[]string{strings.Repeat("z", 100)}, "", false},
	} {
		got, err := contentCoding(tc.values)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("%q: %q, %v; want %q (ok %v)", tc.values, got, err, tc.want, tc.ok)
		}
		if err != nil && len(err.Error()) > 100 {
			t.Errorf("%q: an error of %d bytes repeats the header", tc.values, len(err.Error()))
		}
	}
}

// TestDecodeBody: gzip (one member or several), deflate as zlib or bare
// decode; a body that decodes beyond the limit fails as a body over it
// does (*http.MaxBytesError), however small it came; a corrupt or cut
// one fails with errCorruptBody.
func TestDecodeBody(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"héllo"}]}`)
	twoMembers := append(compress(t, "gzip", body[:10]), compress(t, "gzip", body[10:])...)
	for name, in := range map[string]struct {
		coding string
		data   []byte
	}{
		"gzip":                {"gzip", compress(t, "gzip", body)},
		"gzip of two members": {"gzip", twoMembers},
		"zlib":                {"deflate", compress(t, "zlib", body)},
		"bare deflate":        {"deflate", compress(t, "flate", body)},
	} {
		got, err := decodeBody(in.coding, in.data, int64(len(body)))
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}

	bomb := compress(t, "gzip", make([]byte, 64<<20)) // 64 MiB of zeros in about 64 KiB
	var mbe *http.MaxBytesError
	if _, err := decodeBody("gzip", bomb, 1<<20); !errors.As(err, &mbe) || mbe.Limit != 1<<20 {
		t.Fatalf("a %d-byte body inflating to 64 MiB: %v", len(bomb), err)
	}
	if _, err := decodeBody("gzip", compress(t, "gzip", body), int64(len(body))-1); !errors.As(err, &mbe) {
		t.Fatalf("one byte over the limit: %v", err)
	}

	gz := compress(t, "gzip", body)
	for name, in := range map[string]struct {
		coding string
		data   []byte
	}{
		"not gzip":         {"gzip", body},
		"cut gzip":         {"gzip", gz[:len(gz)-6]},
		"bad gzip crc":     {"gzip", append(append([]byte{}, gz[:len(gz)-8]...), 0, 0, 0, 0, 0, 0, 0, 0)},
		"not deflate":      {"deflate", []byte{0xff, 0xff, 0xff}},
		"cut zlib":         {"deflate", compress(t, "zlib", body)[:10]},
		"empty gzip":       {"gzip", nil},
		"unnamed coding":   {"br", compress(t, "gzip", body)},
		"trailing garbage": {"gzip", append(append([]byte{}, gz...), "garbage"...)},
	} {
		if got, err := decodeBody(in.coding, in.data, 1<<20); !errors.Is(err, errCorruptBody) {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}
}

// FuzzDecodeBody: whatever a client sends as a compressed body, decoding
// it never panics, never yields more than the limit, and fails only with
// the two errors readRequestBody answers (413, 400).
func FuzzDecodeBody(f *testing.F) {
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	f.Add(true, compress(f, "gzip", body))
	f.Add(false, compress(f, "zlib", body))
	f.Add(false, compress(f, "flate", body))
	f.Add(true, compress(f, "gzip", make([]byte, 1<<16)))
	f.Fuzz(func(t *testing.T, gz bool, data []byte) {
		coding := "deflate"
		if gz {
			coding = "gzip"
		}
		const limit = 4 << 10
		got, err := decodeBody(coding, data, limit)
		var mbe *http.MaxBytesError
		switch {
		case err == nil && len(got) > limit:
			t.Fatalf("%d bytes decoded past the limit", len(got))
		case err != nil && !errors.Is(err, errCorruptBody) && !errors.As(err, &mbe):
			t.Fatalf("error %v", err)
		}
	})
}
