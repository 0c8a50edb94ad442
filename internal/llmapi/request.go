package llmapi

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// badRequest is a client request that cannot be translated.
func badRequest(format string, args ...any) *APIError {
	return &APIError{Status: 400, Type: "invalid_request", Message: fmt.Sprintf(format, args...)}
}

// limit is a token limit field of a request, named as the client wrote it.
type limit struct {
	name string
	v    int
}

// outOfRange refuses values no API takes: a negative token limit, a
// negative temperature, a top_p outside [0, 1]. The upper bounds that
// differ by provider (temperature up to 1 at Anthropic, 2 at OpenAI; a
// model's output limit) are the provider's to enforce. Without this
// check a translation would carry a negative limit as "the provider's
// default".
func outOfRange(r *Request, limits ...limit) *APIError {
	for _, l := range limits {
		if l.v < 0 {
			return badRequest("%s must not be negative", l.name)
		}
	}
	if t := r.Temperature; t != nil && *t < 0 {
		return badRequest("temperature must not be negative")
	}
	if p := r.TopP; p != nil && (*p < 0 || *p > 1) {
		return badRequest("top_p must be between 0 and 1")
	}
	return nil
}

// oneOrMany decodes a JSON string or array of strings.
func oneOrMany(raw json.RawMessage) []string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil
		}
		return []string{s}
	}
	var list []string
	json.Unmarshal(raw, &list)
	return list
}

// present reports whether a raw field was sent with a value.
func present(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// errNoConversation refuses a request without a turn to answer: an empty
// conversation, or instructions alone. Anthropic refuses one, so do
// OpenAI's APIs given no messages; a command-line run would be asked
// nothing, and answer nothing as if it had been.
func errNoConversation(msg string) *APIError { return badRequest("%s", msg) }

// validate refuses a decoded request no provider takes, whatever its
// format: one with no turn to answer (noTurn says so in the format's
// terms), whose tools (checkTools) or tool calls (checkCalls) are not
// whole, or two of whose tool names would reach a provider as one
// (checkToolNames).
func (r *Request) validate(noTurn string) error {
	if len(r.Messages) == 0 {
		return errNoConversation(noTurn)
	}
	if err := r.checkTools(); err != nil {
		return err
	}
	if err := r.checkCalls(); err != nil {
		return err
	}
	return r.checkToolNames()
}

// checkTools refuses tools no provider takes, whatever the format: one
// without a name, or two of one name (a call could not say which it
// meant); and a tool choice that requires a call no tool can answer.
func (r *Request) checkTools() error {
	seen := make(map[string]bool, len(r.Tools))
	for i, t := range r.Tools {
		switch {
		case t.Name == "":
			return badRequest("tools[%d]: a tool needs a name", i)
		case seen[t.Name]:
			return badRequest("tools[%d]: a second tool named %q", i, t.Name)
		}
		seen[t.Name] = true
	}
	switch tc := r.ToolChoice; {
	case tc == nil:
	case tc.Mode == "any" && len(r.Tools) == 0:
		return badRequest("tool_choice requires a tool call, and the request has no tools")
	case tc.Mode == "tool" && !seen[tc.Name]:
		return badRequest("tool_choice names %q, which is not among the tools", tc.Name)
	}
	return nil
}

// checkCalls refuses a history whose tool calls cannot be paired with
// their results, or named to a provider: a call without an id or a name,
// a result that names no call. Every format's provider refuses one, each
// in its own words.
func (r *Request) checkCalls() error {
	for _, m := range r.Messages {
		for _, p := range m.Parts {
			switch {
			case p.Kind == PartToolUse && p.ID == "":
				return badRequest("a tool call of %q in the history has no id", p.Name)
			case p.Kind == PartToolUse && p.Name == "":
				return badRequest("tool call %q in the history has no name", p.ID)
			case p.Kind == PartToolResult && p.ToolUseID == "":
				return badRequest("a tool result in the history names no call")
			}
		}
	}
	return nil
}

// untranslatable refuses a request field whose meaning no translation
// carries: dropping it would answer something else than was asked.
func untranslatable(field, why string) *APIError {
	return badRequest("%s cannot be translated for this model's providers (%s); use a model whose provider speaks this API natively", field, why)
}

// jsonFormat decodes an OpenAI output format: Chat's response_format
// (nested is its json_schema object) or Responses' text.format (flat).
func jsonFormat(raw json.RawMessage, field string, nested bool) (*OutputFormat, error) {
	if !present(raw) {
		return nil, nil
	}
	type schema struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	}
	var f struct {
		Type       string  `json:"type"`
		JSONSchema *schema `json:"json_schema"`
		schema
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, badRequest("%s is malformed: %v", field, err)
	}
	switch f.Type {
	case "text":
		return nil, nil
	case "json_object":
		return &OutputFormat{}, nil
	case "json_schema":
		sc := &f.schema
		if nested {
			sc = f.JSONSchema
		}
		if sc == nil || !present(sc.Schema) {
			return nil, badRequest("%s: json_schema without a schema", field)
		}
		return &OutputFormat{Name: sc.Name, Strict: sc.Strict, Schema: sc.Schema}, nil
	}
	return nil, badRequest("%s.type %q", field, f.Type)
}

// --- Anthropic Messages request ------------------------------------------

