package llmapi

import "strings"

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
