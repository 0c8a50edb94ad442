package llmapitest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// anthropicToolID is the pattern Anthropic holds tool call ids to.
var anthropicToolID = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// toolName is the pattern OpenAI and Anthropic hold tool names to, a
// tool's and a call's alike.
var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// checkToolName refuses a tool name neither provider takes; where says
// where it was met.
func checkToolName(where, name string) error {
	if !toolName.MatchString(name) {
		return fmt.Errorf("%s: tool name %q", where, name)
	}
	return nil
}

// CheckAnthropicRequest holds a request the Edge translated for Anthropic
// to what Anthropic refuses of any request, whatever the client sent: a
// conversation of at least one message, roles alternating, no empty
// content, no text block without non-whitespace text and no final
// assistant text that ends in whitespace, tool call ids of its pattern
// and inputs that are objects, tools whose input schema is an object
// schema, tool names (of tools, calls and the tool choice) of its
// pattern, a positive max_tokens above any thinking budget, not both
// temperature and top_p (nor either beside thinking), and prompt-cache
// marks as it takes them (checkCacheMarks). What only a wrong client
// sends (a tool result no call asked for) is the provider's to refuse,
// not checked here.
func CheckAnthropicRequest(body []byte) error {
	var r struct {
		Messages []struct {
			Role    string            `json:"role"`
			Content []json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"input_schema"`
		} `json:"tools"`
		ToolChoice *struct {
			Name *string `json:"name"`
		} `json:"tool_choice"`
		MaxTokens   int      `json:"max_tokens"`
		Temperature *float64 `json:"temperature"`
		TopP        *float64 `json:"top_p"`
		Thinking    *struct {
			Type   string `json:"type"`
			Budget int    `json:"budget_tokens"`
		} `json:"thinking"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("not an Anthropic request: %v", err)
	}
	if len(r.Messages) == 0 {
		return fmt.Errorf("no messages")
	}
	if err := checkCacheMarks(body); err != nil {
		return err
	}
	for i, m := range r.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fmt.Errorf("messages[%d]: role %q", i, m.Role)
		}
		if i > 0 && r.Messages[i-1].Role == m.Role {
			return fmt.Errorf("messages[%d]: two %s messages in a row", i, m.Role)
		}
		if len(m.Content) == 0 {
			return fmt.Errorf("messages[%d]: no content", i)
		}
		for j, raw := range m.Content {
			if err := checkAnthropicBlock(raw); err != nil {
				return fmt.Errorf("messages[%d].content[%d]: %v", i, j, err)
			}
		}
	}
	// A final assistant message is a prefill, which may not end in
	// whitespace.
	if last := r.Messages[len(r.Messages)-1]; last.Role == "assistant" {
		var b struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(last.Content[len(last.Content)-1], &b) == nil && b.Type == "text" && strings.TrimRightFunc(b.Text, unicode.IsSpace) != b.Text {
			return fmt.Errorf("final assistant content ends in whitespace: %q", b.Text)
		}
	}
	for i, t := range r.Tools {
		if t.InputSchema == nil || t.InputSchema["type"] != "object" {
			return fmt.Errorf("tools[%d]: input_schema %v", i, t.InputSchema)
		}
		if err := checkToolName(fmt.Sprintf("tools[%d]", i), t.Name); err != nil {
			return err
		}
	}
	if tc := r.ToolChoice; tc != nil && tc.Name != nil {
		if err := checkToolName("tool_choice", *tc.Name); err != nil {
			return err
		}
	}
	switch {
	case r.MaxTokens <= 0:
		return fmt.Errorf("max_tokens %d", r.MaxTokens)
	case r.Temperature != nil && r.TopP != nil:
		return fmt.Errorf("both temperature and top_p")
	case r.Thinking != nil && r.Thinking.Type != "enabled" && r.Thinking.Type != "adaptive":
		return fmt.Errorf("thinking of type %q", r.Thinking.Type)
	case r.Thinking != nil && r.Thinking.Type == "enabled" && (r.Thinking.Budget < 1024 || r.Thinking.Budget >= r.MaxTokens):
		return fmt.Errorf("thinking budget %d with max_tokens %d", r.Thinking.Budget, r.MaxTokens)
	case r.Thinking != nil && r.Thinking.Type == "adaptive" && r.Thinking.Budget != 0:
		return fmt.Errorf("adaptive thinking with a budget")
	case r.Thinking != nil && (r.Temperature != nil || r.TopP != nil):
		return fmt.Errorf("temperature or top_p beside thinking")
	}
	return nil
}

