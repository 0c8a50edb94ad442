package llmapi

import (
	"net/http"

	"github.com/iop-dev/iop/execution"
)

// OpenAIErrorBody renders OpenAI's error shape.
func OpenAIErrorBody(message, typ string, code any) []byte {
	return mustJSON(map[string]any{"error": map[string]any{"message": message, "type": typ, "param": nil, "code": code}})
}

// OpenAIError maps a run failure to an HTTP status and OpenAI's error body.
// The message is the failure's own short note, never upstream content.
func OpenAIError(f *execution.Failure) (int, []byte) {
	if f == nil {
		f = &execution.Failure{Class: execution.FailureInternal}
	}
	status, typ := http.StatusBadGateway, "server_error"
	msg := "The model provider failed: " + f.Class.String()
	switch f.Class {
	case execution.FailureInvalidRequest:
		status, typ, msg = http.StatusBadRequest, "invalid_request_error", "The request was refused before reaching the model: "+f.Message
	case execution.FailureRateLimited:
		status, typ, msg = http.StatusTooManyRequests, "rate_limit_error", "The model provider is rate limiting."
	case execution.FailureUnavailable, execution.FailureTransport:
		status, msg = http.StatusServiceUnavailable, "The model provider is unavailable."
	case execution.FailureDeadline:
		status, typ, msg = http.StatusGatewayTimeout, "timeout", "The request exceeded its deadline."
	case execution.FailureCanceled:
		status, typ, msg = 499, "canceled", "The request was cancelled."
	case execution.FailureInternal:
		status, msg = http.StatusInternalServerError, "Internal error."
	}
	return status, OpenAIErrorBody(msg, typ, nil)
}
