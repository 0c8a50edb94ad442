package llmapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var chatChunkSeeds = []string{
	`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null,"logprobs":null}]}`,
	`{"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"finish_reason":null}]}`,
	`{"id":"c","model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	`{"id":"c","model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`,
	`{"id":"c","choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\""}}]}}]}`,
	`{"id":"c","choices":[{"delta":{"reasoning_content":"hmm"}},{"delta":{"content":"b"}}]}`,
	`{"id":"c","choices":[{"delta":{"reasoning":"think"}}]}`,
	`{"ID":"c","choices":[{"delta":{"content":"a"}}]}`,
	`{"id":"c","choices":[{"Delta":{"content":"a"}}]}`,
	`{"id":"c","choices":[{"delta":{"Content":"a"}}]}`,
	`{"id":"a","id":"b","choices":null}`,
	`{"id":"\u0063\n","model":"caf\u00e9 ünï","choices":[{"delta":{"content":"\ud83d\ude00 q\"\\"}}]}`, // escapes
	"{\"choices\":[{\"delta\":{\"content\":\"bad \xff utf8 \xed\xa0\x80\"}}]}",                         // invalid UTF-8: U+FFFD
	`{"id":null,"model":null,"choices":[null]}`,
	`{"id":1,"choices":[]}`,
	`{"id":"c","choices":[{"delta":"x"}]}`,
	`{"id":"c","choices":[{"delta":{"content":1}}]}`,
	`{"id":"c","choices":[{"finish_reason":7}]}`,
	`{"id":"c","choices":{}}`,
	`{"error":{"message":"boom","type":"server_error"}}`,
	`{"error":"boom"}`,
	`[1,2]`, `null`, `{}`, `{"choices" : [ { "delta" : { "content" : "spaced" } } , {} ] }`,
	`{"ch\u006fices":[{"delta":{"content":"escaped key"}}]}`,
	`{"choices":[{"delta":{"content":"a","content":"b"}}]}`,
	`{"choices":[{"delta":{"tool_calls":null,"content":"x"}}]}`,
	`{"usage":null,"error":null,"choices":[{"delta":null,"finish_reason":null}]}`,
}

// checkWalk holds a decoder with a walk (decode, falling back to
// encoding/json) to json.Unmarshal: the same value and the same refusal,
// whether the walk or encoding/json read it; and whatever the walk
// accepts, encoding/json accepts equally.
func checkWalk[T any](t *testing.T, data []byte, walk func([]byte, *T) bool, decode func([]byte, *T) error) {
	t.Helper()
	var want T
	werr := json.Unmarshal(data, &want)
	var fast T
	if walk(data, &fast) {
		if werr != nil {
			t.Fatalf("%q: the walk accepted what encoding/json refuses (%v)", data, werr)
		}
		if d := cmp.Diff(want, fast, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("%q: the walk read (-encoding/json +walk):\n%s", data, d)
		}
	}
	var got T
	gerr := decode(data, &got)
	if (gerr != nil) != (werr != nil) {
		t.Fatalf("%q: decode error %v, encoding/json %v", data, gerr, werr)
	}
	if werr == nil {
		if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("%q: decode read (-encoding/json +got):\n%s", data, d)
		}
	}
}

func checkChatChunk(t *testing.T, data []byte) { checkWalk(t, data, fastChatChunk, decodeChatChunk) }

func checkAnthropicEvent(t *testing.T, data []byte) {
	checkWalk(t, data, fastAnthropicDelta, decodeAnthropicEvent)
}

func TestChatChunk(t *testing.T) {
	walked := 0
	for _, s := range chatChunkSeeds {
		checkChatChunk(t, []byte(s))
		var c chatChunk
		if fastChatChunk([]byte(s), &c) {
			walked++
		}
	}
	// The usual chunks take the walk (else the test above tests nothing
	// but encoding/json against itself).
	for _, s := range chatChunkSeeds[:3] {
		var c chatChunk
		if !fastChatChunk([]byte(s), &c) {
			t.Errorf("%s went to encoding/json", s)
		}
	}
	if walked < 8 {
		t.Errorf("only %d seeds took the walk", walked)
	}
}

// FuzzChatChunk is checkChatChunk on arbitrary bytes.
func FuzzChatChunk(f *testing.F) {
	for _, s := range chatChunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkChatChunk(t, data) })
}