type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	Thinking  string          `json:"thinking"`
	Signature string          `json:"signature"`
	Data      string          `json:"data"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	Source    *struct {
		Type      string          `json:"type"`
		MediaType string          `json:"media_type"`
		Data      string          `json:"data"`
		URL       string          `json:"url"`
		Content   json.RawMessage `json:"content"`
	} `json:"source"`
	Title     string `json:"title"`
	Context   string `json:"context"` // a document's context, for the model
	Citations *struct {
		Enabled bool `json:"enabled"`
	} `json:"citations"`
	// ToolName is a tool_reference's.
	ToolName string `json:"tool_name"`
}

// anthropicToolSearch reports whether name (a server tool's type, such
// as tool_search_tool_regex_20251119, or its name in a server_tool_use
// block) is Anthropic's tool search. It searches the tools a request
// sends with defer_loading; the other formats have no deferred tools, so
// a translation offers every tool and leaves the search out, with its
// calls and results in the history.
func anthropicToolSearch(name string) bool { return strings.HasPrefix(name, "tool_search_tool_") }

func anthropicParts(raw json.RawMessage, where string) ([]Part, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Kind: PartText, Text: s}}, nil
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, badRequest("%s: content must be a string or a list of blocks", where)
	}
	var out []Part
	for i, b := range blocks {
		switch b.Type {
		case "text":
			out = append(out, Part{Kind: PartText, Text: b.Text})
		case "image":
			if b.Source == nil {
				return nil, badRequest("%s[%d]: image without source", where, i)
			}
			switch b.Source.Type {
			case "base64":
				out = append(out, Part{Kind: PartImage, MediaType: b.Source.MediaType, Data: b.Source.Data})
			case "url":
				out = append(out, Part{Kind: PartImage, ImageURL: b.Source.URL})
			default:
				return nil, badRequest("%s[%d]: image source %q not supported", where, i, b.Source.Type)
			}
		case "document":
			parts, err := anthropicDocument(b, fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return nil, err
			}
			out = append(out, parts...)
		case "tool_use":
			out = append(out, Part{Kind: PartToolUse, ID: b.ID, Name: b.Name, Input: b.Input})
		case "tool_result":
			var content []Part
			if len(b.Content) > 0 && string(b.Content) != "null" {
				c, err := anthropicParts(b.Content, fmt.Sprintf("%s[%d].content", where, i))
				if err != nil {
					return nil, err
				}
				content = c
			}
			out = append(out, Part{Kind: PartToolResult, ToolUseID: b.ToolUseID, Content: content, IsError: b.IsError})
		case "thinking":
			out = append(out, Part{Kind: PartThinking, Text: b.Thinking, Signature: b.Signature})
		case "redacted_thinking":
			// Opaque; only Anthropic can read it back. Kept as a thinking part
			// with its data as the signature, dropped for other providers.
			out = append(out, Part{Kind: PartThinking, Signature: redactedPrefix + b.Data})
		case "server_tool_use", "tool_search_tool_result":
			// Anthropic's own tool search, run at Anthropic over the
			// tools sent with defer_loading: a translation offers them
			// all, and leaves the search out (anthropicToolSearch). Any
			// other server tool is Anthropic's alone.
			if b.Type == "server_tool_use" && !anthropicToolSearch(b.Name) {
				return nil, badRequest("%s[%d]: a call of server tool %q cannot be translated", where, i, b.Name)
			}
		case "tool_reference":
			// A tool search's result (Claude Code's ToolSearch): at
			// Anthropic it loads a tool sent with defer_loading. The
			// other formats have no deferred tools (a translation offers
			// every tool), so the model is told the tool is there.
			if b.ToolName == "" {
				return nil, badRequest("%s[%d]: a tool_reference names no tool", where, i)
			}
			out = append(out, Part{Kind: PartText, Text: "Tool " + b.ToolName + " is loaded and can be called."})
		default:
			return nil, badRequest("%s[%d]: content block %q not supported", where, i, b.Type)
		}
	}
	return out, nil
}

// anthropicDocument reads a document block: a PDF (base64 or by URL)
// stays a document; a plain-text or content-block document becomes its
// text (after its title) and images, which every format carries; a
// document's context comes before it as text. Citations cannot be
// translated: they are refused, never dropped.
func anthropicDocument(b anthropicBlock, where string) ([]Part, error) {
	switch {
	case b.Source == nil:
		return nil, badRequest("%s: document without source", where)
	case b.Citations != nil && b.Citations.Enabled:
		return nil, untranslatable(where+": citations", "only Anthropic cites its documents")
	}
	// A document's context reaches the model as text before it; a text
	// document's title too (a file keeps its title as its name).
	var out []Part
	if b.Title != "" && (b.Source.Type == "text" || b.Source.Type == "content") {
		out = append(out, Part{Kind: PartText, Text: b.Title})
	}
	if b.Context != "" {
		out = append(out, Part{Kind: PartText, Text: b.Context})
	}
	switch b.Source.Type {
	case "base64":
		return append(out, Part{Kind: PartDocument, MediaType: b.Source.MediaType, Data: b.Source.Data, Title: b.Title}), nil
	case "url":
		return append(out, Part{Kind: PartDocument, URL: b.Source.URL, Title: b.Title}), nil
	case "text":
		return append(out, Part{Kind: PartText, Text: b.Source.Data}), nil
	case "content":
		parts, err := anthropicParts(b.Source.Content, where+".source.content")
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			if p.Kind != PartText && p.Kind != PartImage {
				return nil, badRequest("%s.source.content: %s in a document", where, p.Kind)
			}
		}
		return append(out, parts...), nil
	}
	return nil, badRequest("%s: document source %q not supported", where, b.Source.Type)
}

// openAIEffort is the OpenAI reasoning effort an adaptive Claude client's
// effort asks for: low, medium and high as they are, and "xhigh" or
// "max", which not every OpenAI model takes, high; none for none given.
// ok is false for an effort Anthropic does not name.
func openAIEffort(effort string) (string, bool) {
	switch effort {
	case "", "low", "medium", "high":
		return effort, true
	case "xhigh", "max":
		return "high", true
	}
	return "", false
}

// DecodeAnthropicRequest decodes an Anthropic Messages request.
func DecodeAnthropicRequest(body []byte) (*Request, error) {
	var m struct {
		Model     string          `json:"model"`
		MaxTokens int             `json:"max_tokens"`
		System    json.RawMessage `json:"system"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
		ToolChoice *struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
		} `json:"tool_choice"`
		Temperature   *float64 `json:"temperature"`
		TopP          *float64 `json:"top_p"`
		StopSequences []string `json:"stop_sequences"`
		Stream        bool     `json:"stream"`
		Thinking      *struct {
			Type         string `json:"type"`
			BudgetTokens int    `json:"budget_tokens"`
		} `json:"thinking"`
		Metadata *struct {
			UserID string `json:"user_id"`
		} `json:"metadata"`
		OutputConfig *struct {
			Format json.RawMessage `json:"format"`
			Effort string          `json:"effort"`
		} `json:"output_config"`
		OutputFormat json.RawMessage   `json:"output_format"` // the structured-outputs beta's name for output_config.format
		MCPServers   []json.RawMessage `json:"mcp_servers"`
		Container    json.RawMessage   `json:"container"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, badRequest("invalid request body: %v", err)
	}
	switch {
	case len(m.MCPServers) > 0:
		return nil, untranslatable("mcp_servers", "Anthropic connects to them itself")
	case present(m.Container):
		return nil, untranslatable("container", "a code execution container lives at Anthropic")
	}
	r := &Request{Model: m.Model, MaxTokens: m.MaxTokens, Temperature: m.Temperature, TopP: m.TopP, Stop: m.StopSequences, Stream: m.Stream}
	budget := 0
	if m.Thinking != nil {
		budget = m.Thinking.BudgetTokens
	}
	if err := outOfRange(r, limit{"max_tokens", m.MaxTokens}, limit{"thinking.budget_tokens", budget}); err != nil {
		return nil, err
	}
	format, field := m.OutputFormat, "output_format"
	if m.OutputConfig != nil && present(m.OutputConfig.Format) {
		format, field = m.OutputConfig.Format, "output_config.format"
	}
	if present(format) {
		var f struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		}
		if json.Unmarshal(format, &f) != nil || f.Type != "json_schema" || !present(f.Schema) {
			return nil, badRequest("%s must be {\"type\":\"json_schema\",\"schema\":{...}}", field)
		}
		r.Output = &OutputFormat{Schema: f.Schema}
	}
	if len(m.System) > 0 && string(m.System) != "null" {
		parts, err := anthropicParts(m.System, "system")
		if err != nil {
			return nil, err
		}
		for _, p := range parts {
			if p.Kind != PartText {
				return nil, badRequest("system: only text blocks are allowed")
			}
			// Claude Code's billing header is Anthropic's alone, and
			// changes with every request (see billingPrefix).
			text, ok := stripBillingHeader(p.Text)
			if ok && strings.TrimSpace(text) == "" {
				continue
			}
			r.System = append(r.System, text)
		}
	}
	for i, msg := range m.Messages {
		role := Role(msg.Role)
		if role != RoleUser && role != RoleAssistant && msg.Role != "system" {
			return nil, badRequest("messages[%d].role %q is not user, assistant or system", i, msg.Role)
		}
		where := fmt.Sprintf("messages[%d].content", i)
		parts, err := anthropicParts(msg.Content, where)
		if err != nil {
			return nil, err
		}
		if msg.Role == "system" {
			// A system message among the others: Anthropic takes one
			// where it stands, and Claude Code (2.1.154 and later) sends
			// its environment and reminders so. It joins the system
			// prompt, as a Chat Completions or Responses system or
			// developer message anywhere in the list does: local models'
			// chat templates often refuse a system message after the
			// first, so the other formats get one system prompt.
			for _, p := range parts {
				if p.Kind != PartText {
					return nil, badRequest("%s: a system message holds only text blocks", where)
				}
				r.System = append(r.System, p.Text)
			}
			continue
		}
		r.Messages = append(r.Messages, Message{Role: role, Parts: parts})
	}
	for _, t := range m.Tools {
		if anthropicToolSearch(t.Type) {
			continue // see anthropicToolSearch
		}
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest("server tool %q cannot be translated", t.Type)
		}
		r.Tools = append(r.Tools, Tool{Name: t.Name, Description: t.Description, Schema: t.InputSchema})
	}
	if tc := m.ToolChoice; tc != nil {
		r.ToolChoice = &ToolChoice{Mode: tc.Type, Name: tc.Name, DisableParallel: tc.DisableParallelToolUse}
	}
	switch {
	case m.Thinking != nil && m.Thinking.Type == "enabled":
		r.ThinkingBudget = m.Thinking.BudgetTokens
	case m.Thinking != nil && m.Thinking.Type == "adaptive" && m.OutputConfig != nil:
		// Adaptive thinking (Claude 4.6 and later) is asked for with an
		// effort, not a budget. Its default (high) is Anthropic's; given
		// none, an OpenAI model reasons at its own.
		effort, ok := openAIEffort(m.OutputConfig.Effort)
		if !ok {
			return nil, badRequest("output_config.effort %q is not low, medium, high, xhigh or max", m.OutputConfig.Effort)
		}
		r.ReasoningEffort = effort
	}
	if m.Metadata != nil {
		r.User = m.Metadata.UserID
	}
	if err := r.validate("messages: at least one message is required"); err != nil {
		return nil, err
	}
	return r, nil
}

// --- Chat Completions request ---------------------------------------------

func chatParts(raw json.RawMessage, where string) ([]Part, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Kind: PartText, Text: s}}, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL *struct {
			URL string `json:"url"`
		} `json:"image_url"`
		File *openAIFile `json:"file"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest("%s: content must be a string or a list of parts", where)
	}
	var out []Part
	for i, p := range parts {
		switch p.Type {
		case "text":
			out = append(out, Part{Kind: PartText, Text: p.Text})
		case "image_url":
			if p.ImageURL == nil || p.ImageURL.URL == "" {
				return nil, badRequest("%s[%d]: image_url without url", where, i)
			}
			out = append(out, imagePart(p.ImageURL.URL))
		case "file":
			if p.File == nil {
				return nil, badRequest("%s[%d]: file part without file", where, i)
			}
			d, err := p.File.document(fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		default:
			return nil, badRequest("%s[%d]: content part %q not supported", where, i, p.Type)
		}
	}
	return out, nil
}

