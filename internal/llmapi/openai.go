package llmapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/iop-dev/iop/execution"
)

// ErrUnsupported is returned when a request uses a feature the normalized
// path cannot carry (tools, images, audio): it is refused, never dropped.
var ErrUnsupported = errors.New("llmapi: feature not supported by this provider")

// ChatToInput converts a Chat Completions request into a normalized run
// input. Text-only conversations convert; tools, non-text content and
// tool messages are refused with ErrUnsupported.
func ChatToInput(body []byte) (execution.Input, execution.Options, error) {
	var req struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCalls  json.RawMessage `json:"tool_calls"`
			ToolCallID string          `json:"tool_call_id"`
		} `json:"messages"`
		Tools               json.RawMessage `json:"tools"`
		Functions           json.RawMessage `json:"functions"`
		MaxTokens           int             `json:"max_tokens"`
		MaxCompletionTokens int             `json:"max_completion_tokens"`
		Temperature         *float64        `json:"temperature"`
		Stream              bool            `json:"stream"`
	}
	var in execution.Input
	var opt execution.Options
	if err := json.Unmarshal(body, &req); err != nil {
		return in, opt, fmt.Errorf("llmapi: chat request: %w", err)
	}
	if nonEmpty(req.Tools) || nonEmpty(req.Functions) {
		return in, opt, fmt.Errorf("%w: tools", ErrUnsupported)
	}
	if len(req.Messages) == 0 {
		return in, opt, errors.New("llmapi: chat request: messages is required")
	}
	var system []string
	for i, m := range req.Messages {
		if nonEmpty(m.ToolCalls) || m.ToolCallID != "" {
			return in, opt, fmt.Errorf("%w: tool messages", ErrUnsupported)
		}
		text, err := textContent(m.Content)
		if err != nil {
			return in, opt, fmt.Errorf("messages[%d]: %w", i, err)
		}
		switch m.Role {
		case "system", "developer":
			system = append(system, text)
		case "user", "assistant":
			in.Messages = append(in.Messages, execution.Message{Role: m.Role, Content: text})
		default:
			return in, opt, fmt.Errorf("%w: role %q", ErrUnsupported, m.Role)
		}
	}
	in.System = strings.Join(system, "\n\n")
	opt.MaxOutputTokens = max(req.MaxTokens, req.MaxCompletionTokens)
	opt.Temperature = req.Temperature
	opt.Stream = req.Stream
	return in, opt, nil
}

// ResponsesToInput converts a Responses request into a normalized run
// input: instructions become the system prompt; input is a string or a list
// of message items with text parts.
func ResponsesToInput(body []byte) (execution.Input, execution.Options, error) {
	var req struct {
		Instructions       string          `json:"instructions"`
		Input              json.RawMessage `json:"input"`
		Tools              json.RawMessage `json:"tools"`
		MaxOutputTokens    int             `json:"max_output_tokens"`
		Temperature        *float64        `json:"temperature"`
		Stream             bool            `json:"stream"`
		PreviousResponseID string          `json:"previous_response_id"`
	}
	var in execution.Input
	var opt execution.Options
	if err := json.Unmarshal(body, &req); err != nil {
		return in, opt, fmt.Errorf("llmapi: responses request: %w", err)
	}
	if nonEmpty(req.Tools) {
		return in, opt, fmt.Errorf("%w: tools", ErrUnsupported)
	}
	if req.PreviousResponseID != "" {
		return in, opt, fmt.Errorf("%w: previous_response_id", ErrUnsupported)
	}
	in.System = req.Instructions
	var s string
	if json.Unmarshal(req.Input, &s) == nil {
		in.Messages = []execution.Message{{Role: "user", Content: s}}
	} else {
		var items []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(req.Input, &items); err != nil || len(items) == 0 {
			return in, opt, errors.New("llmapi: responses request: input must be a string or a list of messages")
		}
		for i, it := range items {
			if it.Type != "" && it.Type != "message" {
				return in, opt, fmt.Errorf("%w: input item type %q", ErrUnsupported, it.Type)
			}
			text, err := textContent(it.Content)
			if err != nil {
				return in, opt, fmt.Errorf("input[%d]: %w", i, err)
			}
			switch it.Role {
			case "system", "developer":
				in.System = strings.TrimSpace(in.System + "\n\n" + text)
			case "user", "assistant":
				in.Messages = append(in.Messages, execution.Message{Role: it.Role, Content: text})
			default:
				return in, opt, fmt.Errorf("%w: role %q", ErrUnsupported, it.Role)
			}
		}
	}
	opt.MaxOutputTokens = req.MaxOutputTokens
	opt.Temperature = req.Temperature
	opt.Stream = req.Stream
	return in, opt, nil
}

func nonEmpty(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "[]"
}

// textContent reads a content that is a string or a list of text parts
// (type text, input_text or output_text).
func textContent(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content must be a string or a list of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			b.WriteString(p.Text)
		default:
			return "", fmt.Errorf("%w: content part %q", ErrUnsupported, p.Type)
		}
	}
	return b.String(), nil
}

// FinishReason maps a normalized stop reason to Chat Completions'
// finish_reason. A turn with a tool call always finishes with tool_calls.
func FinishReason(stop string, toolCalls int) string {
	if toolCalls > 0 {
		return "tool_calls"
	}
	switch stop {
	case "length", "content_filter", "tool_calls":
		return stop
	}
	return "stop"
}
