package llmapi

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/iop-dev/iop/execution"
)

// Thinking and reasoning mapping. Anthropic has a thinking token budget,
// OpenAI a reasoning effort. Translating a request:
//   - from an adaptive Claude client, output_config.effort becomes the
//     reasoning effort (xhigh and max become high);
//   - to Chat Completions, a budget becomes reasoning_effort "low" (under
//     4,096 tokens), "medium" (under 16,384) or "high"; thinking blocks in
//     the history are dropped, because Chat Completions has no place for
//     them and strict servers reject unknown fields, but for a model that
//     must be given them back (ClassReasoningContent: DeepSeek), whose
//     assistant messages carry them as reasoning_content;
//   - to Anthropic, an effort becomes a budget of 2,048 (minimal, low),
//     8,192 (medium), 24,576 (high) or 32,768 (xhigh) tokens, or none
//     (none), with max_tokens raised above it when needed; an effort of
//     another name is refused; a Claude model that thinks adaptively
//     (AdaptiveThinkingModel: Opus and Sonnet 4.6 and later, the newest
//     of which refuse a budget) is asked with thinking {"type":
//     "adaptive", "display": "summarized"} and output_config.effort low,
//     medium or high instead; thinking blocks are kept only with a
//     signature Anthropic issued, since it rejects any other; a request
//     that forces a tool, or a turn that continues a tool loop whose call
//     has no such block, runs without thinking, which Anthropic refuses
//     there (see toolLoopWithoutThinking);
//   - to Responses, either becomes reasoning.effort (a budget through the
//     same thresholds as for Chat Completions) with summary "auto", so
//     the reasoning comes back as text; thinking blocks in the history are
//     dropped, because a Responses reasoning item needs the provider's own
//     item id or encrypted content, but for one an OpenAI reasoning model
//     gave: its reasoning item's encrypted content, asked for (include)
//     and kept as the block's signature (openAIReasoningPrefix), goes
//     back to such a model as that item, so that a client of another
//     format (Claude Code on GPT-5) keeps the model thinking through a
//     tool loop; Anthropic, which cannot read it, gets no such block;
//   - to Chat Completions and Responses, no effort goes to a model that
//     takes none (ClassOpenAIChat: GPT-4o, GPT-4.1 and older, known by
//     name or given), which refuses the request with one; the answer
//     comes without reasoning.
// Translating an answer, thinking or reasoning text becomes the client
// format's own: Anthropic thinking blocks, Chat Completions
// reasoning_content, a Responses reasoning item with a summary.

func effortFor(budget int) string {
	switch {
	case budget <= 0:
		return ""
	case budget < 4096:
		return "low"
	case budget < 16384:
		return "medium"
	}
	return "high"
}

// budgetFor is the thinking budget an OpenAI reasoning effort asks for;
// false for an effort it does not know, which is refused rather than
// guessed (or silently run without thinking).
func budgetFor(effort string) (int, bool) {
	switch effort {
	case "", "none":
		return 0, true
	case "minimal", "low":
		return 2048, true
	case "medium":
		return 8192, true
	case "high":
		return 24576, true
	case "xhigh":
		return 32768, true
	}
	return 0, false
}

