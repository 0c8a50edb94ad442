package execution

import (
	"context"
	"errors"
	"fmt"
)

// FailureClass classifies why a run failed. The classes are closed: each
// maps to one wire value and one client-facing error.
type FailureClass uint8

// Failure classes.
const (
	// FailureCanceled: the caller cancelled.
	FailureCanceled FailureClass = iota + 1
	// FailureDeadline: the run's hard deadline passed.
	FailureDeadline
	// FailureProvider: the provider answered with an error.
	FailureProvider
	// FailureUnavailable: the provider could not be reached or is not
	// hosted.
	FailureUnavailable
	// FailureInvalidRequest: refused before reaching the provider.
	FailureInvalidRequest
	// FailureTransport: the Node connection ended (generation fenced).
	FailureTransport
	// FailureInternal: a local failure.
	FailureInternal
	// FailureRateLimited: the provider refused for rate or quota.
	FailureRateLimited
)

func (c FailureClass) String() string {
	switch c {
	case FailureCanceled:
		return "canceled"
	case FailureDeadline:
		return "deadline_exceeded"
	case FailureProvider:
		return "provider"
	case FailureUnavailable:
		return "unavailable"
	case FailureInvalidRequest:
		return "invalid_request"
	case FailureTransport:
		return "transport"
	case FailureInternal:
		return "internal"
	case FailureRateLimited:
		return "rate_limited"
	}
	return fmt.Sprintf("FailureClass(%d)", uint8(c))
}

// Failure is a classified run failure. Message is a short note safe for
// logs and clients: never a secret, a prompt or a provider's raw body.
type Failure struct {
	Class   FailureClass
	Message string
}

func (f *Failure) Error() string {
	if f.Message == "" {
		return "execution: run failed: " + f.Class.String()
	}
	return "execution: run failed: " + f.Class.String() + ": " + f.Message
}

// Failf returns a *Failure with a formatted message.
func Failf(class FailureClass, format string, args ...any) *Failure {
	return &Failure{Class: class, Message: fmt.Sprintf(format, args...)}
}

// Classify turns the error a provider returned (or the context's error)
// into a *Failure. A *Failure passes through; a context error becomes
// Canceled or Deadline; anything else becomes Provider with a generic
// message, because a raw error text may carry upstream content.
func Classify(ctx context.Context, err error) *Failure {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(context.Cause(ctx), context.DeadlineExceeded):
		return &Failure{Class: FailureDeadline, Message: "hard deadline exceeded"}
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		return &Failure{Class: FailureCanceled, Message: "canceled"}
	}
	return &Failure{Class: FailureProvider, Message: "provider error"}
}
