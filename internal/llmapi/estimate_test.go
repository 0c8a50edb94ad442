package llmapi

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// Base64 that opens as each image format does: its signature, then zeros.
const (
	pngB64  = "iVBORw0KGgoAAAAA"
	jpegB64 = "/9j/4AAQSkZJRgAB"
	gifB64  = "R0lGODlhAQABAIAA"
	webpB64 = "UklGRiQAAABXRUJQ"
	pdfB64  = "JVBERi0xLjQKJcfs"
)

// blob is b64 padded to n bytes of base64.
func blob(b64 string, n int) string { return b64 + strings.Repeat("A", n-len(b64)) }

func TestEstimateTokens(t *testing.T) {
	shot := blob(pngB64, 400_000) // a screenshot's worth
	bytesOf := func(body string) int { return (len(body) + 3) / 4 }
	withImage := func(body, payload string, images int) int {
		return bytesOf(strings.Replace(body, payload, "", images)) + images*ImageTokens
	}
	anthropic := `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
		`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + shot + `"}}]}]}`
	chat := `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,` + blob(jpegB64, 7000) +
		`"}},{"type":"image_url","image_url":{"url":"data:image/gif;base64,` + blob(gifB64, 7000) + `"}}]}]}`
	responses := `{"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"data:image/webp;base64,` + blob(webpB64, 9000) + `"}]}]}`
	escaped := `{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,\/9j\/4AAQSkZJRgAB` + strings.Repeat("A", 7000) + `"}}]}]}`
	pdf := `{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + blob(pdfB64, 8000) + `"}}]}]}`
	small := `{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + blob(pngB64, 6000) + `"}}]}]}`
	text := `{"messages":[{"role":"user","content":"` + strings.Repeat("explain base64 please ", 200) + `"}]}`
	// A quote escaped inside a string does not end it: what looks like an
	// image after it is still that string's text, and an image after
	// such a string is still an image.
	quoted := `{"messages":[{"role":"user","content":"say \"` + blob(pngB64, 7000) + `\" as text, base64"}]}`
	afterQuote := `{"messages":[{"role":"user","content":[{"type":"text","text":"a 5\" screen, ends in \\"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + blob(pngB64, 7000) + `"}}]}]}`
	for _, c := range []struct {
		name, body string
		want       int
	}{
		{"no body", "", 0},
		{"text", text, bytesOf(text)},
		{"anthropic image", anthropic, withImage(anthropic, shot, 1)},
		{"chat jpeg and gif data URLs", chat, bytesOf(strings.NewReplacer("data:image/jpeg;base64,"+blob(jpegB64, 7000), "", "data:image/gif;base64,"+blob(gifB64, 7000), "").Replace(chat)) + 2*ImageTokens},
		{"responses webp data URL", responses, withImage(responses, "data:image/webp;base64,"+blob(webpB64, 9000), 1)},
		{"escaped slashes", escaped, withImage(escaped, `data:image/jpeg;base64,\/9j\/4AAQSkZJRgAB`+strings.Repeat("A", 7000), 1)},
		{"a PDF counts its bytes", pdf, bytesOf(pdf)},
		{"an image under 6,400 bytes counts its bytes", small, bytesOf(small)},
		{"an escaped quote", quoted, bytesOf(quoted)},
		{"after escaped quotes and backslashes", afterQuote, withImage(afterQuote, "data:image/png;base64,"+blob(pngB64, 7000), 1)},
	} {
		if got := EstimateTokens([]byte(c.body)); got != c.want {
			t.Errorf("%s: EstimateTokens = %d, want %d", c.name, got, c.want)
		}
	}
	if got := EstimateTokens([]byte(anthropic)); got > 2000 {
		t.Errorf("a screenshot of %d bytes is estimated at %d tokens", len(shot), got)
	}
}

// FuzzEstimateTokens holds EstimateTokens, on any bytes, to the rule it
// states: a body that does not say "base64" is its bytes / 4; in one that
// is valid JSON, the strings it takes for images are the strings
// encoding/json reads there (their raw bytes found by the decoder's
// offsets), so no image is found across a string's end or inside a key's
// escaped quote.
func FuzzEstimateTokens(f *testing.F) {
	f.Add([]byte(`{"messages":[{"content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + blob(pngB64, 6500) + `"}}]}]}`))
	f.Add([]byte(`{"source":{"type":"base64","data":"` + blob(jpegB64, 6500) + `"},"x":"\\\"` + blob(gifB64, 6500) + `"}`))
	f.Add([]byte(`["base64","\/9j\/` + strings.Repeat("A", 6500) + `"]`))
	f.Add([]byte(`"base64 ` + blob(webpB64, 6500)))
	f.Add([]byte(`{"a":"\"","b":"\\","c":"data:image/png;base64,` + blob(pngB64, 6500) + `"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got := EstimateTokens(body)
		plain := (len(body) + 3) / 4
		if !bytes.Contains(body, base64Word) || len(body) < minInline {
			if got != plain {
				t.Fatalf("EstimateTokens = %d for a body without base64, want %d", got, plain)
			}
			return
		}
		if !json.Valid(body) {
			if got < 0 {
				t.Fatalf("EstimateTokens = %d", got)
			}
			return
		}
		n, images := len(body), 0
		dec := json.NewDecoder(bytes.NewReader(body))
		for {
			from := dec.InputOffset()
			tok, err := dec.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("a valid body: %v", err)
			}
			if _, ok := tok.(string); !ok {
				continue
			}
			to := dec.InputOffset() // after the closing quote
			open := from + int64(bytes.IndexByte(body[from:to], '"'))
			raw := body[open+1 : to-1]
			if len(raw) >= minInline && inlineImage(raw) {
				n -= len(raw)
				images++
			}
		}
		if want := (n+3)/4 + images*ImageTokens; got != want {
			t.Fatalf("EstimateTokens = %d, want %d (%d images)", got, want, images)
		}
	})
}

// BenchmarkEstimateTokens: a chat turn of text (the common request, which
// the rule answers by its length alone), a long prompt of text (scanned
// for "base64"), and a screenshot (its strings walked).
func BenchmarkEstimateTokens(b *testing.B) {
	for _, c := range []struct{ name, body string }{
		{"turn", `{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}]}`},
		{"text_200KB", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("All work and no play. ", 9300) + `"}]}`},
		{"screenshot_400KB", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + blob(pngB64, 400_000) + `"}}]}]}`},
	} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				EstimateTokens(body)
			}
		})
	}
}