// openAIFile is a file given whole: Chat's file part's file object, or
// the fields of a Responses input_file part.
type openAIFile struct {
	FileData string `json:"file_data"`
	FileURL  string `json:"file_url"`
	FileID   string `json:"file_id"`
	Filename string `json:"filename"`
}

// document reads f as a document part: its data (a base64 data URL) or
// URL. A file uploaded to OpenAI (file_id) cannot be translated.
func (f *openAIFile) document(where string) (Part, error) {
	switch {
	case f.FileData != "":
		meta, data, ok := strings.Cut(strings.TrimPrefix(f.FileData, "data:"), ",")
		if !ok || !strings.HasPrefix(f.FileData, "data:") || !strings.HasSuffix(meta, ";base64") {
			return Part{}, badRequest("%s: file_data must be a base64 data URL", where)
		}
		return Part{Kind: PartDocument, MediaType: strings.TrimSuffix(meta, ";base64"), Data: data, Title: f.Filename}, nil
	case f.FileURL != "":
		return Part{Kind: PartDocument, URL: f.FileURL, Title: f.Filename}, nil
	}
	return Part{}, untranslatable(where+": a file by file_id", "an uploaded file lives at OpenAI")
}

// imagePart reads a URL that may be a base64 data URL.
func imagePart(u string) Part {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		if meta, data, ok := strings.Cut(rest, ","); ok && strings.HasSuffix(meta, ";base64") {
			return Part{Kind: PartImage, MediaType: strings.TrimSuffix(meta, ";base64"), Data: data}
		}
	}
	return Part{Kind: PartImage, ImageURL: u}
}