func textOf(ps []Part) string {
	var b strings.Builder
	for _, p := range ps {
		if p.Kind == PartText {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

func imageURL(p Part) string {
	if p.ImageURL != "" {
		return p.ImageURL
	}
	return "data:" + p.MediaType + ";base64," + p.Data
}

// openAIFormat is an output format as OpenAI writes it: the json_schema
// object (name, schema, strict) for a schema, nil for JSON mode. OpenAI
// requires a name; a format from Anthropic has none, so it gets one.
func openAIFormat(f *OutputFormat) map[string]any {
	if f.Schema == nil {
		return nil
	}
	o := map[string]any{"name": cmp.Or(f.Name, "output"), "schema": f.Schema}
	if f.Strict != nil {
		o["strict"] = *f.Strict
	}
	return o
}

// CompletionTokensModel reports whether model names one of OpenAI's
// reasoning models (the o-series, GPT-5 and later), whose Chat Completions
// take the output limit as max_completion_tokens and refuse max_tokens.
// Any other model, an OpenAI-compatible server's included, is sent
// max_tokens, the field every such server reads (Ollama ignores
// max_completion_tokens). A vendor prefix such as "openai/" is skipped.
func CompletionTokensModel(model string) bool {
	m := modelName(model)
	digitAt := func(i int) bool { return i < len(m) && m[i] >= '0' && m[i] <= '9' }
	switch {
	case strings.HasPrefix(m, "o") && digitAt(1):
		return true
	case strings.HasPrefix(m, "gpt-") && digitAt(4) && !digitAt(5):
		// gpt-5 and later. gpt-4o, gpt-4.1, gpt-oss and Azure's gpt-35-turbo
		// take max_tokens.
		return m[4] >= '5'
	}
	return false
}

// NonReasoningModel reports whether model names one of OpenAI's models
// that take no reasoning effort (GPT-4, GPT-4o, GPT-4.1, GPT-3.5 and
// ChatGPT-4o): they refuse reasoning_effort and reasoning.effort with a
// 400, so a translated effort or thinking budget, a hint, is left out
// for them. A vendor prefix such as "openai/" is skipped; any other model
// gets the effort (gpt-oss, Qwen3 and other open models read it, servers
// that do not ignore it).
func NonReasoningModel(model string) bool {
	m := modelName(model)
	for _, p := range nonReasoningPrefixes {
		if strings.HasPrefix(m, p) {
			return true
		}
	}
	return false
}

var nonReasoningPrefixes = []string{"gpt-4", "gpt-3.5", "gpt-35", "chatgpt-"}

// ModelClass is what the OpenAI-format encoders need to know of a model
// besides its name: how it takes an output limit and whether it takes a
// reasoning effort. Most names tell (ClassByName); a deployment named
// otherwise (Azure's are the operator's own) is given its class.
type ModelClass uint8

const (
	// ClassByName reads the class from the model's name:
	// CompletionTokensModel, NonReasoningModel, ClassReasoningContent
	// for a DeepSeek model ("deepseek-reasoner",
	// "deepseek-ai/DeepSeek-V3.2"), else ClassOther.
	ClassByName ModelClass = iota
	// ClassOther takes max_tokens and a reasoning effort (open models and
	// the servers that host them; one that has no use for the effort
	// ignores it).
	ClassOther
	// ClassOpenAIReasoning is one of OpenAI's reasoning models (the
	// o-series, GPT-5 and later): max_completion_tokens, and an effort;
	// no temperature or top_p, which these models refuse but at their
	// default (setSampling).
	ClassOpenAIReasoning
	// ClassOpenAIChat is one of OpenAI's models that take no reasoning
	// effort (GPT-4o, GPT-4.1 and older): max_tokens, and no effort.
	ClassOpenAIChat
	// ClassReasoningContent is a model that must be given its reasoning
	// back, in Chat Completions' reasoning_content on each assistant
	// message: DeepSeek's thinking mode refuses a tool loop without it
	// ("Missing reasoning_content field in the assistant message"). It
	// is otherwise ClassOther. Other servers refuse the field (Groq,
	// Cerebras), so only this class is sent it.
	ClassReasoningContent
)

// Of is c for model: c itself, or for ClassByName the class model's name
// says.
func (c ModelClass) Of(model string) ModelClass {
	switch {
	case c != ClassByName:
		return c
	case NonReasoningModel(model):
		return ClassOpenAIChat
	case CompletionTokensModel(model):
		return ClassOpenAIReasoning
	case strings.Contains(modelName(model), "deepseek"):
		return ClassReasoningContent
	}
	return ClassOther
}

// modelName is model without a vendor prefix ("openai/"), in lower case,
// as CompletionTokensModel and NonReasoningModel read it.
func modelName(model string) string {
	return strings.ToLower(model[strings.LastIndexByte(model, '/')+1:])
}

// effortOf is the reasoning effort r asks of a model of class c: its
// own, or its thinking budget's, and none for an OpenAI model that takes
// none.
func effortOf(r *Request, c ModelClass) string {
	if c == ClassOpenAIChat {
		return ""
	}
	if r.ReasoningEffort != "" {
		return r.ReasoningEffort
	}
	return effortFor(r.ThinkingBudget)
}

// chatPart is a text, image or document part of a Chat Completions user
// message. A document goes as a file part, which takes data, not a URL.
func chatPart(p Part, msg int) (map[string]any, error) {
	switch p.Kind {
	case PartText:
		return map[string]any{"type": "text", "text": p.Text}, nil
	case PartImage:
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": imageURL(p)}}, nil
	case PartDocument:
		if p.URL != "" {
			return nil, badRequest("messages[%d]: a document by URL cannot be sent to a Chat Completions provider (its file part takes data)", msg)
		}
		return map[string]any{"type": "file", "file": openAIFilePart(p)}, nil
	}
	return nil, badRequest("messages[%d]: %s in a user turn", msg, p.Kind)
}

// EncodeChat renders r as a Chat Completions request for model, of the
// class its name says (ClassByName).
func EncodeChat(r *Request, model string) ([]byte, error) {
	return EncodeChatAs(r, model, ClassByName)
}

// EncodeChatAs renders r as a Chat Completions request for model of
// class c. Streams always ask for usage. The output limit is max_tokens,
// or max_completion_tokens for an OpenAI reasoning model. A tool message
// holds text only, so a tool result's images follow in a user message
// after the turn's tool messages.
func EncodeChatAs(r *Request, model string, c ModelClass) ([]byte, error) {
	c = c.Of(model)
	var msgs []map[string]any
	if len(r.System) > 0 {
		msgs = append(msgs, map[string]any{"role": "system", "content": strings.Join(r.System, "\n\n")})
	}
	for i, m := range r.Messages {
		switch m.Role {
		case RoleUser:
			var content []any
			for _, p := range m.Parts {
				switch p.Kind {
				case PartToolResult:
					text := textOf(p.Content)
					if p.IsError && !strings.HasPrefix(text, "Error") {
						text = "Error: " + text
					}
					msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": openAICallID(p.ToolUseID, maxChatCallID), "content": text})
					// A tool message holds text only: a result's images and
					// documents (a screenshot, a PDF read) follow in the
					// user message that comes after the turn's tool
					// messages, named by the call they came from.
					for _, c := range p.Content {
						if c.Kind != PartImage && c.Kind != PartDocument {
							continue
						}
						part, err := chatPart(c, i)
						if err != nil {
							return nil, err
						}
						content = append(content, map[string]any{"type": "text", "text": fmt.Sprintf("%s from the result of tool call %s:", map[PartKind]string{PartImage: "Image", PartDocument: "Document"}[c.Kind], openAICallID(p.ToolUseID, maxChatCallID))}, part)
					}
				case PartText, PartImage, PartDocument:
					part, err := chatPart(p, i)
					if err != nil {
						return nil, err
					}
					content = append(content, part)
				case PartThinking:
				default:
					return nil, badRequest("messages[%d]: %s in a user turn", i, p.Kind)
				}
			}
			if len(content) == 1 && content[0].(map[string]any)["type"] == "text" {
				msgs = append(msgs, map[string]any{"role": "user", "content": content[0].(map[string]any)["text"]})
			} else if len(content) > 0 {
				msgs = append(msgs, map[string]any{"role": "user", "content": content})
			}
		case RoleAssistant:
			msg := map[string]any{"role": "assistant"}
			var calls []any
			var text, reasoning strings.Builder
			for _, p := range m.Parts {
				switch p.Kind {
				case PartText:
					text.WriteString(p.Text)
				case PartToolUse:
					args := string(p.Input)
					if strings.TrimSpace(args) == "" {
						args = "{}"
					}
					id, extra := callSignature(p.ID)
					call := map[string]any{"id": openAICallID(id, maxChatCallID), "type": "function", "function": map[string]any{"name": ProviderToolName(p.Name), "arguments": args}}
					if extra != nil && c != ClassOpenAIReasoning && c != ClassOpenAIChat {
						// What the provider gave the call (Gemini's thought
						// signature) goes back with it; OpenAI's own
						// models refuse a field they do not know.
						call["extra_content"] = extra
					}
					calls = append(calls, call)
				case PartThinking:
					// Dropped (see the mapping above), but for a model
					// that must be given it back.
					reasoning.WriteString(p.Text)
				default:
					return nil, badRequest("messages[%d]: %s in an assistant turn", i, p.Kind)
				}
			}
			if c == ClassReasoningContent {
				// Empty when the client kept none: the field must be
				// there all the same.
				msg["reasoning_content"] = reasoning.String()
			}
			msg["content"] = text.String()
			if calls != nil {
				msg["tool_calls"] = calls
				if text.Len() == 0 {
					msg["content"] = nil
				}
			}
			msgs = append(msgs, msg)
		}
	}
	if len(msgs) == 0 || len(msgs) == 1 && len(r.System) > 0 {
		// Every message was empty: no turn to answer.
		return nil, errNoConversation("messages: every message is empty")
	}
	out := map[string]any{"model": model, "messages": msgs, "stream": r.Stream}
	if r.Stream {
		out["stream_options"] = map[string]any{"include_usage": true}
	}
	if r.MaxTokens > 0 {
		if c == ClassOpenAIReasoning {
			out["max_completion_tokens"] = r.MaxTokens
		} else {
			out["max_tokens"] = r.MaxTokens
		}
	}
	setSampling(out, r, c)
	if len(r.Stop) > 0 {
		out["stop"] = r.Stop
	}
	if r.User != "" {
		out["user"] = openAIUser(r.User)
	}
	if effort := effortOf(r, c); effort != "" {
		out["reasoning_effort"] = effort
	}
	if len(r.Tools) > 0 {
		var tools []any
		for _, t := range r.Tools {
			tools = append(tools, map[string]any{"type": "function", "function": t.fields("parameters", t.schema())})
		}
		out["tools"] = tools
	}
	if f := r.Output; f != nil {
		if js := openAIFormat(f); js != nil {
			out["response_format"] = map[string]any{"type": "json_schema", "json_schema": js}
		} else {
			out["response_format"] = map[string]any{"type": "json_object"}
		}
	}
	// A tool choice without tools is refused by OpenAI; with none, the
	// model answers in text, as the choice would have it.
	if tc := r.ToolChoice; tc != nil && len(r.Tools) > 0 {
		switch tc.Mode {
		case "auto", "none":
			out["tool_choice"] = tc.Mode
		case "any":
			out["tool_choice"] = "required"
		case "tool":
			out["tool_choice"] = map[string]any{"type": "function", "function": map[string]any{"name": ProviderToolName(tc.Name)}}
		}
		if tc.DisableParallel {
			out["parallel_tool_calls"] = false
		}
	}
	return json.Marshal(out)
}

// DefaultAnthropicMaxTokens is sent when the client set no output limit
// (the Messages API requires one) to a model whose limit its name does not
// tell (AnthropicMaxTokens).
const DefaultAnthropicMaxTokens = 4096

// AnthropicMaxTokens is the output limit sent to an Anthropic model when
// the client set none, read from the model's name: the most the model
// writes, so that an answer a client left unbounded (Codex and most
// OpenAI clients send no limit) is not cut short where OpenAI's models
// would have gone on. Claude Opus 4 and 4.1 take 32,000; 3.7 Sonnet and
// the later Claude 4 models 64,000 (some of them more); 3.5 Haiku and
// Sonnet 8,192; any other model, and an older Claude,
// DefaultAnthropicMaxTokens. The name is read as Anthropic, Bedrock
// ("anthropic.claude-...") and Vertex ("...@date") spell it, an alias or
// a dated version.
func AnthropicMaxTokens(model string) int {
	m, _ := claudeName(model)
	switch v, ok := claudeVersionOf(m); {
	case strings.HasPrefix(m, "3-7-sonnet"):
		return 64000
	case strings.HasPrefix(m, "3-5-"):
		return 8192
	case !ok:
		return DefaultAnthropicMaxTokens
	case v.family == "opus" && v.major == 4 && v.minor <= 1:
		// claude-opus-4, -4-0, -4-1 and the dated claude-opus-4-20250514.
		return 32000
	}
	return 64000
}

// AnthropicModel is what the Anthropic encoder needs to know of a model
// besides its name.
type AnthropicModel struct {
	// MaxTokens is the output limit sent where the client set none; 0
	// sends DefaultAnthropicMaxTokens.
	MaxTokens int
	// Adaptive says the model thinks adaptively: it is asked to think
	// with thinking {"type": "adaptive"} and output_config.effort, and
	// refuses (the newest ones) or deprecates a thinking budget.
	Adaptive bool
	// PromptCache marks the request's prefix for Anthropic's prompt cache
	// (markPromptCache).
	PromptCache bool
}

// AnthropicModelOf reads what its name tells of model: AnthropicMaxTokens
// and AdaptiveThinkingModel.
func AnthropicModelOf(model string) AnthropicModel {
	return AnthropicModel{MaxTokens: AnthropicMaxTokens(model), Adaptive: AdaptiveThinkingModel(model)}
}

// AdaptiveThinkingModel reports whether model's name is that of a Claude
// model that thinks adaptively: Opus and Sonnet 4.6 and every Claude
// model of a later version (Opus 4.7 and 4.8, Sonnet 5). The newest of
// them refuse thinking {"type": "enabled"} with a budget (400), and 4.6
// deprecates it; the older ones take nothing else. The name is read as
// AnthropicMaxTokens reads it.
func AdaptiveThinkingModel(model string) bool {
	name, _ := claudeName(model)
	v, ok := claudeVersionOf(name)
	return ok && (v.major >= 5 || v.major == 4 && v.minor >= 6)
}

// claudeVersion is a Claude 4 or later model's family and version.
type claudeVersion struct {
	family       string // "opus", "sonnet" or "haiku"
	major, minor int
}

// claudeName is what follows "claude-" in a Claude model's name, in lower
// case and without Vertex's "@date" ("opus-4-8" of "claude-opus-4-8",
// "anthropic.claude-opus-4-8-v1:0" and "claude-opus-4-8@20261001"); ok
// is false for a name without "claude-".
func claudeName(model string) (name string, ok bool) {
	m := strings.ToLower(model)
	i := strings.Index(m, "claude-")
	if i < 0 {
		return "", false
	}
	m, _, _ = strings.Cut(m[i+len("claude-"):], "@")
	return m, true
}

// claudeVersionOf reads a Claude 4 or later model's version from its
// name as claudeName gives it ("opus-4-8", "sonnet-4-6-v1:0",
// "sonnet-5"): its minor version is 0 where the name gives none, or gives
// a date in its place ("opus-4-20250514"). ok is false for any other
// name.
func claudeVersionOf(name string) (v claudeVersion, ok bool) {
	family, rest, _ := strings.Cut(name, "-")
	if family != "opus" && family != "sonnet" && family != "haiku" {
		return v, false
	}
	major, rest, _ := strings.Cut(rest, "-")
	minor, _, _ := strings.Cut(rest, "-")
	if len(major) != 1 || major[0] < '4' || major[0] > '9' {
		return v, false
	}
	v = claudeVersion{family: family, major: int(major[0] - '0')}
	if len(minor) <= 2 { // a date is no minor version
		for _, c := range minor {
			if c < '0' || c > '9' {
				return claudeVersion{family: family, major: v.major}, true
			}
			v.minor = v.minor*10 + int(c-'0')
		}
	}
	return v, true
}

// anthropicEffort is the effort an adaptive Claude model is asked for in
// place of an OpenAI reasoning effort: low, medium or high. "minimal" is
// low, and "xhigh", which not every such model takes, high.
func anthropicEffort(effort string) string {
	switch effort {
	case "minimal", "low":
		return "low"
	case "medium":
		return "medium"
	}
	return "high"
}

// EncodeAnthropic renders r as an Anthropic Messages request for model,
// as AnthropicModelOf(model) says the model takes it.
func EncodeAnthropic(r *Request, model string) ([]byte, error) {
	return EncodeAnthropicWith(r, model, AnthropicModelOf(model))
}

// EncodeAnthropicWith renders r as an Anthropic Messages request for
// model, of which am says what its name may not. Consecutive turns of
// one role are merged, as the API requires.
func EncodeAnthropicWith(r *Request, model string, am AnthropicModel) ([]byte, error) {
	if r.Output != nil && r.Output.Schema == nil {
		return nil, fmt.Errorf("%w: JSON mode without a schema (Anthropic's output_config.format takes a json_schema)", ErrUnsupported)
	}
	var msgs []map[string]any
	for i, m := range r.Messages {
		var blocks []any
		for _, p := range m.Parts {
			switch p.Kind {
			case PartText:
				if anthropicText(p.Text) {
					blocks = append(blocks, map[string]any{"type": "text", "text": p.Text})
				}
			case PartImage:
				blocks = append(blocks, anthropicImage(p))
			case PartDocument:
				blocks = append(blocks, anthropicDocumentBlock(p))
			case PartToolUse:
				input, err := anthropicToolInput(p)
				if err != nil {
					return nil, badRequest("messages[%d]: %v", i, err)
				}
				blocks = append(blocks, map[string]any{"type": "tool_use", "id": anthropicToolID(p.ID), "name": ProviderToolName(p.Name), "input": input})
			case PartToolResult:
				var content []any
				for _, c := range p.Content {
					switch c.Kind {
					case PartText:
						if anthropicText(c.Text) {
							content = append(content, map[string]any{"type": "text", "text": c.Text})
						}
					case PartImage:
						content = append(content, anthropicImage(c))
					case PartDocument:
						content = append(content, anthropicDocumentBlock(c))
					}
				}
				b := map[string]any{"type": "tool_result", "tool_use_id": anthropicToolID(p.ToolUseID)}
				if content != nil {
					b["content"] = content
				}
				if p.IsError {
					b["is_error"] = true
				}
				blocks = append(blocks, b)
			case PartThinking:
				switch {
				case strings.HasPrefix(p.Signature, redactedPrefix):
					blocks = append(blocks, map[string]any{"type": "redacted_thinking", "data": strings.TrimPrefix(p.Signature, redactedPrefix)})
				case strings.HasPrefix(p.Signature, openAIReasoningPrefix):
					// OpenAI's reasoning state: only OpenAI reads it.
				case p.Signature != "":
					blocks = append(blocks, map[string]any{"type": "thinking", "thinking": p.Text, "signature": p.Signature})
				}
				// unsigned thinking is dropped: Anthropic rejects it
			default:
				return nil, badRequest("messages[%d]: %s cannot be sent to Anthropic", i, p.Kind)
			}
		}
		if len(blocks) == 0 {
			continue
		}
		if n := len(msgs); n > 0 && msgs[n-1]["role"] == string(m.Role) {
			msgs[n-1]["content"] = append(msgs[n-1]["content"].([]any), blocks...)
			continue
		}
		msgs = append(msgs, map[string]any{"role": string(m.Role), "content": blocks})
	}
	if len(msgs) == 0 {
		// Every message was empty (OpenAI takes an empty user message).
		return nil, errNoConversation("messages: Anthropic needs a message with content, and every message is empty")
	}
	trimPrefill(msgs[len(msgs)-1])
	maxTokens := cmp.Or(r.MaxTokens, am.MaxTokens, DefaultAnthropicMaxTokens)
	out := map[string]any{"model": model, "messages": msgs, "stream": r.Stream}
	if len(r.System) > 0 {
		out["system"] = strings.Join(r.System, "\n\n")
	}
	budget := r.ThinkingBudget
	if budget == 0 {
		var ok bool
		if budget, ok = budgetFor(r.ReasoningEffort); !ok {
			return nil, fmt.Errorf("%w: reasoning effort %q (Anthropic takes none, minimal, low, medium, high or xhigh as a thinking budget)", ErrUnsupported, r.ReasoningEffort)
		}
	}
	forced := r.ToolChoice != nil && len(r.Tools) > 0 && (r.ToolChoice.Mode == "any" || r.ToolChoice.Mode == "tool")
	if budget > 0 && (forced || toolLoopWithoutThinking(msgs)) {
		// Anthropic refuses thinking beside a forced tool choice, and in a
		// tool loop whose call has no signed thinking block.
		budget = 0
	}
	var outputConfig map[string]any
	switch {
	case budget > 0 && am.Adaptive:
		// The thinking is shown summarized, as a Responses client asks
		// (summary "auto"); the newest models show none unless asked.
		out["thinking"] = map[string]any{"type": "adaptive", "display": "summarized"}
		effort := r.ReasoningEffort
		if effort == "" {
			effort = effortFor(budget)
		}
		outputConfig = map[string]any{"effort": anthropicEffort(effort)}
	case budget > 0:
		budget = max(budget, 1024) // the API's minimum
		out["thinking"] = map[string]any{"type": "enabled", "budget_tokens": budget}
		if maxTokens <= budget {
			maxTokens = budget + DefaultAnthropicMaxTokens
		}
	default:
		// Anthropic's newer models refuse temperature and top_p together
		// (its guidance for every model: set one). Given both, the
		// temperature goes, unless it is the default (1) and top_p says
		// something.
		t, p := r.Temperature, r.TopP
		if t != nil && p != nil {
			if *t == 1 && *p != 1 {
				t = nil
			} else {
				p = nil
			}
		}
		if t != nil {
			out["temperature"] = min(*t, 1) // Anthropic's range is 0..1
		}
		if p != nil {
			out["top_p"] = *p
		}
	}
	out["max_tokens"] = maxTokens
	if len(r.Stop) > 0 {
		out["stop_sequences"] = r.Stop
	}
	if r.User != "" {
		out["metadata"] = map[string]any{"user_id": r.User}
	}
	if f := r.Output; f != nil {
		if outputConfig == nil {
			outputConfig = map[string]any{}
		}
		outputConfig["format"] = map[string]any{"type": "json_schema", "schema": f.Schema}
	}
	if outputConfig != nil {
		out["output_config"] = outputConfig
	}
	if len(r.Tools) > 0 {
		var tools []any
		for i, t := range r.Tools {
			schema, err := anthropicInputSchema(t.schema())
			if err != nil {
				return nil, badRequest("tools[%d] (%s): %v", i, t.Name, err)
			}
			tools = append(tools, t.fields("input_schema", schema))
		}
		out["tools"] = tools
	}
	if tc := r.ToolChoice; tc != nil && len(r.Tools) > 0 {
		c := map[string]any{"type": tc.Mode}
		if tc.Mode == "tool" {
			c["name"] = ProviderToolName(tc.Name)
		}
		if tc.DisableParallel && tc.Mode != "none" {
			c["disable_parallel_tool_use"] = true
		}
		out["tool_choice"] = c
	}
	if am.PromptCache {
		markPromptCache(out, msgs)
	}
	return json.Marshal(out)
}

// cacheControl marks a block as the end of a prefix for Anthropic's
// prompt cache (5 minutes, refreshed by every read).
var cacheControl = struct {
	Type string `json:"type"`
}{"ephemeral"}

// markPromptCache sets Anthropic's prompt-cache breakpoints on a request
// translated for it (out, whose conversation is msgs). OpenAI caches a
// repeated prefix by itself, so its clients (Codex among them) send no
// marks and expect a long conversation's next turn to read most of its
// input from the cache; Anthropic caches only up to a block marked
// cache_control, at a tenth of the input price for a read and a quarter
// more for a write. So the prefix is marked where it stays put and where
// it grows, four marks, Anthropic's most: the last tool (tools come
// first), the system prompt, and the conversation's last message and the
// user message before it, whose mark is where the previous turn's request
// ended, so that it is read even when more blocks came after it than
// Anthropic looks back over (20). A prefix shorter than the model's least
// (1,024 to 4,096 tokens) is not cached, and costs nothing more.
func markPromptCache(out map[string]any, msgs []map[string]any) {
	if tools, _ := out["tools"].([]any); len(tools) > 0 {
		tools[len(tools)-1].(map[string]any)["cache_control"] = cacheControl
	}
	if sys, ok := out["system"].(string); ok && strings.TrimSpace(sys) != "" { // a blank block is refused
		out["system"] = []any{map[string]any{"type": "text", "text": sys, "cache_control": cacheControl}}
	}
	marked := 0
	for i := len(msgs) - 1; i >= 0 && marked < 2; i-- {
		if marked == 1 && msgs[i]["role"] != string(RoleUser) {
			continue
		}
		if markLastBlock(msgs[i]) {
			marked++
		}
	}
}

// markLastBlock marks msg's last block that may carry cache_control (a
// thinking block may not); it reports whether it found one.
func markLastBlock(msg map[string]any) bool {
	blocks, _ := msg["content"].([]any)
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i].(map[string]any)
		if t := b["type"]; t != "thinking" && t != "redacted_thinking" {
			b["cache_control"] = cacheControl
			return true
		}
	}
	return false
}

// EncodeResponses renders r as a Responses request for model, of the
// class its name says (ClassByName).
func EncodeResponses(r *Request, model string) ([]byte, error) {
	return EncodeResponsesAs(r, model, ClassByName)
}

// EncodeResponsesAs renders r as a Responses request for model of class
// c. Translated requests are stateless: store is false, and the whole
// conversation travels in input. Stop sequences have no Responses field
// and are refused rather than dropped. Function tools are sent with
// strict false, as Chat Completions and Anthropic clients expect of their
// schemas.
func EncodeResponsesAs(r *Request, model string, c ModelClass) ([]byte, error) {
	c = c.Of(model)
	if len(r.Stop) > 0 {
		return nil, badRequest("stop sequences cannot be sent to a Responses provider")
	}
	input := []any{}
	for i, m := range r.Messages {
		var content []any
		flush := func() {
			if len(content) == 0 {
				return
			}
			input = append(input, map[string]any{"type": "message", "role": string(m.Role), "content": content})
			content = nil
		}
		for _, p := range m.Parts {
			switch {
			case p.Kind == PartText && m.Role == RoleUser:
				content = append(content, map[string]any{"type": "input_text", "text": p.Text})
			case p.Kind == PartText:
				if p.Text != "" {
					content = append(content, map[string]any{"type": "output_text", "text": p.Text, "annotations": []any{}})
				}
			case p.Kind == PartImage && m.Role == RoleUser:
				content = append(content, map[string]any{"type": "input_image", "image_url": imageURL(p), "detail": "auto"})
			case p.Kind == PartDocument && m.Role == RoleUser:
				content = append(content, responsesFile(p))
			case p.Kind == PartToolUse && m.Role == RoleAssistant:
				flush()
				args := string(p.Input)
				if strings.TrimSpace(args) == "" {
					args = "{}"
				}
				input = append(input, map[string]any{"type": "function_call", "call_id": openAICallID(p.ID, maxResponsesCallID), "name": ProviderToolName(p.Name), "arguments": args})
			case p.Kind == PartToolResult && m.Role == RoleUser:
				flush()
				input = append(input, map[string]any{"type": "function_call_output", "call_id": openAICallID(p.ToolUseID, maxResponsesCallID), "output": responsesToolOutput(p)})
			case p.Kind == PartThinking && m.Role == RoleAssistant && c == ClassOpenAIReasoning && strings.HasPrefix(p.Signature, openAIReasoningPrefix):
				// An OpenAI reasoning model's own state goes back to it
				// (no id: at store false the item is its content), so it
				// goes on thinking through a tool loop.
				flush()
				summary := []any{}
				if p.Text != "" {
					summary = append(summary, map[string]any{"type": "summary_text", "text": p.Text})
				}
				input = append(input, map[string]any{"type": "reasoning", "summary": summary, "encrypted_content": strings.TrimPrefix(p.Signature, openAIReasoningPrefix)})
			case p.Kind == PartThinking:
				// dropped: see the mapping above
			default:
				return nil, badRequest("messages[%d]: %s in a %s turn", i, p.Kind, m.Role)
			}
		}
		flush()
	}
	if len(input) == 0 {
		// Every message was empty: no turn to answer.
		return nil, errNoConversation("input: every message is empty")
	}
	out := map[string]any{"model": model, "input": input, "stream": r.Stream, "store": false}
	if len(r.System) > 0 {
		out["instructions"] = strings.Join(r.System, "\n\n")
	}
	if r.MaxTokens > 0 {
		out["max_output_tokens"] = r.MaxTokens
	}
	setSampling(out, r, c)
	if r.User != "" {
		out["user"] = openAIUser(r.User)
	}
	if f := r.Output; f != nil {
		format := map[string]any{"type": "json_object"}
		if js := openAIFormat(f); js != nil {
			format = js
			format["type"] = "json_schema"
		}
		out["text"] = map[string]any{"format": format}
	}
	if effort := effortOf(r, c); effort != "" {
		out["reasoning"] = map[string]any{"effort": effort, "summary": "auto"}
	}
	if c == ClassOpenAIReasoning {
		// The reasoning's state, encrypted, for the client to send back
		// (as a thinking block's signature; openAIReasoningPrefix).
		out["include"] = []string{"reasoning.encrypted_content"}
	}
	if len(r.Tools) > 0 {
		var tools []any
		for _, t := range r.Tools {
			fn := t.fields("parameters", t.schema())
			fn["type"], fn["strict"] = "function", false
			tools = append(tools, fn)
		}
		out["tools"] = tools
	}
	if tc := r.ToolChoice; tc != nil && len(r.Tools) > 0 { // as for Chat Completions
		switch tc.Mode {
		case "auto", "none":
			out["tool_choice"] = tc.Mode
		case "any":
			out["tool_choice"] = "required"
		case "tool":
			out["tool_choice"] = map[string]any{"type": "function", "name": ProviderToolName(tc.Name)}
		}
		if tc.DisableParallel {
			out["parallel_tool_calls"] = false
		}
	}
	return json.Marshal(out)
}

// toolLoopWithoutThinking reports whether thinking must stay off for this
// request: Anthropic requires the final assistant message, when it called
// tools, to start with a thinking block it signed, and refuses the request
// otherwise. A history from Chat Completions or Responses has none to give
// (they have no place for signatures), so a tool loop with thinking would
// fail on every turn; the turn that continues it runs without thinking.
func toolLoopWithoutThinking(msgs []map[string]any) bool {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i]["role"] != "assistant" {
			continue
		}
		blocks, _ := msgs[i]["content"].([]any)
		called := false
		for _, b := range blocks {
			if m, _ := b.(map[string]any); m["type"] == "tool_use" {
				called = true
			}
		}
		if !called {
			return false
		}
		first, _ := blocks[0].(map[string]any)
		return first["type"] != "thinking" && first["type"] != "redacted_thinking"
	}
	return false
}

