package llmapi_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/sse"
)

// Translation overhead against same-format pass-through, per request and
// per streamed chunk:
//
//	go test -run '^$' -bench . ./internal/llmapi

const chatReq = `{"model":"pub","stream":true,"messages":[{"role":"system","content":"Be terse."},{"role":"user","content":"What is the weather in Paris and Seoul today? Answer in one line."}],"tools":[{"type":"function","function":{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],"max_tokens":256}`

func BenchmarkRequestPassThrough(b *testing.B) {
	body := []byte(chatReq)
	for b.Loop() {
		f, _ := llmapi.Scan(body, "model", "stream", "stream_options")
		f.Splice("model", llmapi.Quote("upstream"))
	}
}

func BenchmarkRequestTranslateChatToAnthropic(b *testing.B) {
	body := []byte(chatReq)
	for b.Loop() {
		llmapi.Scan(body, "model", "stream", "stream_options")
		ir, _ := llmapi.DecodeChatRequest(body)
		llmapi.EncodeAnthropic(ir, "upstream")
	}
}

func chatStream(n int) []byte {
	var b strings.Builder
	b.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	for i := range n {
		fmt.Fprintf(&b, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok%d "},"finish_reason":null}]}`+"\n\n", i)
	}
	b.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n")
	b.WriteString(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":200,"total_tokens":205}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return []byte(b.String())
}

const streamChunks = 200

// BenchmarkStreamPassThrough is what the tunnel path does to a stream:
// parse events, re-frame them unchanged.
func BenchmarkStreamPassThrough(b *testing.B) {
	in := chatStream(streamChunks)
	b.SetBytes(int64(len(in)))
	var out []byte
	for b.Loop() {
		r := sse.NewReader(bytes.NewReader(in), 0)
		for {
			ev, err := r.Next()
			if err != nil {
				break
			}
			out = sse.AppendEvent(out[:0], ev.Type, ev.Data)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streamChunks), "ns/chunk")
}

// BenchmarkStreamTranslateChatToAnthropic decodes a Chat Completions
// stream and renders it as Anthropic Messages: a 200-chunk stream, and a
// long answer of 8,000 chunks, whose cost per chunk must stay the same (a
// renderer keeps the whole text for its terminal events and body).
func BenchmarkStreamTranslateChatToAnthropic(b *testing.B) {
	b.Run("200", func(b *testing.B) { benchTranslate(b, streamChunks) })
	b.Run("8000", func(b *testing.B) { benchTranslate(b, 8000) })
}

func benchTranslate(b *testing.B, chunks int) {
	in := chatStream(chunks)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		dec := llmapi.DecodeChatStream(bytes.NewReader(in))
		r := &llmapi.AnthropicRenderer{ID: "m", Model: "pub"}
		for {
			ev, err := dec.Next()
			if err == io.EOF {
				break
			}
			r.Event(ev)
		}
		dec.Release() // as the Edge does
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunks), "ns/chunk")
}