// DecodeChatRequest decodes a Chat Completions request. Consecutive tool
// messages become one user turn of tool results, as Anthropic requires.
func DecodeChatRequest(body []byte) (*Request, error) {
	var c struct {
		Model    string `json:"model"`
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID       string       `json:"id"`
				Type     string       `json:"type"`
				Function chatFunction `json:"function"`
				Custom   *struct {
					Name  string  `json:"name"`
					Input *string `json:"input"`
				} `json:"custom"`
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
			Refusal    string `json:"refusal"` // an earlier answer's refusal, in place of content
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
			} `json:"function"`
			Custom *struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Format      json.RawMessage `json:"format"`
			} `json:"custom"`
		} `json:"tools"`
		ToolChoice          json.RawMessage    `json:"tool_choice"`
		ParallelToolCalls   *bool              `json:"parallel_tool_calls"`
		MaxTokens           int                `json:"max_tokens"`
		MaxCompletionTokens int                `json:"max_completion_tokens"`
		Temperature         *float64           `json:"temperature"`
		TopP                *float64           `json:"top_p"`
		Stop                json.RawMessage    `json:"stop"`
		Stream              bool               `json:"stream"`
		ReasoningEffort     string             `json:"reasoning_effort"`
		User                string             `json:"user"`
		ResponseFormat      json.RawMessage    `json:"response_format"`
		N                   float64            `json:"n"`
		Logprobs            bool               `json:"logprobs"`
		Functions           json.RawMessage    `json:"functions"`
		FunctionCall        json.RawMessage    `json:"function_call"`
		Modalities          []string           `json:"modalities"`
		Audio               json.RawMessage    `json:"audio"`
		WebSearchOptions    json.RawMessage    `json:"web_search_options"`
		LogitBias           map[string]float64 `json:"logit_bias"`
	}
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, badRequest("invalid request body: %v", err)
	}
	switch {
	case len(c.LogitBias) > 0:
		return nil, untranslatable("logit_bias", "its token ids are those of OpenAI's tokenizer")
	case c.N > 1:
		return nil, untranslatable("n > 1", "they answer one choice")
	case c.Logprobs:
		return nil, untranslatable("logprobs", "they report none")
	case present(c.Functions) || present(c.FunctionCall):
		return nil, untranslatable("functions and function_call", "deprecated; send tools and tool_choice")
	case present(c.Audio) || slices.ContainsFunc(c.Modalities, func(m string) bool { return m != "text" }):
		return nil, untranslatable("audio output", "they answer text")
	case present(c.WebSearchOptions):
		return nil, untranslatable("web_search_options", "OpenAI searches the web itself")
	}
	out, err := jsonFormat(c.ResponseFormat, "response_format", true)
	if err != nil {
		return nil, err
	}
	r := &Request{Model: c.Model, MaxTokens: max(c.MaxTokens, c.MaxCompletionTokens), Temperature: c.Temperature, TopP: c.TopP,
		Stop: oneOrMany(c.Stop), Stream: c.Stream, ReasoningEffort: c.ReasoningEffort, User: c.User, Output: out}
	if err := outOfRange(r, limit{"max_tokens", c.MaxTokens}, limit{"max_completion_tokens", c.MaxCompletionTokens}); err != nil {
		return nil, err
	}
	for i, m := range c.Messages {
		where := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "system", "developer":
			parts, err := chatParts(m.Content, where)
			if err != nil {
				return nil, err
			}
			for _, p := range parts {
				if p.Kind != PartText {
					return nil, badRequest("%s: only text in system messages", where)
				}
				r.System = append(r.System, p.Text)
			}
		case "user":
			parts, err := chatParts(m.Content, where)
			if err != nil {
				return nil, err
			}
			r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: parts})
		case "assistant":
			parts, err := chatParts(m.Content, where)
			if err != nil {
				return nil, err
			}
			if m.Refusal != "" {
				parts = append(parts, Part{Kind: PartText, Text: m.Refusal})
			}
			for j, tc := range m.ToolCalls {
				switch tc.Type {
				case "", "function":
				case "custom":
					// A custom tool's call is carried as a call of the
					// function the tool is carried as.
					if tc.Custom == nil || tc.Custom.Input == nil {
						return nil, badRequest("%s.tool_calls[%d]: a custom call needs custom.input, a string", where, j)
					}
					parts = append(parts, Part{Kind: PartToolUse, ID: tc.ID, Name: tc.Custom.Name, Input: mustJSON(map[string]string{FreeformParam: *tc.Custom.Input})})
					continue
				default:
					return nil, badRequest("%s.tool_calls[%d].type %q", where, j, tc.Type)
				}
				args := strings.TrimSpace(tc.Function.Arguments)
				if args == "" {
					args = "{}"
				}
				if !json.Valid([]byte(args)) {
					return nil, badRequest("%s.tool_calls[%d]: arguments are not JSON", where, j)
				}
				parts = append(parts, Part{Kind: PartToolUse, ID: tc.ID, Name: tc.Function.Name, Input: json.RawMessage(args)})
			}
			r.Messages = append(r.Messages, Message{Role: RoleAssistant, Parts: parts})
		case "tool", "function":
			parts, err := chatParts(m.Content, where)
			if err != nil {
				return nil, err
			}
			res := Part{Kind: PartToolResult, ToolUseID: m.ToolCallID, Content: parts}
			if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == RoleUser && allToolResults(r.Messages[n-1].Parts) {
				r.Messages[n-1].Parts = append(r.Messages[n-1].Parts, res)
			} else {
				r.Messages = append(r.Messages, Message{Role: RoleUser, Parts: []Part{res}})
			}
		default:
			return nil, badRequest("%s.role %q", where, m.Role)
		}
	}
	for i, t := range c.Tools {
		switch t.Type {
		case "", "function":
			r.Tools = append(r.Tools, Tool{Name: t.Function.Name, Description: t.Function.Description, Schema: t.Function.Parameters})
		case "custom":
			// Carried as a function with one string parameter, as a
			// Responses custom tool is; its calls come back as custom.
			if t.Custom == nil || t.Custom.Name == "" {
				return nil, badRequest("tools[%d]: a custom tool needs custom.name", i)
			}
			where := fmt.Sprintf("tools[%d].custom.format", i)
			format, err := chatCustomFormat(t.Custom.Format, where)
			if err != nil {
				return nil, err
			}
			schema, err := freeformSchema(format, where)
			if err != nil {
				return nil, err
			}
			r.Tools = append(r.Tools, Tool{Name: t.Custom.Name, Description: t.Custom.Description, Schema: schema, Freeform: true})
		default:
			return nil, badRequest("tool type %q cannot be translated", t.Type)
		}
	}
	if err := r.setToolChoice(c.ToolChoice); err != nil {
		return nil, err
	}
	if c.ParallelToolCalls != nil && !*c.ParallelToolCalls {
		if r.ToolChoice == nil {
			r.ToolChoice = &ToolChoice{Mode: "auto"}
		}
		r.ToolChoice.DisableParallel = true
	}
	if err := r.validate("messages: at least one user or assistant message is required"); err != nil {
		return nil, err
	}
	return r, nil
}

