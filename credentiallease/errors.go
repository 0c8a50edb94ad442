package credentiallease

import (
	"errors"
	"fmt"
)

// Refusals. Open returns a *RefusedError wrapping exactly one of these;
// test with errors.Is. None carries a secret.
var (
	ErrOversized          = errors.New("credentiallease: envelope too large")
	ErrMalformed          = errors.New("credentiallease: malformed envelope")
	ErrUnknownKey         = errors.New("credentiallease: unknown edge key id")
	ErrRetiredKey         = errors.New("credentiallease: retired edge key id")
	ErrBadSignature       = errors.New("credentiallease: signature does not verify")
	ErrUnsupportedVersion = errors.New("credentiallease: unsupported version")
	ErrUnsupportedSuite   = errors.New("credentiallease: unsupported suite")
	ErrWrongRecipient     = errors.New("credentiallease: lease is for another recipient")
	ErrStaleNodeKey       = errors.New("credentiallease: lease is sealed to a retired node key")
	ErrBindingMismatch    = errors.New("credentiallease: lease does not match the dispatch")
	ErrTTLTooLong         = errors.New("credentiallease: lease lifetime above the maximum")
	ErrExpired            = errors.New("credentiallease: lease expired")
	ErrNotYetValid        = errors.New("credentiallease: lease not yet valid")
	ErrRevoked            = errors.New("credentiallease: credential revoked")
	ErrDisabled           = errors.New("credentiallease: profile or route disabled")
	ErrStaleRevision      = errors.New("credentiallease: credential revision older than one already seen")
	ErrStaleGeneration    = errors.New("credentiallease: lease is for another connection generation")
	ErrReplayed           = errors.New("credentiallease: lease already used")
	ErrOpenFailed         = errors.New("credentiallease: sealed secret does not open")
)

// RefusedError is a refused lease: Reason is one of the Err values above;
// Field names the binding field for ErrBindingMismatch.
type RefusedError struct {
	Reason error
	Field  string
	Detail string
}

func (e *RefusedError) Error() string {
	s := e.Reason.Error()
	if e.Field != "" {
		s += ": " + e.Field
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the reason.
func (e *RefusedError) Unwrap() error { return e.Reason }

func refuse(reason error, format string, args ...any) *RefusedError {
	return &RefusedError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

func mismatch(field string) *RefusedError {
	return &RefusedError{Reason: ErrBindingMismatch, Field: field}
}
