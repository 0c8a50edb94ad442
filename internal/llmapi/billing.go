package llmapi

import (
	"bytes"
	"strings"
)

// billingPrefix begins a line Claude Code puts first in its system prompt,
// as a text block of its own: "x-anthropic-billing-header:
// cc_version=2.1.337.a23; cc_entrypoint=cli; cch=1f0e2;". Its values are
// derived from the request's content (cch from the whole body), so it
// changes from one request to the next. Anthropic reads it; to any other
// model it is noise at the very start of the prompt, where it makes every
// request's prefix new: a server that caches by prefix (vLLM, SGLang,
// llama.cpp, Ollama, and OpenAI's and DeepSeek's hosted caches) then
// prefills the whole conversation again on every turn, tens of thousands
// of tokens for Claude Code.
const billingPrefix = "x-anthropic-billing-header:"

var billingMark = []byte(billingPrefix)

// stripBillingHeader returns text without the lines it begins with that
// are Claude Code's billing header (one, as a rule), and whether there
// were any.
func stripBillingHeader(text string) (string, bool) {
	found := false
	for strings.HasPrefix(text, billingPrefix) {
		_, text, _ = strings.Cut(text, "\n")
		found = true
	}
	return text, found
}

// DropBillingHeader returns an Anthropic Messages request body without the
// billing header Claude Code begins its system prompt with (see
// billingPrefix), for a provider other than Anthropic that speaks
// Anthropic's format (a local server's Messages endpoint): a system text
// block that is only the header is left out, one that begins with it
// loses that line, a string system prompt too. Nothing else changes: the
// other blocks keep their bytes, their members and cache_control. A body
// that holds no header is returned as it came, after one search of its
// bytes; a body that is not a JSON object is an error. A translated
// request loses the header in DecodeAnthropicRequest.
func DropBillingHeader(body []byte) ([]byte, error) {
	if !bytes.Contains(body, billingMark) {
		return body, nil
	}
	f, err := Scan(body, "system")
	if err != nil {
		return nil, err
	}
	raw := f.Raw("system")
	switch {
	case len(raw) > 0 && raw[0] == '"':
		s, _ := f.String("system")
		rest, ok := stripBillingHeader(s)
		if !ok {
			return body, nil
		}
		return f.Splice("system", Quote(rest)), nil
	case len(raw) > 0 && raw[0] == '[':
		blocks, changed, err := editElems(arrayElems(raw), billingMark, func(b []byte) ([]byte, bool, error) {
			bf, err := Scan(b, "type", "text")
			if err != nil || !bf.StringIs("type", "text") {
				return b, false, nil // not a text block: Anthropic's to judge
			}
			text, _ := bf.String("text")
			rest, ok := stripBillingHeader(text)
			switch {
			case !ok:
				return b, false, nil
			case strings.TrimSpace(rest) == "":
				return nil, true, nil
			}
			return bf.Splice("text", Quote(rest)), true, nil
		})
		if err != nil || !changed {
			return body, err
		}
		return f.Splice("system", joinArray(blocks)), nil
	}
	return body, nil
}