// chatCustomFormat is a Chat Completions custom tool's format in the
// shape a Responses one has: Chat nests a grammar's syntax and definition
// in "grammar", Responses does not.
func chatCustomFormat(raw json.RawMessage, where string) (json.RawMessage, error) {
	if !present(raw) {
		return raw, nil
	}
	var f struct {
		Type    string `json:"type"`
		Grammar *struct {
			Syntax     string `json:"syntax"`
			Definition string `json:"definition"`
		} `json:"grammar"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, badRequest("%s must be an object", where)
	}
	if f.Type != "grammar" || f.Grammar == nil {
		return raw, nil
	}
	return mustJSON(map[string]string{"type": "grammar", "syntax": f.Grammar.Syntax, "definition": f.Grammar.Definition}), nil
}

func allToolResults(ps []Part) bool {
	for _, p := range ps {
		if p.Kind != PartToolResult {
			return false
		}
	}
	return len(ps) > 0
}

// setToolChoice decodes an OpenAI tool_choice (Chat's or Responses') into
// r, whose tools are decoded. An allowed_tools choice, which lets the model
// call only some of the tools, is carried by sending only those: the model
// can call the same tools, and the others only leave the prompt.
func (r *Request) setToolChoice(raw json.RawMessage) error {
	type named struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"` // Responses' namespace tools
		Function  struct {
			Name string `json:"name"`
		} `json:"function"`
		Custom struct {
			Name string `json:"name"`
		} `json:"custom"` // Chat's custom tools
	}
	type allowed struct {
		Mode  string  `json:"mode"`
		Tools []named `json:"tools"`
	}
	var o struct {
		Type string `json:"type"`
		allowed
		Chat *allowed `json:"allowed_tools"` // Chat nests it
	}
	if json.Unmarshal(raw, &o) != nil || o.Type != "allowed_tools" {
		tc, err := chatToolChoice(raw)
		if err != nil {
			return err
		}
		if tc != nil {
			r.ToolChoice = tc
		}
		return nil
	}
	a := o.allowed
	if o.Chat != nil {
		a = *o.Chat
	}
	mode := map[string]string{"auto": "auto", "required": "any"}[a.Mode]
	if mode == "" {
		return badRequest("tool_choice.mode %q (allowed_tools takes auto or required)", a.Mode)
	}
	keep := map[string]bool{}
	for i, t := range a.Tools {
		name := NamespacedName(t.Namespace, cmp.Or(t.Name, t.Function.Name, t.Custom.Name))
		if (t.Type != "function" && t.Type != "custom") || name == "" {
			return badRequest("tool_choice.tools[%d]: only function and custom tools can be translated, by name", i)
		}
		if !slices.ContainsFunc(r.Tools, func(d Tool) bool { return d.Name == name }) {
			return badRequest("tool_choice.tools[%d] names %q, which is not among the tools", i, name)
		}
		keep[name] = true
	}
	if len(keep) == 0 {
		return badRequest("tool_choice: allowed_tools names no tool")
	}
	r.Tools = slices.DeleteFunc(r.Tools, func(d Tool) bool { return !keep[d.Name] })
	r.ToolChoice = &ToolChoice{Mode: mode}
	return nil
}

func chatToolChoice(raw json.RawMessage) (*ToolChoice, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none":
			return &ToolChoice{Mode: s}, nil
		case "required":
			return &ToolChoice{Mode: "any"}, nil
		}
		return nil, badRequest("tool_choice %q", s)
	}
	var o struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"` // Responses' namespace tools
		Function  struct {
			Name string `json:"name"`
		} `json:"function"`
		Custom struct {
			Name string `json:"name"`
		} `json:"custom"` // Chat's custom tools
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, badRequest("tool_choice must be a string or an object")
	}
	name := cmp.Or(o.Function.Name, o.Custom.Name, o.Name)
	if name == "" {
		return nil, badRequest("tool_choice names no function")
	}
	return &ToolChoice{Mode: "tool", Name: NamespacedName(o.Namespace, name)}, nil
}

// --- Responses request -----------------------------------------------------

// ErrStateful is returned for Responses features that keep state at the
// provider (previous_response_id): they work only when the client's format
// reaches the provider untranslated.
var ErrStateful = errors.New("llmapi: previous_response_id needs a provider that speaks Responses")

// hostedWebSearch are the Responses tool types of OpenAI's own web
// search, which it runs itself. Codex offers one in every request by
// default ({"type": "web_search", "external_web_access": false}, its
// cached search). A request translated for another provider goes
// without it: that provider's model works without searching, which needs
// no access the client did not grant. A request that forces the search
// (tool_choice) is refused, as a request whose whole point it is; so is
// any other hosted tool (image generation, file search, ...).
var hostedWebSearch = map[string]bool{
	"web_search": true, "web_search_2025_08_26": true,
	"web_search_preview": true, "web_search_preview_2025_03_11": true,
}

