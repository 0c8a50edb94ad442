package execution

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// RunRequest is one normalized run: which provider and model, what input,
// and until when.
type RunRequest struct {
	// RunID identifies the run for events and cancellation.
	RunID string
	// ProviderID and Adapter select the provider; Adapter must match the
	// provider's kind.
	ProviderID string
	Adapter    string
	// Target is the upstream model name.
	Target string
	// Input is the conversation.
	Input Input
	// Options tune generation.
	Options Options
	// Deadline is the hard deadline; zero means none.
	Deadline time.Time
	// Grant carries the credential lease for a provider whose credential
	// is leased. The Node opens and removes it before the provider sees
	// the request.
	Grant *Grant
}

// Grant is a credential lease (a package credentiallease envelope) with
// the dispatch facts it is bound to that a request does not carry
// otherwise. It is opaque here: only the recipient Node can open it.
type Grant struct {
	Lease     []byte
	Principal string
	Route     string
}

// Input is a normalized conversation.
type Input struct {
	System   string
	Messages []Message
}

// Message is one turn.
type Message struct {
	// Role is "user", "assistant" or "tool".
	Role    string
	Content string
}

// Options tune a run. Zero values mean the provider's defaults.
type Options struct {
	MaxOutputTokens int
	// Temperature is nil for the provider's default.
	Temperature *float64
	// Stream asks for output deltas as they are produced rather than one
	// delta at the end.
	Stream bool
}

// Validate reports the first invalid field.
func (r *RunRequest) Validate() error {
	switch {
	case r.RunID == "":
		return errors.New("execution: run request: empty RunID")
	case r.ProviderID == "":
		return errors.New("execution: run request: empty ProviderID")
	case r.Target == "":
		return errors.New("execution: run request: empty Target")
	case r.Options.MaxOutputTokens < 0:
		return errors.New("execution: run request: negative MaxOutputTokens")
	case r.Options.Temperature != nil && (*r.Options.Temperature < 0 || math.IsNaN(*r.Options.Temperature) || math.IsInf(*r.Options.Temperature, 0)):
		return errors.New("execution: run request: Temperature negative or not finite")
	}
	return nil
}

// Context derives the run's context from parent: it ends on the parent's
// end (caller cancel or transport disconnect) or the hard deadline, and on
// nothing else.
func (r *RunRequest) Context(parent context.Context) (context.Context, context.CancelFunc) {
	if r.Deadline.IsZero() {
		return context.WithCancel(parent)
	}
	return context.WithDeadline(parent, r.Deadline)
}

// EventKind is the kind of a run event.
type EventKind uint8

// Event kinds. Started comes first; Completed or Failed comes last, exactly
// once.
const (
	EventStarted EventKind = iota + 1
	EventDelta
	EventToolCall
	EventUsage
	EventCompleted
	EventFailed
)

func (k EventKind) String() string {
	switch k {
	case EventStarted:
		return "started"
	case EventDelta:
		return "delta"
	case EventToolCall:
		return "tool_call"
	case EventUsage:
		return "usage"
	case EventCompleted:
		return "completed"
	case EventFailed:
		return "failed"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Terminal reports whether k ends a run.
func (k EventKind) Terminal() bool { return k == EventCompleted || k == EventFailed }

// Event is one ordered run event. Which fields are set depends on Kind.
type Event struct {
	Kind EventKind
	// Model is set on Started.
	Model string
	// Text is set on Delta; Reasoning marks thinking text.
	Text      string
	Reasoning bool
	// ToolCall is set on ToolCall.
	ToolCall *ToolCall
	// Usage is set on Usage.
	Usage *Usage
	// StopReason is set on Completed: stop, length, tool_calls,
	// content_filter.
	StopReason string
	// Failure is set on Failed.
	Failure *Failure
}

// ToolCall is a complete tool call.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is a JSON object.
	Arguments string
}

// Usage counts tokens. Cached and reasoning tokens are parts of the input
// and output counts, not additions to them.
type Usage struct {
	InputTokens       int64
	OutputTokens      int64
	CachedInputTokens int64
	ReasoningTokens   int64
}

// Add accumulates u2 into u.
func (u *Usage) Add(u2 Usage) {
	u.InputTokens += u2.InputTokens
	u.OutputTokens += u2.OutputTokens
	u.CachedInputTokens += u2.CachedInputTokens
	u.ReasoningTokens += u2.ReasoningTokens
}
