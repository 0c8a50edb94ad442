package llmapi

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// compactionPrompt is the instruction a Compaction adds to the
// conversation, as the user's last words, for the model's summary.
const compactionPrompt = "Your context window is nearly full, so this conversation is about to be replaced by a short handoff: " +
	"the user's own messages, kept as they are, and a summary that you write now. Whoever carries on (you, or another model) " +
	"will see nothing else of what happened. Write that summary:\n" +
	"- the task, and the user's goals, requirements, constraints and preferences;\n" +
	"- what has been done so far and the decisions taken, with their reasons;\n" +
	"- the current state: files changed, commands run and what they showed, errors still open;\n" +
	"- what remains, as concrete next steps;\n" +
	"- exact data the next steps need (paths, names, identifiers, values, short snippets).\n" +
	"Be specific and brief, use Markdown headings and lists, and answer with the summary only: call no tools."

// CompactionSummaryPrefix opens the user message that carries a
// Compaction's summary, for the model that reads it in the next turns.
// A compaction of a conversation that was compacted before does not keep
// the earlier summary (a user message that opens with this): the new
// summary is written from it.
const CompactionSummaryPrefix = "[Compacted conversation] Earlier turns of this conversation were replaced by the summary below, " +
	"written by the assistant that worked on them; the user's messages before this one are kept as they were. " +
	"Carry on from here, and do not redo work the summary reports as done.\n\n"

// CompactionKeepTokens bounds the user messages a Compaction keeps, by
// EstimateTokens of each: the most recent ones that fit, one cut to its
// opening text where it crosses the bound.
const CompactionKeepTokens = 20000

// cutMark ends the text of a user message a compaction cut short.
const cutMark = "\n[... cut short when the conversation was compacted]"

// minKept is the least room, in estimated tokens, worth a cut message.
const minKept = 64

// Compaction is a Responses compaction request (POST
// /v1/responses/compact) for a provider that has no compaction of its
// own. OpenAI's shortens the conversation into its user messages and one
// item of its own encrypted state; a Compaction has the model write a
// summary instead, as Codex's own compaction does, and answers with the
// conversation's user messages (the most recent, within
// CompactionKeepTokens) followed by the summary as a user message that
// opens with CompactionSummaryPrefix. Every item of the answer is a
// plain message, which any provider reads in the next turns.
type Compaction struct {
	// Summarize is the request for the summary: the conversation, with
	// its tools offered but none to be called (some providers refuse a
	// history of tool calls without the tools), and compactionPrompt
	// after it. It is never streamed and asks for no JSON format.
	Summarize *Request
	// keep are the user messages kept, as Responses input items.
	keep []json.RawMessage
}

// DecodeCompactionRequest decodes a Responses compaction request: it
// takes what DecodeResponsesRequest takes (Codex sends model, input,
// instructions, tools, parallel_tool_calls, reasoning and text) and
// refuses what it refuses.
func DecodeCompactionRequest(body []byte) (*Compaction, error) {
	r, err := DecodeResponsesRequest(body)
	if err != nil {
		return nil, err
	}
	var q struct {
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return nil, badRequest("invalid request body: %v", err)
	}
	keep, err := keptUserItems(q.Input)
	if err != nil {
		return nil, err
	}
	if r.Compact {
		return nil, badRequest("input: a compaction_trigger item asks for a compaction in POST /v1/responses, not in a compaction")
	}
	r.askSummary()
	r.Stream = false
	return &Compaction{Summarize: r, keep: keep}, nil
}

// askSummary turns r, a conversation to compact, into the request for
// its summary: its tools offered but none to be called, no JSON format,
// no reasoning items sealed, and compactionPrompt as the user's last
// words. It sets r.Compact.
func (r *Request) askSummary() {
	r.Compact = true
	r.Output, r.SealReasoning = nil, false
	if len(r.Tools) > 0 {
		r.ToolChoice = &ToolChoice{Mode: "none"}
	} else {
		r.ToolChoice = nil
	}
	prompt := Part{Kind: PartText, Text: compactionPrompt}
	if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == RoleUser {
		// A tool's output ends the conversation (Codex compacts in the
		// middle of a turn too): the prompt follows it in the same turn.
		r.Messages[n-1].Parts = append(r.Messages[n-1].Parts, prompt)
	} else {
		r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: []Part{prompt}})
	}
}

// sealedCompactionPrefix opens the encrypted_content of a compaction
// item the gateway made (ResponsesRenderer.Compact): the summary, in
// base64url. It is not encrypted (the summary is the client's own
// conversation); only this gateway reads it, as the user message it
// stands for (compactionSummary). It shares its first bytes with
// SealedPrefix, so one search finds either (UnsealResponses).
const sealedCompactionPrefix = "~iop.compaction.v1:"

// sealCompaction is the encrypted_content of a compaction item that
// carries summary.
func sealCompaction(summary string) string {
	return sealedCompactionPrefix + base64.RawURLEncoding.EncodeToString([]byte(summary))
}