// DecodeResponsesRequest decodes a Responses request.
func DecodeResponsesRequest(body []byte) (*Request, error) {
	var q struct {
		Model             string          `json:"model"`
		Instructions      string          `json:"instructions"`
		Input             json.RawMessage `json:"input"`
		Tools             []responsesTool `json:"tools"`
		ToolChoice        json.RawMessage `json:"tool_choice"`
		ParallelToolCalls *bool           `json:"parallel_tool_calls"`
		MaxOutputTokens   int             `json:"max_output_tokens"`
		Temperature       *float64        `json:"temperature"`
		TopP              *float64        `json:"top_p"`
		Stream            bool            `json:"stream"`
		Reasoning         *struct {
			Effort string `json:"effort"`
		} `json:"reasoning"`
		PreviousResponseID string `json:"previous_response_id"`
		User               string `json:"user"`
		Text               *struct {
			Format json.RawMessage `json:"format"`
		} `json:"text"`
		Background   bool            `json:"background"`
		Conversation json.RawMessage `json:"conversation"`
		Prompt       json.RawMessage `json:"prompt"`
		TopLogprobs  int             `json:"top_logprobs"`
		Include      []string        `json:"include"`
	}
	if err := json.Unmarshal(body, &q); err != nil {
		return nil, badRequest("invalid request body: %v", err)
	}
	switch {
	case q.PreviousResponseID != "":
		return nil, &APIError{Status: 400, Type: "invalid_request", Message: ErrStateful.Error()}
	case q.Background:
		return nil, untranslatable("background", "a background response is kept and polled at OpenAI")
	case present(q.Conversation):
		return nil, untranslatable("conversation", "a conversation is kept at OpenAI")
	case present(q.Prompt):
		return nil, untranslatable("prompt", "a prompt template is kept at OpenAI")
	case q.TopLogprobs > 0 || slices.Contains(q.Include, "message.output_text.logprobs"):
		return nil, untranslatable("logprobs", "they report none")
	}
	r := &Request{Model: q.Model, MaxTokens: q.MaxOutputTokens, Temperature: q.Temperature, TopP: q.TopP, Stream: q.Stream, User: q.User}
	if err := outOfRange(r, limit{"max_output_tokens", q.MaxOutputTokens}); err != nil {
		return nil, err
	}
	if q.Text != nil {
		out, err := jsonFormat(q.Text.Format, "text.format", false)
		if err != nil {
			return nil, err
		}
		r.Output = out
	}
	if q.Instructions != "" {
		r.System = append(r.System, q.Instructions)
	}
	if q.Reasoning != nil {
		r.ReasoningEffort = q.Reasoning.Effort
	}
	r.SealReasoning = slices.Contains(q.Include, "reasoning.encrypted_content")
	compact := false
	var loaded searchOutput // the tools client tool searches loaded
	var s string
	if json.Unmarshal(q.Input, &s) == nil {
		r.Messages = []Message{{Role: RoleUser, Parts: []Part{{Kind: PartText, Text: s}}}}
	} else {
		var items []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			CallID  string          `json:"call_id"`
			Name    string          `json:"name"`
			// Namespace is a call's of a tool of a namespace.
			Namespace string `json:"namespace"`
			// Tools are an additional_tools item's, or those a
			// tool_search_output loaded.
			Tools []responsesTool `json:"tools"`
			// Args are a function call's (a string of JSON) or a tool
			// search's (an object).
			Args   json.RawMessage `json:"arguments"`
			Input  json.RawMessage `json:"input"`
			Output json.RawMessage `json:"output"`
			// Execution is a tool search's: client or server.
			Execution string `json:"execution"`
			// EncryptedContent is a reasoning item's state.
			EncryptedContent string `json:"encrypted_content"`
			// Author and Recipient are an agent message's.
			Author    string `json:"author"`
			Recipient string `json:"recipient"`
		}
		if err := json.Unmarshal(q.Input, &items); err != nil {
			return nil, badRequest("input must be a string or a list of items")
		}
		add := func(role Role, p ...Part) {
			if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == role {
				r.Messages[n-1].Parts = append(r.Messages[n-1].Parts, p...)
				return
			}
			r.Messages = append(r.Messages, Message{Role: role, Parts: p})
		}
		for i, it := range items {
			where := fmt.Sprintf("input[%d]", i)
			switch it.Type {
			case "", "message":
				parts, err := responsesContent(it.Content, where)
				if err != nil {
					return nil, err
				}
				switch it.Role {
				case "system", "developer":
					for _, p := range parts {
						r.System = append(r.System, p.Text)
					}
				case "user":
					add(RoleUser, parts...)
				case "assistant":
					add(RoleAssistant, parts...)
				default:
					return nil, badRequest("%s.role %q", where, it.Role)
				}
			case "function_call":
				var args string
				if present(it.Args) && json.Unmarshal(it.Args, &args) != nil {
					return nil, badRequest("%s: arguments must be a string", where)
				}
				if args = strings.TrimSpace(args); args == "" {
					args = "{}"
				}
				if !json.Valid([]byte(args)) {
					return nil, badRequest("%s: arguments are not JSON", where)
				}
				add(RoleAssistant, Part{Kind: PartToolUse, ID: it.CallID, Name: NamespacedName(it.Namespace, it.Name), Input: json.RawMessage(args)})
			case "custom_tool_call":
				// A freeform tool's call: its string input becomes the one
				// parameter of the function the tool is carried as.
				var in string
				if json.Unmarshal(it.Input, &in) != nil {
					return nil, badRequest("%s: input must be a string", where)
				}
				add(RoleAssistant, Part{Kind: PartToolUse, ID: it.CallID, Name: NamespacedName(it.Namespace, it.Name), Input: mustJSON(map[string]string{FreeformParam: in})})
			case "tool_search_call", "tool_search_output":
				// A search of the tools the client deferred. OpenAI's own
				// (server) searched tools the request gives, all of which
				// a translation offers: it is left out. The client's is a
				// call of the tool it is carried as, and its output
				// offers the tools it loaded (searchOutput).
				if it.Execution != "client" {
					continue
				}
				if it.Type == "tool_search_call" {
					args := []byte(trimJSONSpace(string(it.Args)))
					var s string
					if json.Unmarshal(args, &s) == nil {
						args = []byte(trimJSONSpace(s))
					}
					if len(args) == 0 || string(args) == "null" {
						args = []byte("{}")
					}
					if args[0] != '{' || !json.Valid(args) {
						return nil, badRequest("%s: arguments must be a JSON object", where)
					}
					add(RoleAssistant, Part{Kind: PartToolUse, ID: it.CallID, Name: ToolSearchName, Input: json.RawMessage(args)})
					continue
				}
				text, err := loaded.add(it.Tools, where+".tools")
				if err != nil {
					return nil, err
				}
				add(RoleUser, Part{Kind: PartToolResult, ToolUseID: it.CallID, Content: []Part{{Kind: PartText, Text: text}}})
			case "agent_message":
				// A message between Codex's agents (its multi-agent
				// tools; a sub-agent gets its task so): the model reads it
				// as a user turn that names who sent it.
				text, err := agentMessage(it.Author, it.Recipient, it.Content, where)
				if err != nil {
					return nil, err
				}
				add(RoleUser, Part{Kind: PartText, Text: text})
			case "additional_tools":
				// Tools given in the input (Codex's way in some versions,
				// to keep the request's prefix for the prompt cache): the
				// other formats take tools for the whole request only.
				if err := r.addResponsesTools(it.Tools, where+".tools"); err != nil {
					return nil, err
				}
			case "function_call_output", "custom_tool_call_output":
				// The output is text, or a list of input_text, input_image
				// and input_file parts (a screenshot a tool took).
				var content []Part
				var out string
				switch {
				case !present(it.Output) || json.Unmarshal(it.Output, &out) == nil:
					content = []Part{{Kind: PartText, Text: out}}
				case len(it.Output) > 0 && it.Output[0] == '[':
					parts, err := responsesContent(it.Output, where+".output")
					if err != nil {
						return nil, err
					}
					content = parts
				default:
					return nil, badRequest("%s: output must be a string or a list of parts", where)
				}
				add(RoleUser, Part{Kind: PartToolResult, ToolUseID: it.CallID, Content: content})
			case "compaction_trigger":
				// Codex's compaction in the Responses API (its remote
				// compaction v2): the answer is to be the conversation's
				// compaction, not a turn.
				if i != len(items)-1 {
					return nil, badRequest("%s: a compaction_trigger item must be the input's last", where)
				}
				compact = true
			case "compaction":
				// A compaction the gateway made (sealedCompactionPrefix)
				// is the user message of its summary; another provider's
				// is its own encrypted state, which no translation reads.
				if !strings.HasPrefix(it.EncryptedContent, sealedCompactionPrefix) {
					return nil, badRequest("%s: item type %q cannot be translated", where, it.Type)
				}
				text, err := openCompaction(it.EncryptedContent, where)
				if err != nil {
					return nil, err
				}
				add(RoleUser, Part{Kind: PartText, Text: text})
			case "web_search_call":
				// A search OpenAI ran in an earlier turn: its findings are
				// in the answer's text that follows; the call itself is
				// OpenAI's own, as its tool is (hostedWebSearch).
			case "reasoning":
				// A thinking block this gateway sealed for the client
				// (SealedPrefix) goes back to Anthropic as it was
				// written; another provider's reasoning state is not
				// portable, and is left out.
				if strings.HasPrefix(it.EncryptedContent, SealedPrefix) {
					p, err := openThinking(it.EncryptedContent, where)
					if err != nil {
						return nil, err
					}
					add(RoleAssistant, p)
				}
			default:
				return nil, badRequest("%s: item type %q cannot be translated", where, it.Type)
			}
		}
	}
	if err := r.addResponsesTools(q.Tools, "tools"); err != nil {
		return nil, err
	}
	loaded.offer(r)
	var forced struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(q.ToolChoice, &forced) == nil && hostedWebSearch[forced.Type] {
		return nil, untranslatable("tool_choice "+forced.Type, "only OpenAI runs its web search")
	}
	if err := r.setToolChoice(q.ToolChoice); err != nil {
		return nil, err
	}
	if q.ParallelToolCalls != nil && !*q.ParallelToolCalls {
		if r.ToolChoice == nil {
			r.ToolChoice = &ToolChoice{Mode: "auto"}
		}
		r.ToolChoice.DisableParallel = true
	}
	if err := r.validate("input: at least one user or assistant item is required"); err != nil {
		return nil, err
	}
	if compact {
		r.askSummary()
	}
	return r, nil
}

