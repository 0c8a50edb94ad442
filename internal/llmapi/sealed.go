package llmapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
)

// SealedPrefix opens the encrypted_content a Responses reasoning item is
// given (ResponsesRenderer.Seal): its thinking block's text and, from
// Anthropic, signature, which Anthropic needs back, whole and unchanged,
// to go on thinking in a tool loop (and DeepSeek its text,
// ClassReasoningContent). It is not encrypted: the
// client was shown the text, and the signature is Anthropic's own proof
// that the text is what its model wrote (a forged one is refused there,
// as it would be sent through the Messages API). Only this gateway reads
// it. It begins with a byte JSON bodies seldom hold, since every
// Responses body relayed untranslated is searched for it
// (UnsealResponses): bytes.Index goes at the speed of a byte search
// for a pattern whose first byte is rare, and falls back to a scan many
// times slower for one whose first byte is frequent, as a quote or a
// letter is (BenchmarkUnsealResponses).
const SealedPrefix = "~iop.thinking.v1:"

// sealedThinking is a sealed block's payload.
type sealedThinking struct {
	Text      string `json:"text"`
	Signature string `json:"signature"`
}

// sealThinking seals a thinking block for a Responses reasoning item.
func sealThinking(text, signature string) string {
	b, _ := json.Marshal(sealedThinking{Text: text, Signature: signature})
	return SealedPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// openThinking is the thinking block a sealed encrypted_content carries;
// where names the item for the error a malformed one is refused with.
func openThinking(sealed, where string) (Part, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(sealed, SealedPrefix))
	var t sealedThinking
	if err == nil {
		err = json.Unmarshal(raw, &t)
	}
	if err != nil {
		return Part{}, badRequest("%s.encrypted_content is not a reasoning item this gateway gave", where)
	}
	return Part{Kind: PartThinking, Text: t.Text, Signature: t.Signature}, nil
}

// sealedMark begins both SealedPrefix and sealedCompactionPrefix: one
// search of a body finds either.
var sealedMark = []byte("~iop.")

// UnsealResponses returns a Responses request body ready to be relayed
// untranslated to a Responses provider (a route's next provider after
// one the Edge translated for): without the reasoning items the gateway
// sealed (SealedPrefix), which that provider would refuse for content it
// did not seal, and with each compaction item the gateway made
// (sealedCompactionPrefix) in the place of the user message of its
// summary, which the provider reads. A body that holds none is returned
// as it is.
func UnsealResponses(body []byte) ([]byte, error) {
	f, items, err := markedArray(body, "input", sealedMark)
	if err != nil {
		return nil, err
	}
	if items == nil {
		return body, nil
	}
	items, changed, err := editElems(items, sealedMark, func(it []byte) ([]byte, bool, error) {
		var r struct {
			Type             string `json:"type"`
			EncryptedContent string `json:"encrypted_content"`
		}
		switch {
		case json.Unmarshal(it, &r) != nil:
		case r.Type == "reasoning" && strings.HasPrefix(r.EncryptedContent, SealedPrefix):
			return nil, true, nil
		case r.Type == "compaction" && strings.HasPrefix(r.EncryptedContent, sealedCompactionPrefix):
			text, err := openCompaction(r.EncryptedContent, "input")
			return mustJSON(userItem(text)), true, err
		}
		return it, false, nil
	})
	if err != nil {
		return nil, err
	}
	if !changed {
		return body, nil
	}
	return f.Splice("input", joinArray(items)), nil
}

// markedArray returns body's fields and the elements of its JSON array
// field key, when body holds mark and key is an array; otherwise nil
// elements (and an error only for a body that is no JSON object).
func markedArray(body []byte, key string, mark []byte) (Fields, [][]byte, error) {
	if !bytes.Contains(body, mark) {
		return Fields{}, nil, nil
	}
	f, err := Scan(body, key)
	if err != nil {
		return Fields{}, nil, err
	}
	raw := f.Raw(key)
	if len(raw) == 0 || raw[0] != '[' {
		return f, nil, nil
	}
	return f, arrayElems(raw), nil
}

// editElems passes each of elems that holds mark to edit, which returns
// what takes its place (nil: nothing) and whether that differs from it;
// an element without mark is not decoded. It reuses elems' array and
// reports whether any element changed.
func editElems(elems [][]byte, mark []byte, edit func([]byte) ([]byte, bool, error)) ([][]byte, bool, error) {
	out, changed := elems[:0], false
	for _, e := range elems {
		if bytes.Contains(e, mark) {
			repl, ch, err := edit(e)
			if err != nil {
				return nil, false, err
			}
			changed = changed || ch
			if e = repl; e == nil {
				continue
			}
		}
		out = append(out, e)
	}
	return out, changed, nil
}

