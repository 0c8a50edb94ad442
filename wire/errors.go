package wire

import (
	"errors"
	"fmt"
	"strings"

	"github.com/iop-dev/iop/wire/iopv1"
)

// CloseReason is why a session ended. Its values are the wire's
// iopv1.CloseReason values, so a reason read from the peer keeps its meaning
// even when this side does not know its name.
type CloseReason int32

// Close reasons. See iopv1.CloseReason for their meaning on the wire.
const (
	ReasonUnspecified      = CloseReason(iopv1.CloseReason_CLOSE_REASON_UNSPECIFIED)
	ReasonNormal           = CloseReason(iopv1.CloseReason_CLOSE_REASON_NORMAL)
	ReasonProtocolError    = CloseReason(iopv1.CloseReason_CLOSE_REASON_PROTOCOL_ERROR)
	ReasonVersionMismatch  = CloseReason(iopv1.CloseReason_CLOSE_REASON_VERSION_MISMATCH)
	ReasonFrameTooLarge    = CloseReason(iopv1.CloseReason_CLOSE_REASON_FRAME_TOO_LARGE)
	ReasonFlowControlError = CloseReason(iopv1.CloseReason_CLOSE_REASON_FLOW_CONTROL_ERROR)
	ReasonHeartbeatTimeout = CloseReason(iopv1.CloseReason_CLOSE_REASON_HEARTBEAT_TIMEOUT)
	ReasonWriteTimeout     = CloseReason(iopv1.CloseReason_CLOSE_REASON_WRITE_TIMEOUT)
	ReasonResetFlood       = CloseReason(iopv1.CloseReason_CLOSE_REASON_RESET_FLOOD)
	ReasonControlFlood     = CloseReason(iopv1.CloseReason_CLOSE_REASON_CONTROL_FLOOD)
	ReasonHandshakeTimeout = CloseReason(iopv1.CloseReason_CLOSE_REASON_HANDSHAKE_TIMEOUT)
	ReasonTransportError   = CloseReason(iopv1.CloseReason_CLOSE_REASON_TRANSPORT_ERROR)
	ReasonInternal         = CloseReason(iopv1.CloseReason_CLOSE_REASON_INTERNAL)
	ReasonSuperseded       = CloseReason(iopv1.CloseReason_CLOSE_REASON_SUPERSEDED)
	ReasonRejected         = CloseReason(iopv1.CloseReason_CLOSE_REASON_REJECTED)
)

// String returns the reason's short snake_case name, as used in logs and
// metrics (for example "heartbeat_timeout").
func (r CloseReason) String() string {
	switch r {
	case ReasonUnspecified:
		return "unspecified"
	case ReasonNormal:
		return "normal"
	case ReasonProtocolError:
		return "protocol_error"
	case ReasonVersionMismatch:
		return "version_mismatch"
	case ReasonFrameTooLarge:
		return "frame_too_large"
	case ReasonFlowControlError:
		return "flow_control_error"
	case ReasonHeartbeatTimeout:
		return "heartbeat_timeout"
	case ReasonWriteTimeout:
		return "write_timeout"
	case ReasonResetFlood:
		return "reset_flood"
	case ReasonControlFlood:
		return "control_flood"
	case ReasonHandshakeTimeout:
		return "handshake_timeout"
	case ReasonTransportError:
		return "transport_error"
	case ReasonInternal:
		return "internal"
	case ReasonSuperseded:
		return "superseded"
	case ReasonRejected:
		return "rejected"
	}
	return fmt.Sprintf("close_reason_%d", int32(r))
}

// ResetCode is why a stream was reset. Its values are the wire's
// iopv1.ResetCode values.
type ResetCode int32

// Reset codes. See iopv1.ResetCode for their meaning on the wire.
const (
	ResetUnspecified     = ResetCode(iopv1.ResetCode_RESET_CODE_UNSPECIFIED)
	ResetCancel          = ResetCode(iopv1.ResetCode_RESET_CODE_CANCEL)
	ResetRefused         = ResetCode(iopv1.ResetCode_RESET_CODE_REFUSED)
	ResetUnsupported     = ResetCode(iopv1.ResetCode_RESET_CODE_UNSUPPORTED)
	ResetProtocolError   = ResetCode(iopv1.ResetCode_RESET_CODE_PROTOCOL_ERROR)
	ResetInternal        = ResetCode(iopv1.ResetCode_RESET_CODE_INTERNAL)
	ResetMessageTooLarge = ResetCode(iopv1.ResetCode_RESET_CODE_MESSAGE_TOO_LARGE)
)