// agentMessage is the text a Responses agent_message item (where) is
// given as: a line naming its author and recipient, then its text. Its
// content is text parts; an encrypted one only OpenAI reads.
func agentMessage(author, recipient string, content json.RawMessage, where string) (string, error) {
	var parts []struct {
		Type             string `json:"type"`
		Text             string `json:"text"`
		EncryptedContent string `json:"encrypted_content"`
	}
	if err := json.Unmarshal(content, &parts); err != nil {
		return "", badRequest("%s: an agent message's content must be a list of parts", where)
	}
	texts := make([]string, 0, len(parts))
	for i, p := range parts {
		switch p.Type {
		case "input_text":
			texts = append(texts, p.Text)
		case "encrypted_content":
			return "", untranslatable(fmt.Sprintf("%s.content[%d]: an encrypted agent message", where, i), "only OpenAI reads it")
		default:
			return "", badRequest("%s.content[%d]: content part %q not supported", where, i, p.Type)
		}
	}
	return fmt.Sprintf("[Message from %s to %s]\n%s", cmp.Or(author, "another agent"), cmp.Or(recipient, "you"), strings.Join(texts, "\n")), nil
}

// responsesTool is a Responses tool: a function, a custom (freeform)
// tool, a namespace of those, or a hosted tool.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Format      json.RawMessage `json:"format"`
	// Tools are a namespace's.
	Tools []responsesTool `json:"tools"`
	// Execution is a tool_search's: client or server.
	Execution string `json:"execution"`
}

// searchOutput gathers the tools that the client's tool searches loaded
// (tool_search_output items), in their order, each once.
type searchOutput struct {
	tools []Tool
	seen  map[string]bool
}

