package llmapi

import (
	"bytes"
	"encoding/base64"
)

// ImageTokens is the most EstimateTokens counts for an image sent inline:
// about the most Anthropic charges for one (it scales an image down to
// about 1,600 tokens), and more than OpenAI charges for one in high
// detail. What an image costs a model does not grow with its bytes, and a
// screenshot's base64 runs to megabytes.
const ImageTokens = 1600

// minInline is the shortest JSON string EstimateTokens takes for an image:
// a shorter one counts its bytes / 4, which is less than ImageTokens.
const minInline = 4 * ImageTokens

// base64Word is in every body that can hold an inline image: a data URL
// (";base64,") and Anthropic's source type ("base64").
var base64Word = []byte("base64")

// EstimateTokens is a cheap estimate of a request's prompt size (the
// Edge's rule; see edge.EstimateTokens): the request body's bytes divided
// by 4, rounded up, except that an image sent inline in base64 (a data
// URL, or Anthropic's base64 source) counts at most ImageTokens: one whose
// base64 runs longer counts ImageTokens in place of its bytes. So the
// estimate is never above the body's bytes / 4. It runs no tokenizer and
// decodes no JSON: an image is a JSON string whose base64 opens with a
// PNG, JPEG, GIF or WebP signature, looked for only in a body that says
// "base64". Other inline files (a PDF) count their bytes.
func EstimateTokens(body []byte) int {
	n, images := len(body), 0
	if len(body) >= minInline && bytes.Contains(body, base64Word) {
		for rest := body; ; {
			s, after, ok := nextString(rest)
			if !ok {
				break
			}
			rest = after
			if len(s) >= minInline && inlineImage(s) {
				n -= len(s)
				images++
			}
		}
	}
	return (n+3)/4 + images*ImageTokens
}

// nextString returns the contents of the first JSON string in b (escapes
// left as they are) and what follows its closing quote; ok is false when
// b holds no whole string. Outside a string a quote can only open one,
// and inside one a quote closes it unless an odd run of backslashes
// escapes it.
func nextString(b []byte) (s, rest []byte, ok bool) {
	open := bytes.IndexByte(b, '"')
	if open < 0 {
		return nil, nil, false
	}
	start := open + 1
	for i := start; ; {
		q := bytes.IndexByte(b[i:], '"')
		if q < 0 {
			return nil, nil, false
		}
		end := i + q
		slashes := 0
		for j := end - 1; j >= start && b[j] == '\\'; j-- {
			slashes++
		}
		if slashes%2 == 0 {
			return b[start:end], b[end+1:], true
		}
		i = end + 1
	}
}

// inlineImage reports whether s, a JSON string's contents, is an image in
// base64, bare or as a data URL: whether its first bytes decode to an
// image format's signature.
func inlineImage(s []byte) bool {
	if bytes.HasPrefix(s, []byte("data:")) {
		i := bytes.Index(s[:min(len(s), 128)], []byte(";base64,"))
		if i < 0 {
			return false
		}
		s = s[i+len(";base64,"):]
	}
	// The first 16 characters decode to 12 bytes, the longest signature
	// read (WebP's); a JSON encoder may have escaped each / as \/.
	var enc [16]byte
	n := 0
	for i := 0; i < len(s) && n < len(enc); i++ {
		if s[i] == '\\' && i+1 < len(s) && s[i+1] == '/' {
			i++
		}
		enc[n] = s[i]
		n++
	}
	var head [12]byte
	if n < len(enc) {
		return false
	}
	if _, err := base64.StdEncoding.Decode(head[:], enc[:]); err != nil {
		return false
	}
	switch {
	case bytes.HasPrefix(head[:], []byte("\x89PNG\r\n\x1a\n")),
		bytes.HasPrefix(head[:], []byte("\xff\xd8\xff")),
		bytes.HasPrefix(head[:], []byte("GIF87a")), bytes.HasPrefix(head[:], []byte("GIF89a")),
		bytes.HasPrefix(head[:], []byte("RIFF")) && bytes.Equal(head[8:12], []byte("WEBP")):
		return true
	}
	return false
}
