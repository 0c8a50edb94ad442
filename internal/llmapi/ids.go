package llmapi

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"unicode/utf8"
)

// maxToolName is the longest tool name OpenAI's and Anthropic's APIs
// take (each refuses a longer one with 400).
const maxToolName = 64

// toolNameKeep is how much of a renamed tool's cleaned name is kept: room
// for "_" and eight hex digits of its hash within maxToolName.
const toolNameKeep = maxToolName - 9

// ProviderToolName is the name a client's tool is sent to a provider by
// in a translated request. It is the client's own when every provider
// format takes it: letters, digits, _ and -, at most 64 bytes. Any other
// name (an MCP tool whose prefixed name passes 64 bytes, a name with dots
// or spaces a local model took) is refused by OpenAI and Anthropic alike,
// so it is renamed: its other bytes become _, it is cut to 55 bytes, and
// "_" and a hash of the whole name follow, which keeps apart names that
// differ only in what was replaced or cut. The encoders rename a tool,
// the tool choice and the history's calls of it alike;
// Request.ToolNames maps the answer's calls back to the client's names.
func ProviderToolName(name string) string {
	if name != "" && len(name) <= maxToolName && !strings.ContainsFunc(name, notIDRune) {
		return name
	}
	return idSafe(name, toolNameKeep)
}

// ToolNames maps the tool names a translation of r renames
// (ProviderToolName) back to the client's: the provider's name of each
// tool, and of each call in the history, to the client's. It is nil when
// r renames none; an answer's call of a name not in it keeps that name.
func (r *Request) ToolNames() map[string]string {
	var m map[string]string
	r.eachToolName(func(name string) {
		if p := ProviderToolName(name); p != name {
			if m == nil {
				m = map[string]string{}
			}
			m[p] = name
		}
	})
	return m
}

// eachToolName calls f with the name of each tool of r and of each call
// in its history.
func (r *Request) eachToolName(f func(name string)) {
	for _, t := range r.Tools {
		f(t.Name)
	}
	for _, msg := range r.Messages {
		for _, p := range msg.Parts {
			if p.Kind == PartToolUse {
				f(p.Name)
			}
		}
	}
}

// checkToolNames refuses a request two of whose tool names would reach a
// provider as one (ProviderToolName): an answer's call of that name could
// not be given back to the client under the name the model meant. Names
// are renamed only when a provider would refuse them, so only a client
// that names one tool as another's renamed form sends such a request.
func (r *Request) checkToolNames() error {
	renamed := r.ToolNames()
	if renamed == nil {
		return nil // every name is sent as it is, and they differ
	}
	var err error
	r.eachToolName(func(name string) {
		p := ProviderToolName(name)
		if c, ok := renamed[p]; ok && c != name && err == nil {
			err = badRequest("tool names %q and %q would both be sent to a provider as %q; rename one", c, name, p)
		}
	})
	return err
}

// The longest tool call ids OpenAI takes: a Chat Completions call's id
// and tool_call_id, a Responses call_id (each longer one is refused with
// 400, string_above_max_length).
const (
	maxChatCallID      = 40
	maxResponsesCallID = 64
)

// openAICallID is a tool call's id as an OpenAI API takes it, in a call
// and its result alike: the provider's own id (providerCallID), itself
// when it is at most limit bytes, otherwise cut to make room for a hash
// of the whole (idSafe). A
// conversation another provider began (its ids can run to hundreds of
// bytes) may go on at OpenAI, a route's next provider; the model's new
// calls have OpenAI's own ids, so nothing is mapped back.
func openAICallID(id string, limit int) string {
	id = providerCallID(id)
	if len(id) <= limit {
		return id
	}
	return idSafe(id, limit-9)
}

// maxOpenAIUser is the longest end-user id OpenAI takes.
const maxOpenAIUser = 64

