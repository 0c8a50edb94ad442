package controlplane

import (
	"context"
	"fmt"
	"time"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/wire/iopv1"
)

// Backend is what a Connector needs from the Edge it connects: the Edge's
// own status, its lifecycle events and its operations. edge.Server
// implements it; the Connector never reaches past it.
type Backend interface {
	// Status returns the Edge-owned view of every configured Node.
	Status() Status
	// Subscribe returns a subscription to the Edge's lifecycle events,
	// published after each authoritative transition.
	Subscribe() *nodes.Subscription
	// Command resolves cmd against the Edge's own registry and returns the
	// operation to run, or a *CommandError rejecting it before anything
	// changed.
	Command(cmd Command) (Operation, error)
}

// StatusWatcher is implemented by a Backend whose status also changes
// between lifecycle events (edge.Server: admission's cooldowns). A
// Connector watches it while linked and tells the Hub, which takes a fresh
// status at once instead of at its next StatusInterval.
type StatusWatcher interface {
	// WatchStatus calls notify after each such change until stop is
	// called. notify must not block; calls may come from any goroutine.
	WatchStatus(notify func()) (stop func())
}

// Operation is an accepted command. It runs once, reports intermediate
// progress through report, and returns a node command's result (nil for
// Edge operations) or the error that failed it. It must return when ctx
// ends.
type Operation func(ctx context.Context, report func(Progress)) (*iopv1.NodeCommandResult, error)

// Status is an Edge's status as it reports it.
type Status struct {
	GeneratedAt time.Time
	// Routes is the number of configured model routes; Queued the
	// requests waiting in admission, MaxQueued the most that may wait
	// (0: not reported), and QueueFull the requests turned away since the
	// Edge started because the queue was full. QueuedBytes is what the
	// waiting requests' bodies hold, and MaxQueuedBytes the most they may
	// (0: not reported).
	Routes         int
	Queued         int
	MaxQueued      int
	QueueFull      uint64
	QueuedBytes    int64
	MaxQueuedBytes int64
	// ConfigRevision counts configuration loads (1 for the first).
	ConfigRevision uint64
	// EventSeq is the Seq of the last lifecycle event the Nodes reflect.
	EventSeq uint64
	// Nodes are every configured Node, sorted by id, connected or not.
	Nodes []nodes.NodeSnapshot
}

// Command is one operator command as the Edge receives it.
type Command struct {
	// ID is the Hub's correlation id.
	ID string
	// Operation is one of the Op constants.
	Operation string
	// NodeID and ProviderID select the target; which one an operation
	// needs is documented on its constant.
	NodeID     string
	ProviderID string
	// Args are operation-specific (only OpOllamaAPI takes one).
	Args map[string]string
}

// The closed set of operations an Edge executes. The Edge resolves the
// selector; none of them schedules work on a Node.
const (
	// OpConfigRefresh reloads the Edge's configuration from its source;
	// only requests admitted afterwards see the change. No selector.
	OpConfigRefresh = "config.refresh"
	// OpNodeDrain stops admitting work to NodeID and reports progress
	// until the work it holds has finished.
	OpNodeDrain = "node.drain"
	// OpNodeResume admits work to a drained NodeID again.
	OpNodeResume = "node.resume"
	// OpNodeDisconnect closes NodeID's current connection; the Node
	// reconnects on its own.
	OpNodeDisconnect = "node.disconnect"
	// OpProviderDisable stops admitting work to ProviderID.
	OpProviderDisable = "provider.disable"
	// OpProviderEnable admits work to a disabled ProviderID again.
	OpProviderEnable = "provider.enable"
	// OpNodeCapabilities asks NodeID for its capabilities.
	OpNodeCapabilities = "node.capabilities"
	// OpNodeTransportStatus asks NodeID for its transport figures.
	OpNodeTransportStatus = "node.transport_status"
	// OpOllamaAPI asks an Ollama ProviderID's read-only API; Args
	// "endpoint" is "tags", "ps", "version" or "show:<model>".
	OpOllamaAPI = "node.ollama_api"
)

// Operations lists the closed set, in documentation order.
var Operations = []string{
	OpConfigRefresh, OpNodeDrain, OpNodeResume, OpNodeDisconnect,
	OpProviderDisable, OpProviderEnable,
	OpNodeCapabilities, OpNodeTransportStatus, OpOllamaAPI,
}

// Progress is an intermediate report of a running command.
type Progress struct {
	Message  string
	InFlight int
}

// Rejection says why an Edge refused a command.
type Rejection int32

// Rejections, matching the wire's EdgeCommandRejection.
const (
	RejectUnknownOperation   = Rejection(iopv1.EdgeCommandRejection_EDGE_COMMAND_REJECTION_UNKNOWN_OPERATION)
	RejectInvalidArgument    = Rejection(iopv1.EdgeCommandRejection_EDGE_COMMAND_REJECTION_INVALID_ARGUMENT)
	RejectNotFound           = Rejection(iopv1.EdgeCommandRejection_EDGE_COMMAND_REJECTION_NOT_FOUND)
	RejectFailedPrecondition = Rejection(iopv1.EdgeCommandRejection_EDGE_COMMAND_REJECTION_FAILED_PRECONDITION)
	RejectUnavailable        = Rejection(iopv1.EdgeCommandRejection_EDGE_COMMAND_REJECTION_UNAVAILABLE)
)

func (r Rejection) String() string {
	switch r {
	case RejectUnknownOperation:
		return "unknown_operation"
	case RejectInvalidArgument:
		return "invalid_argument"
	case RejectNotFound:
		return "not_found"
	case RejectFailedPrecondition:
		return "failed_precondition"
	case RejectUnavailable:
		return "unavailable"
	}
	return "rejected"
}

// CommandError rejects a command before it ran.
type CommandError struct {
	Rejection Rejection
	Message   string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("controlplane: command rejected (%s): %s", e.Rejection, e.Message)
}

// Reject returns a *CommandError.
func Reject(r Rejection, format string, args ...any) error {
	return &CommandError{Rejection: r, Message: fmt.Sprintf(format, args...)}
}