// add gathers the tools of one search's output (where names them for an
// error) and returns the search's result as the model is told it: the
// names of the tools it can now call.
func (o *searchOutput) add(tools []responsesTool, where string) (string, error) {
	var found Request
	if err := found.addResponsesTools(tools, where); err != nil {
		return "", err
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	names := make([]string, 0, len(found.Tools))
	for _, t := range found.Tools {
		names = append(names, t.Name)
		if !o.seen[t.Name] {
			o.seen[t.Name] = true
			o.tools = append(o.tools, t)
		}
	}
	if len(names) == 0 {
		return "No tools matched the search.", nil
	}
	return "These tools were loaded and can be called now: " + strings.Join(names, ", ") + ".", nil
}

// offer adds the loaded tools to r's, but those r has already.
func (o *searchOutput) offer(r *Request) {
	have := make(map[string]bool, len(r.Tools))
	for _, t := range r.Tools {
		have[t.Name] = true
	}
	for _, t := range o.tools {
		if !have[t.Name] {
			r.Tools = append(r.Tools, t)
		}
	}
}

// addResponsesTools adds Responses tools to r (where names them for an
// error): functions and custom tools, and those of a namespace under
// their NamespacedName (given the namespace's description when they
// have none). Hosted web search is left out (hostedWebSearch); any other
// hosted tool is refused.
func (r *Request) addResponsesTools(tools []responsesTool, where string) error {
	for i, t := range tools {
		w := fmt.Sprintf("%s[%d]", where, i)
		switch t.Type {
		case "function", "custom":
			tool, err := t.tool(w)
			if err != nil {
				return err
			}
			r.Tools = append(r.Tools, tool)
		case "tool_search":
			// A search of the tools the client deferred: the client's
			// is carried as a function (Tool.Search); OpenAI's own (the
			// default) searches the tools the request gives
			// (defer_loading), all of which a translation offers, and is
			// left out.
			switch t.Execution {
			case "server", "": // OpenAI's default
				continue
			case "client":
			default:
				return badRequest("%s: a tool_search's execution must be client or server", w)
			}
			schema := t.Parameters
			if !present(schema) {
				schema = json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}},"required":["query"]}`)
			}
			desc := cmp.Or(t.Description, "Search for tools to load; the tools found can be called after it.")
			r.Tools = append(r.Tools, Tool{Name: ToolSearchName, Description: desc, Schema: schema, Search: true})
		case "namespace":
			if t.Name == "" {
				return badRequest("%s: a namespace needs a name", w)
			}
			for j, m := range t.Tools {
				mw := fmt.Sprintf("%s.tools[%d]", w, j)
				if (m.Type != "function" && m.Type != "custom") || m.Name == "" {
					return badRequest("%s: a namespace holds named function and custom tools only", mw)
				}
				tool, err := m.tool(mw)
				if err != nil {
					return err
				}
				tool.Namespace, tool.Local, tool.Name = t.Name, m.Name, NamespacedName(t.Name, m.Name)
				tool.Description = cmp.Or(tool.Description, t.Description)
				r.Tools = append(r.Tools, tool)
			}
		default:
			if !hostedWebSearch[t.Type] {
				return badRequest("tool type %q cannot be translated", t.Type)
			}
			// Left out: see hostedWebSearch.
		}
	}
	return nil
}

// tool is t, a function or a custom tool, as a Tool.
func (t responsesTool) tool(where string) (Tool, error) {
	if t.Type == "function" {
		return Tool{Name: t.Name, Description: t.Description, Schema: t.Parameters}, nil
	}
	schema, err := freeformSchema(t.Format, where+".format")
	if err != nil {
		return Tool{}, err
	}
	return Tool{Name: t.Name, Description: t.Description, Schema: schema, Freeform: true}, nil
}

// freeformSchema is the JSON Schema of the function a custom tool is
// carried as: an object whose one property, FreeformParam, is the tool's
// input. A grammar the input must match (Codex's apply_patch grammar) goes
// into that property's description: no target enforces it, and the tool
// itself is left to refuse an input that does not match.
func freeformSchema(format json.RawMessage, where string) (json.RawMessage, error) {
	desc := "The tool's whole input, as free-form text."
	if present(format) {
		var f struct {
			Type       string `json:"type"`
			Syntax     string `json:"syntax"`
			Definition string `json:"definition"`
		}
		if err := json.Unmarshal(format, &f); err != nil {
			return nil, badRequest("%s must be an object", where)
		}
		switch f.Type {
		case "text":
		case "grammar":
			if (f.Syntax != "lark" && f.Syntax != "regex") || strings.TrimSpace(f.Definition) == "" {
				return nil, badRequest(`%s: a grammar needs syntax "lark" or "regex" and a definition`, where)
			}
			desc += " It must match this " + f.Syntax + " grammar:\n" + f.Definition
		default:
			return nil, badRequest("%s.type %q", where, f.Type)
		}
	}
	return mustJSON(map[string]any{
		"type":                 "object",
		"properties":           map[string]any{FreeformParam: map[string]any{"type": "string", "description": desc}},
		"required":             []string{FreeformParam},
		"additionalProperties": false,
	}), nil
}

func responsesContent(raw json.RawMessage, where string) ([]Part, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []Part{{Kind: PartText, Text: s}}, nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Refusal  string `json:"refusal"`
		ImageURL string `json:"image_url"`
		openAIFile
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, badRequest("%s: content must be a string or a list of parts", where)
	}
	var out []Part
	for i, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			out = append(out, Part{Kind: PartText, Text: p.Text})
		case "refusal": // an earlier answer's refusal, sent back as history
			out = append(out, Part{Kind: PartText, Text: p.Refusal})
		case "input_image":
			if p.ImageURL == "" {
				// By file_id: the file lives at OpenAI.
				return nil, untranslatable(fmt.Sprintf("%s[%d]: an input_image without image_url", where, i), "an uploaded file lives at OpenAI")
			}
			out = append(out, imagePart(p.ImageURL))
		case "input_file":
			d, err := p.document(fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return nil, err
			}
			out = append(out, d)
		default:
			return nil, badRequest("%s[%d]: content part %q not supported", where, i, p.Type)
		}
	}
	return out, nil
}
