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

// anthropicStream is an Anthropic Messages stream of n text deltas.
func anthropicStream(n int) []byte {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range n {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok%d \"}}\n\n", i)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":200}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
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

// BenchmarkStreamTranslateAnthropicToChat decodes an Anthropic Messages
// stream and renders it as Chat Completions chunks.
func BenchmarkStreamTranslateAnthropicToChat(b *testing.B) {
	in := anthropicStream(streamChunks)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		dec := llmapi.DecodeAnthropicStream(bytes.NewReader(in))
		r := &llmapi.ChatRenderer{ID: "c", Model: "pub", Created: 1}
		for {
			ev, err := dec.Next()
			if err == io.EOF {
				break
			}
			r.Event(ev)
		}
		dec.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*streamChunks), "ns/chunk")
}

// relayedText is 200 KB of what a coding agent's conversation holds:
// prose, paths, code and escaped quotes.
var relayedText = strings.Repeat(`The quick brown fox, in /usr/local/bin, said \"hi\" to func main() { fmt.Println(x) } -- done. `, 2200)

// BenchmarkUnsealResponses: what a Responses request relayed
// untranslated pays to be checked for items the gateway sealed (most
// hold none: a search of the body for the prefixes' first bytes).
func BenchmarkUnsealResponses(b *testing.B) {
	body := []byte(`{"model":"m","input":[{"role":"user","content":"` + relayedText + `"}]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		llmapi.UnsealResponses(body)
	}
}

// BenchmarkDropForeignThinking: what an Anthropic request relayed
// untranslated pays to be checked for thinking another provider signed
// (most hold none: a search of the body).
func BenchmarkDropForeignThinking(b *testing.B) {
	text := relayedText
	for _, c := range []struct{ name, body string }{
		{"none_200KB", `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"` + text + `"}]}`},
		{"one_200KB", `{"model":"m","max_tokens":9,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"` + text + `"},` +
			`{"role":"assistant","content":[{"type":"thinking","thinking":"r","signature":"~openai-reasoning:gAAA"},{"type":"tool_use","id":"c","name":"f","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"c","content":"r"}]}]}`},
	} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				llmapi.DropForeignThinking(body)
			}
		})
	}
}

// BenchmarkDropBillingHeader: what an Anthropic request relayed
// untranslated to a provider not of category api pays for Claude Code's
// billing header: a search of the body where it has none, and where it
// has one, its system prompt's blocks split and the header's left out.
func BenchmarkDropBillingHeader(b *testing.B) {
	text := relayedText
	msgs := `"messages":[{"role":"user","content":"` + text + `"}]`
	for _, c := range []struct{ name, body string }{
		{"none_200KB", `{"model":"m","max_tokens":9,"system":[{"type":"text","text":"S"}],` + msgs + `}`},
		{"one_200KB", `{"model":"m","max_tokens":9,` + msgs + `,"system":[` + billing + `,{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}]}`},
	} {
		body := []byte(c.body)
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				llmapi.DropBillingHeader(body)
			}
		})
	}
}
