package execution

import (
	"context"
	"errors"
	"fmt"
)

// Category says where a provider's compute lives.
type Category string

// Provider categories.
const (
	// CategoryCLI is a command-line tool run per request.
	CategoryCLI Category = "cli"
	// CategoryAPI is a hosted API reached over the network.
	CategoryAPI Category = "api"
	// CategoryLocal is a model server on the Node's machine or network
	// (Ollama, vLLM, llama.cpp server).
	CategoryLocal Category = "local"
)

// Valid reports whether c is one of the defined categories.
func (c Category) Valid() bool {
	return c == CategoryCLI || c == CategoryAPI || c == CategoryLocal
}

// Info describes a provider. On a Node it is what the adapter declares; the
// Edge's configuration decides capacity and which models are offered.
type Info struct {
	// ID is the provider's id, unique within a Node and matching edge.yaml.
	ID string
	// Adapter is the adapter kind: "openai", "ollama", "anthropic", "cli".
	Adapter string
	// Category is cli, api or local.
	Category Category
	// Models lists the upstream model names the provider serves.
	Models []string
	// Capacity is how many runs may execute at once; 0 means unlimited on
	// the Node (the Edge's admission is the authority).
	Capacity int
	// LongContextCapacity is how many of those may be long-context runs.
	LongContextCapacity int
}

// Validate reports the first invalid field.
func (i Info) Validate() error {
	switch {
	case i.ID == "":
		return errors.New("execution: provider info: empty ID")
	case i.Adapter == "":
		return fmt.Errorf("execution: provider %q: empty Adapter", i.ID)
	case !i.Category.Valid():
		return fmt.Errorf("execution: provider %q: invalid Category %q", i.ID, i.Category)
	case i.Capacity < 0 || i.LongContextCapacity < 0:
		return fmt.Errorf("execution: provider %q: negative capacity", i.ID)
	}
	return nil
}

// Provider executes normalized runs. Run emits the run's output through w
// in order (deltas, tool calls, usage) and returns when the provider is
// done: a Result and nil for a successful end, or an error (ideally a
// *Failure) for a failed one. The host emits the Started event before Run
// and exactly one terminal event after it, so a Provider never emits
// either.
//
// Run must return promptly once ctx is done; ctx ends only on caller
// cancel, the hard deadline or a transport disconnect. A provider must not
// end a run because its output went silent.
type Provider interface {
	Info() Info
	Run(ctx context.Context, req *RunRequest, w EventWriter) (Result, error)
}

// Result is how a successful run ended.
type Result struct {
	// StopReason is stop, length, tool_calls or content_filter; empty means
	// stop.
	StopReason string
}

// EventWriter receives a run's events in order. WriteEvent may block for
// flow control; an error means the run's consumer is gone and the provider
// should stop.
type EventWriter interface {
	WriteEvent(Event) error
}

// HealthChecker is implemented by providers that can report their health.
// The Node polls it and reports changes to the Edge.
type HealthChecker interface {
	CheckHealth(ctx context.Context) error
}

// IdleCloser is implemented by providers that keep idle connections to
// their upstream. A Node's runtime closes them when it stops, so a
// stopped runtime holds no socket (a connection the upstream closed while
// idle would otherwise stay open until the transport's idle timeout).
type IdleCloser interface {
	CloseIdleConnections()
}

// Tunneler is implemented by providers that can relay a raw HTTP exchange
// with their upstream (the cheapest path when a client speaks the
// provider's own API format).
type Tunneler interface {
	Tunnel(ctx context.Context, req *TunnelRequest, w TunnelWriter) error
}

// Commander is implemented by providers that answer closed, read-only node
// commands of their own (for example Ollama's model list).
type Commander interface {
	// Commands lists the command names the provider answers.
	Commands() []string
	// Command runs one of them; argument is a command-specific selector.
	Command(ctx context.Context, name, argument string) ([]byte, error)
}