// String returns the code's short snake_case name.
func (c ResetCode) String() string {
	switch c {
	case ResetUnspecified:
		return "unspecified"
	case ResetCancel:
		return "cancel"
	case ResetRefused:
		return "refused"
	case ResetUnsupported:
		return "unsupported"
	case ResetProtocolError:
		return "protocol_error"
	case ResetInternal:
		return "internal"
	case ResetMessageTooLarge:
		return "message_too_large"
	}
	return fmt.Sprintf("reset_code_%d", int32(c))
}

// Sentinel errors. Compare with errors.Is.
var (
	// ErrSessionClosed matches every *CloseError.
	ErrSessionClosed = errors.New("wire: session closed")
	// ErrStreamReset matches every *StreamError.
	ErrStreamReset = errors.New("wire: stream reset")
	// ErrGoAway is returned by OpenStream after the peer sent GOAWAY.
	ErrGoAway = errors.New("wire: peer is going away")
	// ErrShutdown is returned by OpenStream after Shutdown began.
	ErrShutdown = errors.New("wire: session shutting down")
	// ErrWriteClosed is returned by writes after CloseWrite.
	ErrWriteClosed = errors.New("wire: stream write side closed")
	// ErrMessageNext is returned by Read when the next item on the stream is
	// a role message: call ReadMessage, then keep reading.
	ErrMessageNext = errors.New("wire: next item is a message")
	// ErrDataNext is returned by ReadMessage when the next item on the stream
	// is DATA: Read it first.
	ErrDataNext = errors.New("wire: next item is data")
	// ErrUnsupportedMessage is returned by ReadMessage for an Envelope whose
	// body this side does not know; the stream has been reset with
	// ResetUnsupported and the session stays up.
	ErrUnsupportedMessage = errors.New("wire: unsupported role message")
	// ErrMessageTooLarge is returned by WriteMessage for a message over the
	// size limit; nothing was sent.
	ErrMessageTooLarge = errors.New("wire: message too large")
	// ErrDeadlineExceeded is returned when a stream read or write deadline
	// passes. It matches os.ErrDeadlineExceeded.
	ErrDeadlineExceeded error = deadlineError{}
)

type deadlineError struct{}

func (deadlineError) Error() string   { return "wire: stream deadline exceeded" }
func (deadlineError) Timeout() bool   { return true }
func (deadlineError) Temporary() bool { return true }

// CloseError reports why a session ended. Every operation on a closed session
// returns one (or wraps one), and Session.Err returns it once Done is closed.
type CloseError struct {
	// Reason is the typed reason.
	Reason CloseReason
	// Remote is true when the peer closed the session and sent the reason.
	Remote bool
	// Detail is a short note for logs; for a remote close it is the peer's.
	Detail string
	// Cause is the local error behind the close, if any (an I/O error, for
	// example).
	Cause error
}

func (e *CloseError) Error() string {
	side := "local"
	if e.Remote {
		side = "remote"
	}
	s := "wire: session closed (" + side + "): " + e.Reason.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Is makes every CloseError match ErrSessionClosed.
func (e *CloseError) Is(target error) bool { return target == ErrSessionClosed }

// Unwrap returns the local cause.
func (e *CloseError) Unwrap() error { return e.Cause }

// StreamError reports that a stream was reset.
type StreamError struct {
	// Code is the typed reset code.
	Code ResetCode
	// Remote is true when the peer reset the stream (or refused it through
	// GOAWAY).
	Remote bool
	// Detail is a short note for logs.
	Detail string
}

func (e *StreamError) Error() string {
	side := "local"
	if e.Remote {
		side = "remote"
	}
	s := "wire: stream reset (" + side + "): " + e.Code.String()
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is makes every StreamError match ErrStreamReset.
func (e *StreamError) Is(target error) bool { return target == ErrStreamReset }

// IsRefused reports whether err says that a stream never ran on the peer
// (refused for a limit or the backlog, or above the peer's GOAWAY), so the
// work it carried may be admitted elsewhere.
func IsRefused(err error) bool {
	var se *StreamError
	return errors.As(err, &se) && se.Code == ResetRefused && se.Remote
}

// protocolError is a decode failure that closes the session with a reason.
type protocolError struct {
	reason CloseReason
	msg    string
}

func (e *protocolError) Error() string { return "wire: " + e.reason.String() + ": " + e.msg }

func protoErr(reason CloseReason, format string, args ...any) error {
	return &protocolError{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// maxDetail bounds detail strings sent on and read from the wire.
const maxDetail = 256

// clipDetail bounds s and makes it valid UTF-8 (protobuf strings must be).
func clipDetail(s string) string {
	if len(s) > maxDetail {
		s = s[:maxDetail]
	}
	return strings.ToValidUTF8(s, "")
}