// openAIUser is an end-user id as OpenAI takes it: the id itself when it
// is at most 64 bytes, otherwise the hex SHA-256 of it, which stays one
// value for one end user (Claude Code's metadata.user_id runs to about
// 150 bytes).
func openAIUser(user string) string {
	if len(user) <= maxOpenAIUser {
		return user
	}
	sum := sha256.Sum256([]byte(user))
	return hex.EncodeToString(sum[:])
}

// anthropicToolID is a tool call's id as Anthropic takes one: the
// provider's own id (providerCallID), in letters, digits, _ and - only.
// Other providers' ids may hold more (Kimi's
// "functions.bash:0"), and a conversation one of them began may go on at
// Anthropic (a route's next provider). Such an id is rewritten the same
// way wherever it appears, the call's and its result's alike, so they
// still pair: its other bytes become _, and a hash of the whole id keeps
// apart ids that differ only in those bytes.
func anthropicToolID(id string) string {
	id = providerCallID(id)
	if id != "" && !strings.ContainsFunc(id, notIDRune) {
		return id
	}
	return "toolu_" + idSafe(id, len(id))
}

// idSafe is s in the alphabet of notIDRune, for an id or name a provider
// refuses: its other runes become _ (so it is ASCII), it is cut to keep
// bytes, and "_" and an FNV-1a hash of the whole of s (eight hex digits)
// follow, which keeps apart strings that differ only in what was replaced
// or cut.
func idSafe(s string, keep int) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	clean := strings.Map(func(r rune) rune {
		if notIDRune(r) {
			return '_'
		}
		return r
	}, s)
	return fmt.Sprintf("%s_%08x", clean[:min(len(clean), keep)], h.Sum32())
}

// notIDRune reports whether r is outside Anthropic's tool id alphabet.
func notIDRune(r rune) bool {
	return r != '_' && r != '-' && (r < '0' || r > '9') && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z')
}

// callSigMark separates, in a tool call's id as a client is given it,
// the provider's id from what the provider gave the call to be sent back
// with it (callSignature).
const callSigMark = "_iopsig_"

// maxCallSignature bounds the extra content a call's id carries; beyond,
// it is not carried (Gemini's thought signatures run to a few KiB).
const maxCallSignature = 64 << 10

// withCallSignature is the id a client is given for a tool call whose
// provider gave it extra content to be sent back with it: Gemini 3, over
// Chat Completions, signs its thinking into each call's
// extra_content.google.thought_signature (extra_content.vertex on
// Vertex), and refuses a history whose calls come back without it
// ("Function call is missing a thought_signature"). No client format has
// a place for it but the call's id, which every client sends back with
// the call and its result: the provider's id, callSigMark and the extra
// content in base64url, in the alphabet Anthropic's ids take. The id of a
// call with none, or with more than maxCallSignature, is the provider's.
func withCallSignature(id string, extra []byte) string {
	if id == "" || len(extra) > maxCallSignature || !jsonObject(extra) {
		return id
	}
	return id + callSigMark + base64.RawURLEncoding.EncodeToString(extra)
}

// callSignature splits an id withCallSignature made into the provider's
// id and the extra content (a JSON object); an id without any is
// returned whole, with none. A client that writes such an id itself
// sends its own conversation's content: only a JSON object in UTF-8
// after a provider id that is not empty is taken.
func callSignature(id string) (string, json.RawMessage) {
	i := strings.LastIndex(id, callSigMark)
	if i <= 0 {
		return id, nil
	}
	extra, err := base64.RawURLEncoding.DecodeString(id[i+len(callSigMark):])
	if err != nil || !jsonObject(extra) {
		return id, nil
	}
	return id[:i], extra
}

// jsonObject reports whether b is a JSON object in UTF-8.
func jsonObject(b []byte) bool {
	return len(b) > 0 && b[0] == '{' && utf8.Valid(b) && json.Valid(b)
}

// providerCallID is a tool call's id without what withCallSignature
// added: the provider's own.
func providerCallID(id string) string {
	id, _ = callSignature(id)
	return id
}
