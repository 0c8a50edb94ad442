package llmapi

import (
	"net/http"

	"github.com/iop-dev/iop/execution"
)

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