// checkCacheMarks holds an Anthropic request's prompt-cache breakpoints
// to the API's rules: at most four blocks (tools, system and message
// blocks) carry cache_control, each of type ephemeral, none of them a
// thinking block or a blank text block; a system given as blocks holds
// text blocks with text.
func checkCacheMarks(body []byte) error {
	type marked struct {
		Type         string `json:"type"`
		Text         string `json:"text"`
		CacheControl *struct {
			Type string `json:"type"`
		} `json:"cache_control"`
	}
	var r struct {
		System   json.RawMessage `json:"system"`
		Tools    []marked        `json:"tools"`
		Messages []struct {
			Content []marked `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("not an Anthropic request: %v", err)
	}
	var system []marked
	if len(r.System) > 0 && r.System[0] == '[' {
		if err := json.Unmarshal(r.System, &system); err != nil {
			return fmt.Errorf("system: %v", err)
		}
		for i, b := range system {
			if b.Type != "text" || strings.TrimSpace(b.Text) == "" {
				return fmt.Errorf("system[%d]: a %q block with text %q", i, b.Type, b.Text)
			}
		}
	}
	marks := 0
	check := func(where string, b marked) error {
		if b.CacheControl == nil {
			return nil
		}
		marks++
		switch {
		case b.CacheControl.Type != "ephemeral":
			return fmt.Errorf("%s: cache_control of type %q", where, b.CacheControl.Type)
		case b.Type == "thinking" || b.Type == "redacted_thinking":
			return fmt.Errorf("%s: cache_control on a %s block", where, b.Type)
		case b.Type == "text" && strings.TrimSpace(b.Text) == "":
			return fmt.Errorf("%s: cache_control on a blank text block", where)
		}
		return nil
	}
	for i, t := range r.Tools {
		t.Type = "tool"
		if err := check(fmt.Sprintf("tools[%d]", i), t); err != nil {
			return err
		}
	}
	for i, b := range system {
		if err := check(fmt.Sprintf("system[%d]", i), b); err != nil {
			return err
		}
	}
	for i, m := range r.Messages {
		for j, b := range m.Content {
			if err := check(fmt.Sprintf("messages[%d].content[%d]", i, j), b); err != nil {
				return err
			}
		}
	}
	if marks > 4 {
		return fmt.Errorf("%d blocks with cache_control (Anthropic takes 4)", marks)
	}
	return nil
}

func checkAnthropicBlock(raw json.RawMessage) error {
	var b struct {
		Type      string            `json:"type"`
		Text      *string           `json:"text"`
		ID        string            `json:"id"`
		Name      string            `json:"name"`
		Input     json.RawMessage   `json:"input"`
		ToolUseID string            `json:"tool_use_id"`
		Content   []json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return err
	}
	switch b.Type {
	case "text":
		if b.Text == nil || strings.TrimSpace(*b.Text) == "" {
			return fmt.Errorf("a text block without non-whitespace text")
		}
	case "tool_use":
		var in map[string]any
		if !anthropicToolID.MatchString(b.ID) || json.Unmarshal(b.Input, &in) != nil || in == nil {
			return fmt.Errorf("tool_use id %q, input %s", b.ID, b.Input)
		}
		return checkToolName("tool_use", b.Name)
	case "tool_result":
		if !anthropicToolID.MatchString(b.ToolUseID) {
			return fmt.Errorf("tool_result for id %q", b.ToolUseID)
		}
		for _, c := range b.Content {
			if err := checkAnthropicBlock(c); err != nil {
				return fmt.Errorf("tool_result content: %v", err)
			}
		}
	}
	return nil
}

// CheckChatRequest holds a request the Edge translated for Chat
// Completions to what OpenAI refuses of any request: no messages, a
// tool_choice or parallel_tool_calls without tools, a call without an id
// or with arguments that are not a string, a tool name (of a tool, a call
// or the tool choice) outside its pattern, a tool message that names no
// call, a call id over 40 bytes, a user over 64, both max_tokens and
// max_completion_tokens.
func CheckChatRequest(body []byte) error {
	var r struct {
		Messages []struct {
			Role      string `json:"role"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments any    `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
			ToolCallID *string `json:"tool_call_id"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
		ToolChoice          json.RawMessage `json:"tool_choice"`
		ParallelToolCalls   json.RawMessage `json:"parallel_tool_calls"`
		MaxTokens           json.RawMessage `json:"max_tokens"`
		MaxCompletionTokens json.RawMessage `json:"max_completion_tokens"`
		User                string          `json:"user"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("not a Chat Completions request: %v", err)
	}
	switch {
	case len(r.Messages) == 0:
		return fmt.Errorf("no messages")
	case r.MaxTokens != nil && r.MaxCompletionTokens != nil:
		return fmt.Errorf("both max_tokens and max_completion_tokens")
	}
	for i, m := range r.Messages {
		for j, c := range m.ToolCalls {
			if _, ok := c.Function.Arguments.(string); !ok || c.ID == "" || len(c.ID) > 40 || c.Type != "function" {
				return fmt.Errorf("messages[%d].tool_calls[%d]: id %q, type %q, arguments %v", i, j, c.ID, c.Type, c.Function.Arguments)
			}
			if err := checkToolName(fmt.Sprintf("messages[%d].tool_calls[%d]", i, j), c.Function.Name); err != nil {
				return err
			}
		}
		if m.Role == "tool" && (m.ToolCallID == nil || *m.ToolCallID == "" || len(*m.ToolCallID) > 40) {
			return fmt.Errorf("messages[%d]: a tool message without a tool_call_id OpenAI takes", i)
		}
	}
	var tools []string
	for _, t := range r.Tools {
		tools = append(tools, t.Function.Name)
	}
	var choice struct {
		Function *struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	var choiceName *string
	if json.Unmarshal(r.ToolChoice, &choice) == nil && choice.Function != nil {
		choiceName = &choice.Function.Name
	}
	return checkOpenAITools(tools, choiceName, r.ToolChoice, r.ParallelToolCalls, r.User)
}

// checkOpenAITools holds what both of OpenAI's APIs refuse of a request's
// tools and end user: a tool_choice or parallel_tool_calls without tools,
// a tool name (of a tool, or the tool choice's, when it names one) outside
// the pattern, a user over 64 bytes.
func checkOpenAITools(tools []string, choiceName *string, choice, parallel json.RawMessage, user string) error {
	switch {
	case len(tools) == 0 && (choice != nil || parallel != nil):
		return fmt.Errorf("tool_choice or parallel_tool_calls without tools")
	case len(user) > 64:
		return fmt.Errorf("a user of %d bytes", len(user))
	}
	for i, name := range tools {
		if err := checkToolName(fmt.Sprintf("tools[%d]", i), name); err != nil {
			return err
		}
	}
	if choiceName != nil {
		return checkToolName("tool_choice", *choiceName)
	}
	return nil
}

// CheckResponsesRequest holds a request the Edge translated for Responses
// to what OpenAI refuses of any request: a tool_choice or
// parallel_tool_calls without tools, a stop sequence (Responses has no
// such field), a function call without a call_id or with arguments that
// are not a string, a tool name (of a tool, a call or the tool choice)
// outside its pattern, a call output that names no call, a call_id over
// 64 bytes, a user over 64, a reasoning item sent back without its
// summary list or its encrypted state.
func CheckResponsesRequest(body []byte) error {
	var r struct {
		Input []struct {
			Type             string `json:"type"`
			CallID           string `json:"call_id"`
			Name             string `json:"name"`
			Arguments        any    `json:"arguments"`
			Summary          any    `json:"summary"`
			EncryptedContent any    `json:"encrypted_content"`
		} `json:"input"`
		Tools []struct {
			Name string `json:"name"`
		} `json:"tools"`
		ToolChoice        json.RawMessage `json:"tool_choice"`
		ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
		Stop              json.RawMessage `json:"stop"`
		User              string          `json:"user"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("not a Responses request: %v", err)
	}
	if r.Stop != nil {
		return fmt.Errorf("a stop field")
	}
	for i, it := range r.Input {
		if len(it.CallID) > 64 {
			return fmt.Errorf("input[%d]: a call_id of %d bytes", i, len(it.CallID))
		}
		switch it.Type {
		case "function_call":
			if _, ok := it.Arguments.(string); !ok || it.CallID == "" {
				return fmt.Errorf("input[%d]: call_id %q, arguments %v", i, it.CallID, it.Arguments)
			}
			if err := checkToolName(fmt.Sprintf("input[%d]", i), it.Name); err != nil {
				return err
			}
		case "custom_tool_call":
			if it.CallID == "" {
				return fmt.Errorf("input[%d]: call_id %q", i, it.CallID)
			}
			if err := checkToolName(fmt.Sprintf("input[%d]", i), it.Name); err != nil {
				return err
			}
		case "function_call_output", "custom_tool_call_output":
			if it.CallID == "" {
				return fmt.Errorf("input[%d]: an output that names no call", i)
			}
		case "reasoning":
			// A reasoning item sent back: its summary (a list) and the
			// state it carries; without, it is an item id at store false.
			_, list := it.Summary.([]any)
			if enc, ok := it.EncryptedContent.(string); !list || !ok || enc == "" {
				return fmt.Errorf("input[%d]: a reasoning item with summary %v, encrypted_content %v", i, it.Summary, it.EncryptedContent)
			}
		}
	}
	var tools []string
	for _, t := range r.Tools {
		tools = append(tools, t.Name)
	}
	var choice struct {
		Name *string `json:"name"`
	}
	json.Unmarshal(r.ToolChoice, &choice)
	return checkOpenAITools(tools, choice.Name, r.ToolChoice, r.ParallelToolCalls, r.User)
}