// responsesToolOutput is a tool result as function_call_output's output:
// plain text, or a list of input_text, input_image and input_file parts
// when the result carries an image or a document. An error result is
// marked in its text, as
// Responses has no error flag.
func responsesToolOutput(p Part) any {
	text := textOf(p.Content)
	if p.IsError && !strings.HasPrefix(text, "Error") {
		text = "Error: " + text
	}
	hasMedia := false
	for _, c := range p.Content {
		hasMedia = hasMedia || c.Kind == PartImage || c.Kind == PartDocument
	}
	if !hasMedia {
		return text
	}
	var parts []any
	if p.IsError {
		parts = append(parts, map[string]any{"type": "input_text", "text": "Error:"})
	}
	for _, c := range p.Content {
		switch c.Kind {
		case PartText:
			parts = append(parts, map[string]any{"type": "input_text", "text": c.Text})
		case PartImage:
			parts = append(parts, map[string]any{"type": "input_image", "image_url": imageURL(c), "detail": "auto"})
		case PartDocument:
			parts = append(parts, responsesFile(c))
		}
	}
	return parts
}

// responsesFile is a document as a Responses input_file: its data or its
// URL.
func responsesFile(p Part) map[string]any {
	if p.URL != "" {
		f := map[string]any{"type": "input_file", "file_url": p.URL}
		if p.Title != "" {
			f["filename"] = p.Title
		}
		return f
	}
	f := openAIFilePart(p)
	f["type"] = "input_file"
	return f
}

