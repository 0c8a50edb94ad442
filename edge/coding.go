package edge

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// errCorruptBody is a compressed request body that does not decode.
var errCorruptBody = errors.New("edge: request body does not decode as its Content-Encoding says")

// contentCoding returns the one content coding a request body was sent
// with ("" for none: identity, or no header): gzip or deflate (RFC 9110
// 8.4.1; x-gzip is gzip). Any other, or more than one, is refused, since
// the body could not be read: zstd among them, which some agents send to
// OpenAI's own backend (and can be told not to).
func contentCoding(values []string) (string, error) {
	coding := ""
	for _, v := range values {
		for c := range strings.SplitSeq(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			switch {
			case c == "" || c == "identity":
				continue
			case coding != "":
				return "", errors.New("content codings (more than one) are not supported")
			case c == "gzip" || c == "x-gzip":
				coding = "gzip"
			case c == "deflate":
				coding = "deflate"
			default:
				return "", fmt.Errorf("Content-Encoding %.32q is not supported", c)
			}
		}
	}
	return coding, nil
}

// decodeBody returns body decoded from coding. A decoded body larger than
// limit fails with *http.MaxBytesError, as an uncompressed one does (a
// small body that would inflate to gigabytes is refused at the limit,
// never held); one that does not decode fails with errCorruptBody.
func decodeBody(coding string, body []byte, limit int64) ([]byte, error) {
	var zr io.ReadCloser
	var err error
	switch coding {
	case "gzip":
		zr, err = gzip.NewReader(bytes.NewReader(body))
	case "deflate":
		// Deflate in HTTP is the zlib format (RFC 1950); some clients send
		// the bare deflate stream (RFC 1951) instead.
		if zr, err = zlib.NewReader(bytes.NewReader(body)); err != nil {
			zr, err = flate.NewReader(bytes.NewReader(body)), nil
		}
	default: // contentCoding names no other
		err = errCorruptBody
	}
	if err != nil {
		return nil, errCorruptBody
	}
	defer zr.Close()
	buf := bytes.NewBuffer(make([]byte, 0, min(int64(len(body))*4, limit, bodyReserve)))
	if _, err := buf.ReadFrom(io.LimitReader(zr, limit+1)); err != nil {
		return nil, errCorruptBody
	}
	if int64(buf.Len()) > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return buf.Bytes(), nil
}