// foreignThinkingMark opens the signature of a thinking block that holds
// an OpenAI reasoning item's state (openAIReasoningPrefix); searched for
// in every Anthropic body relayed untranslated, it begins with a rare
// byte, as SealedPrefix does.
var foreignThinkingMark = []byte(openAIReasoningPrefix)

// DropForeignThinking returns an Anthropic Messages request body without
// the thinking blocks whose signature holds an OpenAI reasoning model's
// state (the Edge gave them to the client when such a model answered it
// through a translation): relayed untranslated to Anthropic, a route's
// next provider, the request would be refused for a signature Anthropic
// did not make. When that leaves the final assistant turn of a tool loop
// without its thinking, which Anthropic requires while thinking is on,
// thinking is turned off for the request, as a translation does
// (toolLoopWithoutThinking). A body that holds no such block is returned
// as it is.
func DropForeignThinking(body []byte) ([]byte, error) {
	f, msgs, err := markedArray(body, "messages", foreignThinkingMark)
	if err != nil {
		return nil, err
	}
	if msgs == nil {
		return body, nil
	}
	msgs, dropped, err := editElems(msgs, foreignThinkingMark, func(m []byte) ([]byte, bool, error) {
		var msg map[string]json.RawMessage
		if json.Unmarshal(m, &msg) != nil || len(msg["content"]) == 0 || msg["content"][0] != '[' {
			return m, false, nil // a string content, or a shape Anthropic will refuse itself
		}
		blocks, changed, _ := editElems(arrayElems(msg["content"]), foreignThinkingMark, func(b []byte) ([]byte, bool, error) {
			var t struct {
				Type      string `json:"type"`
				Signature string `json:"signature"`
			}
			if json.Unmarshal(b, &t) == nil && t.Type == "thinking" && strings.HasPrefix(t.Signature, openAIReasoningPrefix) {
				return nil, true, nil
			}
			return b, false, nil
		})
		if !changed {
			return m, false, nil
		}
		msg["content"] = joinArray(blocks)
		b, err := json.Marshal(msg)
		return b, true, err
	})
	if err != nil {
		return nil, err
	}
	if !dropped {
		return body, nil
	}
	body = f.Splice("messages", joinArray(msgs))
	if !lastTurnCallsWithoutThinking(msgs) {
		return body, nil
	}
	f, err = Scan(body, "thinking")
	if err != nil {
		return nil, err
	}
	var thinking struct {
		Type string `json:"type"`
	}
	if t := f.Raw("thinking"); t == nil || json.Unmarshal(t, &thinking) != nil || thinking.Type == "disabled" {
		return body, nil
	}
	return f.Splice("thinking", []byte(`{"type":"disabled"}`)), nil
}

// arrayElems is the elements of raw, a JSON array cut from a scanned body
// (so valid), as slices of it: nothing is decoded.
func arrayElems(raw []byte) [][]byte {
	var out [][]byte
	i := skipWS(raw, 1)
	for i < len(raw) && raw[i] != ']' {
		end := skipValue(raw, i)
		out = append(out, raw[i:end])
		i = skipWS(raw, end)
		if i < len(raw) && raw[i] == ',' {
			i = skipWS(raw, i+1)
		}
	}
	return out
}

// joinArray is the JSON array of elems.
func joinArray(elems [][]byte) []byte {
	n := 2 + len(elems)
	for _, e := range elems {
		n += len(e)
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, e := range elems {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e...)
	}
	return append(out, ']')
}

// lastTurnCallsWithoutThinking reports whether the last assistant message
// of msgs calls a tool without a thinking block first.
func lastTurnCallsWithoutThinking(msgs [][]byte) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		f, err := Scan(msgs[i], "role", "content")
		if err != nil {
			return false
		}
		if role, _ := f.String("role"); role != "assistant" {
			continue
		}
		var blocks []json.RawMessage
		if json.Unmarshal(f.Raw("content"), &blocks) != nil {
			return false // text alone: no tool loop
		}
		return callsWithoutThinking(blocks)
	}
	return false
}

// callsWithoutThinking reports whether an assistant turn's blocks call a
// tool without a thinking block first.
func callsWithoutThinking(blocks []json.RawMessage) bool {
	called, first := false, ""
	for i, b := range blocks {
		var t struct {
			Type string `json:"type"`
		}
		json.Unmarshal(b, &t)
		if i == 0 {
			first = t.Type
		}
		called = called || t.Type == "tool_use"
	}
	return called && first != "thinking" && first != "redacted_thinking"
}