// dataURL is a base64 part as a data URL.
func dataURL(p Part) string { return "data:" + p.MediaType + ";base64," + p.Data }

// openAIFilePart is a document as OpenAI's file fields: file_data (a data
// URL) and filename. OpenAI requires a filename with file_data.
func openAIFilePart(p Part) map[string]any {
	return map[string]any{"file_data": dataURL(p), "filename": cmp.Or(p.Title, "document")}
}

func anthropicDocumentBlock(p Part) map[string]any {
	src := map[string]any{"type": "base64", "media_type": p.MediaType, "data": p.Data}
	if p.URL != "" {
		src = map[string]any{"type": "url", "url": p.URL}
	}
	b := map[string]any{"type": "document", "source": src}
	if p.Title != "" {
		b["title"] = p.Title
	}
	return b
}

// anthropicText reports whether Anthropic takes text as a text block: it
// refuses one that is empty or all whitespace, which OpenAI's formats
// take (a model's "\n\n" before its tool call, an empty tool result).
// Such text says nothing, and is left out.
func anthropicText(text string) bool { return strings.TrimSpace(text) != "" }

// trimPrefill trims the trailing whitespace of a conversation's last
// message when it is the assistant's (a prefill the model continues),
// which Anthropic refuses ("final assistant content cannot end with
// trailing whitespace"); the model writes what follows either way.
func trimPrefill(last map[string]any) {
	if last["role"] != string(RoleAssistant) {
		return
	}
	blocks := last["content"].([]any)
	if b := blocks[len(blocks)-1].(map[string]any); b["type"] == "text" {
		b["text"] = strings.TrimRightFunc(b["text"].(string), unicode.IsSpace)
	}
}

