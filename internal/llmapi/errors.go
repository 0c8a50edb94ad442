package llmapi

import (
	"net/http"
	"strings"

	"github.com/iop-dev/iop/execution"
)

// OpenAIErrorCode is the code OpenAI's error shape gives a failure of
// canonical type typ, nil where it gives none: context_length_exceeded
// for a prompt past the model's context window, which OpenAI's SDKs and
// Codex tell apart from any other refusal.
func OpenAIErrorCode(typ string) any {
	if typ == "context_length" {
		return "context_length_exceeded"
	}
	return nil
}

// contextOverflow holds, lowercased, what model servers say when a prompt
// does not fit the model's context window: OpenAI's code and message,
// Anthropic's message, vLLM's and SGLang's ("This model's maximum context
// length is..."), llama.cpp's ("the request exceeds the available context
// size", its type exceed_context_size_error), FastAPI-based servers'
// ("Prompt too long: ..."), Amazon Bedrock's. Each is specific to the
// context window: a refusal of the output limit (max_tokens) says none.
var contextOverflow = []string{
	"context_length_exceeded",
	"exceed_context_size",
	"prompt is too long",
	"prompt too long",
	"maximum context length",
	"context length exceeded",
	"exceeds the context window",
	"exceeds the available context size",
	"exceeds the maximum context",
	"longer than the model's context length",
	"longer than the maximum model length",
	"input is too long for requested model",
}

// ContextOverflow reports whether a provider's refusal, given by its
// message, type and code, says that the prompt does not fit the model's
// context window; the Edge then tells its client so in the client's own
// terms (type context_length), which Claude Code and Codex act on (Claude
// Code takes a message that says "prompt is too long" as its
// prompt_too_long, its cue to compact the conversation).
func ContextOverflow(message, typ, code string) bool {
	for _, s := range [...]string{message, typ, code} {
		s = strings.ToLower(s)
		for _, p := range contextOverflow {
			if strings.Contains(s, p) {
				return true
			}
		}
	}
	return false
}

// OpenAIErrorBody renders OpenAI's error shape.
func OpenAIErrorBody(message, typ string, code any) []byte {
	return mustJSON(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
}

// FailureError maps a run failure to the error every client format
// renders: a status, a canonical type and a short message of the
// gateway's own (never the failure's note, which may name a provider).
// The deadline's is the one the Edge gives when it ends a request itself.
func FailureError(f *execution.Failure) *APIError {
	class := execution.FailureInternal
	if f != nil {
		class = f.Class
	}
	switch class {
	case execution.FailureInvalidRequest:
		return &APIError{Status: http.StatusBadRequest, Type: "invalid_request", Message: "The request was refused before reaching the model."}
	case execution.FailureRateLimited:
		return &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit", Message: "The model provider is rate limiting."}
	case execution.FailureUnavailable, execution.FailureTransport:
		return &APIError{Status: http.StatusServiceUnavailable, Type: "overloaded", Message: "The model provider is unavailable."}
	case execution.FailureDeadline:
		return &APIError{Status: http.StatusGatewayTimeout, Type: "timeout", Message: "The request exceeded its deadline."}
	case execution.FailureCanceled:
		return &APIError{Status: 499, Type: "canceled", Message: "The request was cancelled."}
	case execution.FailureInternal:
		return &APIError{Status: http.StatusInternalServerError, Type: "api_error", Message: "Internal error."}
	}
	return &APIError{Status: http.StatusBadGateway, Type: "api_error", Message: "The model provider failed."}
}