var anthropicEventSeeds = []string{
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tok "}}`,
	`{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"c2ln"}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\u00e9 \ud83d\ude00 q\"\\"}}`,
	"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"bad \xff\"}}",
	`{"type":"content_block_delta","index":-0,"delta":null}`,
	`{"type":"content_block_delta","index":1.0,"delta":{}}`,
	`{"type":"content_block_delta","index":1e2,"delta":{}}`,
	`{"type":"content_block_delta","index":99999999999999999999,"delta":{}}`,
	`{"type":"content_block_delta","index":"1","delta":{}}`,
	`{"type":"content_block_delta","Index":2,"delta":{"text":"x"}}`,
	`{"type":"content_block_delta","delta":{"Text":"x"}}`,
	`{"type":"content_block_delta","delta":{"text":"a","text":"b"}}`,
	`{"type":"content_block_delta","delta":{"text":7}}`,
	`{"type":"content_block_delta","delta":"x"}`,
	`{"type":"content_block_delta","usage":{"output_tokens":3}}`,
	`{"type":"content_block_delta","message":null,"content_block":null,"usage":null,"error":null,"delta":{"stop_reason":null}}`,
	`{"type":"content_block_d\u0065lta","index":0,"delta":{"text":"escaped type"}}`,
	`{"type":"message_start","message":{"id":"msg_1","model":"m","usage":{"input_tokens":5}}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`,
	`[]`, `null`, `{"type":null}`,
}

func TestAnthropicEvent(t *testing.T) {
	for _, s := range anthropicEventSeeds {
		checkAnthropicEvent(t, []byte(s))
	}
	for _, s := range anthropicEventSeeds[:6] {
		var m anthropicEvent
		if !fastAnthropicDelta([]byte(s), &m) {
			t.Errorf("%s went to encoding/json", s)
		}
	}
}

// FuzzAnthropicEvent is checkAnthropicEvent on arbitrary bytes.
func FuzzAnthropicEvent(f *testing.F) {
	for _, s := range anthropicEventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkAnthropicEvent(t, data) })
}

// TestStreamedKeepsNoText: a Streamed renderer keeps none of the text,
// thinking or signatures it renders (a stream's memory does not grow
// with its answer), keeps tool arguments (a custom call's input leaves
// whole at its end), and refuses to render a Body it could not fill.
func TestStreamedKeepsNoText(t *testing.T) {
	events := []Event{
		{Kind: EvStart, ID: "x", Model: "m"},
		{Kind: EvBlockStart, Index: 0, Block: BlockThinking},
		{Kind: EvDelta, Index: 0, Block: BlockThinking, Text: "hmm", Signature: "sig"},
		{Kind: EvBlockStop, Index: 0, Block: BlockThinking},
		{Kind: EvBlockStart, Index: 1, Block: BlockText},
		{Kind: EvDelta, Index: 1, Block: BlockText, Text: "hello"},
		{Kind: EvBlockStop, Index: 1, Block: BlockText},
		{Kind: EvBlockStart, Index: 2, Block: BlockToolUse, ToolID: "t1", Name: "f"},
		{Kind: EvDelta, Index: 2, Block: BlockToolUse, Text: `{"input":"x"}`},
		{Kind: EvBlockStop, Index: 2, Block: BlockToolUse},
		{Kind: EvStop, Reason: StopToolUse},
	}
	chat := &ChatRenderer{ID: "c", Freeform: map[string]bool{"f": true}, Streamed: true}
	anth := &AnthropicRenderer{ID: "m", Streamed: true}
	for _, r := range []struct {
		name string
		r    Renderer
		st   *state
	}{{"chat", chat, &chat.st}, {"anthropic", anth, &anth.st}} {
		var out []byte
		for _, e := range events {
			out = append(out, r.r.Event(e)...)
		}
		for _, want := range []string{"hmm", "hello"} {
			if !strings.Contains(string(out), want) {
				t.Fatalf("%s: %q not rendered: %s", r.name, want, out)
			}
		}
		for i, b := range r.st.bufs {
			if b.text.Len() != 0 || b.sig.Len() != 0 || r.st.blocks[i].Text != "" || r.st.blocks[i].Signature != "" {
				t.Fatalf("%s: block %d kept text %q signature %q", r.name, i, b.text.String(), b.sig.String())
			}
		}
		if got := r.st.bufs[2].args.String(); got != `{"input":"x"}` {
			t.Fatalf("%s: tool arguments %q", r.name, got)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("%s: Body of a Streamed renderer did not panic", r.name)
				}
			}()
			r.r.Body()
		}()
	}
}