func anthropicImage(p Part) map[string]any {
	if p.ImageURL != "" {
		return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": p.ImageURL}}
	}
	return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": p.MediaType, "data": p.Data}}
}

// ToInput renders r as a normalized run's text conversation, refusing what
// it cannot carry (tools, images, tool results).
func ToInput(r *Request) (execution.Input, execution.Options, error) {
	in := execution.Input{System: strings.Join(r.System, "\n\n")}
	opt := execution.Options{MaxOutputTokens: r.MaxTokens, Temperature: r.Temperature, Stream: r.Stream}
	if len(r.Tools) > 0 {
		return in, opt, fmt.Errorf("%w: tools", ErrUnsupported)
	}
	if r.Output != nil {
		return in, opt, fmt.Errorf("%w: a JSON output format", ErrUnsupported)
	}
	for _, m := range r.Messages {
		var b strings.Builder
		for _, p := range m.Parts {
			switch p.Kind {
			case PartText:
				b.WriteString(p.Text)
			case PartThinking:
			default:
				return in, opt, fmt.Errorf("%w: %s", ErrUnsupported, p.Kind)
			}
		}
		in.Messages = append(in.Messages, execution.Message{Role: string(m.Role), Content: b.String()})
	}
	return in, opt, nil
}

// noParameters is the schema of a tool the client gave none (or null):
// every format's function takes an object.
var noParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// schema is the tool's input schema, noParameters when it has none.
func (t Tool) schema() json.RawMessage {
	if len(t.Schema) == 0 || string(t.Schema) == "null" {
		return noParameters
	}
	return t.Schema
}