// openCompaction is the user message text a sealed compaction item
// stands for; where names the item for the error a malformed one is
// refused with.
func openCompaction(sealed, where string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(sealed, sealedCompactionPrefix))
	if err != nil || !utf8.Valid(raw) {
		return "", badRequest("%s.encrypted_content is not a compaction this gateway made", where)
	}
	return compactionSummary(string(raw)), nil
}

// compactionSummary is the text of the user message that carries a
// compaction's summary.
func compactionSummary(summary string) string { return CompactionSummaryPrefix + summary }

// summary is the answer's text, the summary of a compaction: its text
// blocks, trimmed and joined; ok is false when there is none, or the
// model refused.
func (s *state) summary() (text string, ok bool) {
	var b strings.Builder
	for _, p := range s.blocks {
		if p != nil && p.Kind == PartText && strings.TrimSpace(p.Text) != "" {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(strings.TrimSpace(p.Text))
		}
	}
	return b.String(), b.Len() > 0 && s.stop != StopRefusal
}

// errNoSummary fails a compaction whose answer has no summary.
var errNoSummary = &APIError{Status: http.StatusBadGateway, Type: "api_error",
	Message: "The model wrote no summary of the conversation, so it was not compacted."}

// keptUserItems are the user messages of a Responses input (a string or
// a list of items, checked by DecodeResponsesRequest) that a compaction
// keeps, in their order: the most recent within CompactionKeepTokens,
// the one that crosses the bound cut to its opening text (when at least
// minKept tokens are left), none before it. An earlier compaction's
// summary is not kept.
func keptUserItems(input json.RawMessage) ([]json.RawMessage, error) {
	var s string
	if json.Unmarshal(input, &s) == nil {
		input = mustJSON([]any{userItem(s)})
	}
	var items []json.RawMessage
	if err := json.Unmarshal(input, &items); err != nil {
		return nil, badRequest("input must be a string or a list of items")
	}
	var kept []json.RawMessage
	left := CompactionKeepTokens
	for i := len(items) - 1; i >= 0 && left >= minKept; i-- {
		var it struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(items[i], &it); err != nil {
			return nil, badRequest("input[%d] must be an object", i)
		}
		if (it.Type != "" && it.Type != "message") || it.Role != "user" {
			continue
		}
		parts, err := responsesContent(it.Content, "input")
		if err != nil {
			return nil, err
		}
		text := textOf(parts)
		if strings.HasPrefix(text, CompactionSummaryPrefix) {
			continue
		}
		if n := EstimateTokens(items[i]); n <= left {
			kept = append(kept, items[i])
			left -= n
			continue
		}
		// The message crosses the bound: its opening text, cut to what
		// is left, is kept, and nothing older. The text's bytes are cut
		// by the estimate's overshoot until the item fits (JSON escapes
		// make it longer than its text).
		for room := left * 4; ; {
			cut := cutText(text, room)
			if cut == "" {
				break
			}
			item := mustJSON(userItem(cut + cutMark))
			n := EstimateTokens(item)
			if n <= left {
				kept = append(kept, item)
				break
			}
			room = len(cut) - (n-left)*4
		}
		break
	}
	for i, j := 0, len(kept)-1; i < j; i, j = i+1, j-1 {
		kept[i], kept[j] = kept[j], kept[i]
	}
	return kept, nil
}

// userItem is a Responses user message of one text.
func userItem(text string) map[string]any {
	return map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}
}

// cutText is s cut to at most n bytes, at a rune's start; blank when
// nothing but space would be left.
func cutText(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) > n {
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	if strings.TrimSpace(s) == "" {
		return ""
	}
	return s
}

// Renderer returns the renderer of the compaction's answer, which is
// never streamed: a Responses compaction object (response.compaction)
// of id, made at created (Unix seconds), whose output is the kept user
// messages and the summary, and whose usage is the summary request's.
// The summary is the answer's text; an answer with none (a refusal, only
// tool calls) fails with 502, and the conversation stays as it was.
func (c *Compaction) Renderer(id string, created int64) Renderer {
	return &compactionRenderer{id: id, created: created, keep: c.keep}
}

// compactionRenderer renders a Compaction's answer.
type compactionRenderer struct {
	id      string
	created int64
	keep    []json.RawMessage
	st      state
}

// Event implements Renderer: the answer is only gathered.
func (r *compactionRenderer) Event(e Event) []byte {
	r.st.apply(e)
	return nil
}

// Body implements Renderer.
func (r *compactionRenderer) Body() (int, []byte) {
	if r.st.err != nil {
		return OpenAIErrorFrom(r.st.err)
	}
	summary, ok := r.st.summary()
	if !ok {
		return OpenAIErrorFrom(errNoSummary)
	}
	// The kept items leave as the client sent them (json.Marshal would
	// escape their HTML characters).
	head := mustJSON(map[string]any{"id": r.id, "object": "response.compaction", "created_at": r.created, "usage": responsesUsageOf(r.st.usage)})
	out := append(head[:len(head)-1], `,"output":[`...)
	for _, it := range r.keep {
		out = append(append(out, it...), ',')
	}
	out = append(out, mustJSON(userItem(compactionSummary(summary)))...)
	return http.StatusOK, append(out, "]}"...)
}
