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
// it.
const SealedPrefix = "iop.thinking.v1:"

var sealedPrefix = []byte(SealedPrefix)

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

// DropSealedReasoning returns a Responses request body without the
// reasoning items whose encrypted_content is sealed (SealedPrefix): a
// request relayed untranslated to a Responses provider (a route's next
// provider after Anthropic) would be refused for content that provider
// did not seal. A body that holds none is returned as it is.
func DropSealedReasoning(body []byte) ([]byte, error) {
	if !bytes.Contains(body, sealedPrefix) {
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
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, err
	}
	kept := items[:0]
	for _, it := range items {
		if bytes.Contains(it, sealedPrefix) {
			var r struct {
				Type             string `json:"type"`
				EncryptedContent string `json:"encrypted_content"`
			}
			if json.Unmarshal(it, &r) == nil && r.Type == "reasoning" && strings.HasPrefix(r.EncryptedContent, SealedPrefix) {
				continue
			}
		}
		kept = append(kept, it)
	}
	if len(kept) == len(items) {
		return body, nil
	}
	out, err := json.Marshal(kept)
	if err != nil {
		return nil, err
	}
	return f.Splice("input", out), nil
}
