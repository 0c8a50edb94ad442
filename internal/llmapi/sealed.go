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
	if !bytes.Contains(body, sealedMark) {
		return body, nil
	}
	f, err := Scan(body, "input")
	if err != nil {
		return nil, err
	}
	raw := f.Raw("input")
	if len(raw) == 0 || raw[0] != '[' {
		return body, nil
	}
	items := arrayElems(raw)
	changed := false
	out := items[:0]
	for _, it := range items {
		if !bytes.Contains(it, sealedMark) {
			out = append(out, it)
			continue
		}
		var r struct {
			Type             string `json:"type"`
			EncryptedContent string `json:"encrypted_content"`
		}
		if json.Unmarshal(it, &r) != nil {
			out = append(out, it)
			continue
		}
		switch {
		case r.Type == "reasoning" && strings.HasPrefix(r.EncryptedContent, SealedPrefix):
			changed = true
		case r.Type == "compaction" && strings.HasPrefix(r.EncryptedContent, sealedCompactionPrefix):
			text, err := openCompaction(r.EncryptedContent, "input")
			if err != nil {
				return nil, err
			}
			out = append(out, mustJSON(userItem(text)))
			changed = true
		default:
			out = append(out, it)
		}
	}
	if !changed {
		return body, nil
	}
	return f.Splice("input", joinArray(out)), nil
}

// dropElems returns elems without those that hold mark and match says
// are to go; only an element that holds mark is decoded. It reuses
// elems' array.
func dropElems(elems [][]byte, mark []byte, match func([]byte) bool) [][]byte {
	kept := elems[:0]
	for _, e := range elems {
		if bytes.Contains(e, mark) && match(e) {
			continue
		}
		kept = append(kept, e)
	}
	return kept
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
	if !bytes.Contains(body, foreignThinkingMark) {
		return body, nil
	}
	f, err := Scan(body, "messages")
	if err != nil {
		return nil, err
	}
	raw := f.Raw("messages")
	if len(raw) == 0 || raw[0] != '[' {
		return body, nil
	}
	msgs := arrayElems(raw)
	dropped := false
	for i, m := range msgs {
		if !bytes.Contains(m, foreignThinkingMark) {
			continue // most messages: not decoded
		}
		var msg map[string]json.RawMessage
		if json.Unmarshal(m, &msg) != nil || len(msg["content"]) == 0 || msg["content"][0] != '[' {
			continue // a string content, or a shape Anthropic will refuse itself
		}
		blocks := arrayElems(msg["content"])
		kept := dropElems(blocks, foreignThinkingMark, func(b []byte) bool {
			var t struct {
				Type      string `json:"type"`
				Signature string `json:"signature"`
			}
			return json.Unmarshal(b, &t) == nil && t.Type == "thinking" && strings.HasPrefix(t.Signature, openAIReasoningPrefix)
		})
		if len(kept) == len(blocks) {
			continue
		}
		dropped = true
		msg["content"] = joinArray(kept)
		b, err := json.Marshal(msg)
		if err != nil {
			return nil, err
		}
		msgs[i] = b
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