// fields are a tool's name as providers take it (ProviderToolName), its
// description when it has one (a client that gave none sends none), and
// schema under key.
func (t Tool) fields(key string, schema json.RawMessage) map[string]any {
	f := map[string]any{"name": ProviderToolName(t.Name), key: schema}
	if t.Description != "" {
		f["description"] = t.Description
	}
	return f
}

// setSampling sets an OpenAI-format request's temperature and top_p, but
// for one of OpenAI's reasoning models, which take them only at their
// default (1) and refuse the request otherwise: there they are left out,
// as the model samples as it must whatever the client asked.
func setSampling(out map[string]any, r *Request, c ModelClass) {
	if c == ClassOpenAIReasoning {
		return
	}
	if r.Temperature != nil {
		out["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		out["top_p"] = *r.TopP
	}
}

// anthropicInputSchema is a tool's input schema as Anthropic takes one:
// an object schema with its type said. OpenAI's formats take a schema
// without a type ({} for a tool without parameters), which Anthropic
// refuses; such a schema is given "type": "object", as every tool's input
// is an object. A schema of another type cannot describe a tool's input
// and is refused.
func anthropicInputSchema(raw json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("the input schema is not a JSON object")
	}
	switch typ, ok := m["type"]; {
	case !ok:
		m["type"] = json.RawMessage(`"object"`)
		return json.Marshal(m)
	case string(typ) != `"object"`:
		return nil, fmt.Errorf("the input schema's type is %s; a tool's input is an object", typ)
	}
	return raw, nil
}

// anthropicToolInput is an earlier call's arguments as Anthropic takes
// them: a JSON object ({} for none, or null). OpenAI's formats carry them
// as a string that may hold any JSON; a call whose arguments are not an
// object cannot be sent to Anthropic and is refused. (A call without a
// name never gets here: the decoders refuse one, Request.validate.)
func anthropicToolInput(p Part) (json.RawMessage, error) {
	in := bytes.TrimSpace(p.Input)
	if len(in) == 0 || string(in) == "null" {
		return json.RawMessage("{}"), nil
	}
	if in[0] != '{' || !json.Valid(in) {
		return nil, fmt.Errorf("the call of %s has arguments that are not a JSON object", p.Name)
	}
	return in, nil
}
