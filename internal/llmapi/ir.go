package llmapi

import "encoding/json"

// The translation layer works through one canonical form. A client request
// (Anthropic Messages, Chat Completions or Responses) decodes into a
// Request; a Request encodes into a provider's format. A provider's answer,
// buffered or streamed, decodes into one ordered sequence of Events; a
// client format's Projector renders those Events as its own stream or its
// own buffered body. Buffered and streamed answers therefore share one
// interpretation of every event and one terminal.

// Role is a turn's author.
type Role string

// Roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
)

// PartKind is the kind of a content part.
type PartKind string

// Part kinds.
const (
	PartText       PartKind = "text"
	PartImage      PartKind = "image"
	PartToolUse    PartKind = "tool_use"
	PartToolResult PartKind = "tool_result"
	PartThinking   PartKind = "thinking"
	// PartDocument is a file given to the model whole (a PDF): base64 Data
	// with its MediaType, or a URL, and a Title.
	PartDocument PartKind = "document"
)

// Part is one piece of a turn.
type Part struct {
	Kind PartKind
	// Text for text and thinking parts.
	Text string
	// Image: a URL, or base64 Data with its MediaType.
	ImageURL  string
	MediaType string
	Data      string
	// Document: base64 Data with its MediaType, or a URL; and its Title
	// (Anthropic's title, OpenAI's filename).
	URL   string
	Title string
	// Tool use: ID, Name and Input (a JSON object).
	ID    string
	Name  string
	Input json.RawMessage
	// Tool result: ToolUseID, Content (text parts and images) and IsError.
	ToolUseID string
	Content   []Part
	IsError   bool
	// Signature is a thinking block's provider signature; a redacted
	// thinking block (Anthropic's redacted_thinking, opaque) has no text
	// and its data after redactedPrefix; an OpenAI reasoning item's state
	// follows openAIReasoningPrefix.
	Signature string
}

// Message is one turn.
type Message struct {
	Role  Role
	Parts []Part
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	// Schema is the JSON Schema of the input.
	Schema json.RawMessage
	// Freeform marks a custom tool of Responses or Chat Completions, whose
	// input is one string (Codex's apply_patch): Anthropic has no such
	// tools, so it is carried as a function whose one parameter,
	// FreeformParam, is that string, and its calls are rendered back to
	// the client as custom calls (ResponsesRenderer.Freeform,
	// ChatRenderer.Freeform).
	Freeform bool
	// Namespace, for a tool of a Responses namespace (Codex groups each
	// MCP server's tools so, and some of its own), is the namespace's
	// name, and Local the tool's own; Name is then NamespacedName of the
	// two, the name every other format is given (no other has
	// namespaces), and its calls are rendered back to the client under
	// the two (ResponsesRenderer.Namespaced).
	Namespace, Local string
	// Search marks a Responses tool_search that the client runs (Codex
	// looks up the tools it deferred, MCP tools among them): carried as a
	// function, its calls are rendered back as tool_search_call items
	// (ResponsesRenderer.ToolSearch), and the tools a search loaded
	// (a tool_search_output item) are offered with the others.
	Search bool
}

// ToolSearchName is the name a Responses tool_search is carried under
// (Codex's name for it).
const ToolSearchName = "tool_search"

// SearchTool is the name of r's tool_search that the client runs
// (Tool.Search), or "" when it has none.
func (r *Request) SearchTool() string {
	for _, t := range r.Tools {
		if t.Search {
			return t.Name
		}
	}
	return ""
}

// ToolRef names a tool of a Responses namespace: the namespace, and the
// tool's own name in it.
type ToolRef struct{ Namespace, Name string }

// NamespacedName is the one name a tool of a Responses namespace is
// given in every other format: the namespace's name, "__" and the
// tool's (Codex's own flat name of an MCP tool, mcp__server__tool, in
// its versions before namespaces).
func NamespacedName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "__" + name
}

// NamespacedTools maps the name of each tool of a Responses namespace
// (Tool.Name) to its namespace and own name; it is nil when r has none.
func (r *Request) NamespacedTools() map[string]ToolRef {
	var m map[string]ToolRef
	for _, t := range r.Tools {
		if t.Namespace != "" {
			if m == nil {
				m = map[string]ToolRef{}
			}
			m[t.Name] = ToolRef{Namespace: t.Namespace, Name: t.Local}
		}
	}
	return m
}

// FreeformParam is the one parameter of the function a freeform tool is
// carried as; its value is the tool's input.
const FreeformParam = "input"

// redactedPrefix opens the Signature of a redacted thinking block: its
// data follows. Anthropic's signatures are base64, which holds no colon.
const redactedPrefix = "redacted:"

// openAIReasoningPrefix opens the Signature of a thinking block that was
// an OpenAI Responses reasoning item: its encrypted_content follows, the
// model's reasoning state, which only OpenAI reads (sent back, it keeps
// a reasoning model's thinking through a tool loop at store false). Its
// first byte is one JSON bodies seldom hold (see SealedPrefix).
const openAIReasoningPrefix = "~openai-reasoning:"

// ToolChoice says whether and which tool the model must call.
type ToolChoice struct {
	// Mode is "auto", "none", "any" (some tool) or "tool" (Name).
	Mode string
	Name string
	// DisableParallel forbids parallel tool calls.
	DisableParallel bool
}

// Request is a client request in canonical form.
type Request struct {
	Model       string
	System      []string
	Messages    []Message
	Tools       []Tool
	ToolChoice  *ToolChoice
	MaxTokens   int
	Temperature *float64
	TopP        *float64
	Stop        []string
	Stream      bool
	// ThinkingBudget asks for extended thinking with this many tokens
	// (Anthropic); ReasoningEffort is OpenAI's low/medium/high. Each maps
	// to the other where the target has it (see EncodeChat,
	// EncodeAnthropic).
	ThinkingBudget  int
	ReasoningEffort string
	// User is an opaque end-user id.
	User string
	// Output asks for a JSON answer; nil asks for free text.
	Output *OutputFormat
	// SealReasoning is a Responses client's include of
	// "reasoning.encrypted_content": it keeps the reasoning state itself
	// and sends it back (ResponsesRenderer.Seal). It asks nothing of the
	// provider.
	SealReasoning bool
	// Compact says the client asked for the conversation compacted (a
	// Responses compaction_trigger item, or POST /v1/responses/compact):
	// the request asks the model for a summary of it (see Compaction),
	// and the answer is rendered as the compaction (by
	// ResponsesRenderer.Compact for a compaction_trigger, by
	// Compaction.Renderer for the other).
	Compact bool
}

// FreeformTools returns the names of r's freeform tools, or nil when it
// has none.
func (r *Request) FreeformTools() map[string]bool {
	var m map[string]bool
	for _, t := range r.Tools {
		if t.Freeform {
			if m == nil {
				m = map[string]bool{}
			}
			m[t.Name] = true
		}
	}
	return m
}

// OutputFormat asks the model to answer with JSON: any JSON object
// (OpenAI's JSON mode) when Schema is nil, one that matches Schema
// otherwise (structured outputs). Chat Completions carries it as
// response_format, Responses as text.format and Anthropic Messages as
// output_config.format, which takes a schema only.
type OutputFormat struct {
	// Name and Strict are OpenAI's json_schema name and strict flag.
	Name   string
	Strict *bool
	Schema json.RawMessage
}

// StopReason is the canonical reason a turn ended.
type StopReason string

// Stop reasons.
const (
	StopEnd      StopReason = "end_turn"
	StopLength   StopReason = "max_tokens"
	StopToolUse  StopReason = "tool_use"
	StopSequence StopReason = "stop_sequence"
	StopRefusal  StopReason = "refusal"
)

// Usage counts tokens. Cached and reasoning tokens are parts of Input and
// Output, not additions.
type Usage struct {
	Input, Output, Cached, Reasoning int64
}

// MaxTokens bounds a token count a provider can believably report for one
// request; a count above it, or below zero, is a provider's bug or a
// hostile upstream, not usage.
const MaxTokens = 1 << 40

// SumTokens adds counts a provider reports as parts of one total
// (Anthropic's input tokens, cache reads and cache writes). A part out of
// range (below zero or above MaxTokens) makes the total -1, a count no
// one books: a negative part cannot hide inside a believable total, nor
// can huge parts wrap around to one.
func SumTokens(parts ...int64) int64 {
	var total int64
	for _, n := range parts {
		if n < 0 || n > MaxTokens {
			return -1
		}
		total += n
	}
	return total
}

// EventKind is the kind of a canonical answer event.
type EventKind uint8

// Event kinds. Start comes first; then blocks, each BlockStart, deltas,
// BlockStop, with increasing, non-overlapping indices; then Stop; Usage may
// come anywhere; Error ends a failed answer instead of Stop.
const (
	EvStart EventKind = iota + 1
	EvBlockStart
	EvDelta
	EvBlockStop
	EvUsage
	EvStop
	EvError
)

// BlockKind is the kind of an answer block.
type BlockKind string

// Block kinds.
const (
	BlockText     BlockKind = "text"
	BlockThinking BlockKind = "thinking"
	BlockToolUse  BlockKind = "tool_use"
)

// Event is one canonical answer event.
type Event struct {
	Kind EventKind
	// Start: the answer's ID and Model.
	ID, Model string
	// Block events: Index and, on BlockStart, Block and for tool use the
	// tool call's ToolID and Name.
	Index  int
	Block  BlockKind
	ToolID string
	Name   string
	// Delta: Text (answer or thinking text, or a fragment of a tool call's
	// JSON arguments), Signature (thinking).
	Text      string
	Signature string
	// Stop: Reason.
	Reason StopReason
	// Usage: a cumulative snapshot.
	Usage Usage
	// Error: the failure, in client-neutral terms.
	Err *APIError
}

// APIError is a failure to report in a client format.
type APIError struct {
	// Status is the HTTP status for a buffered answer.
	Status int
	// Type is a canonical type: invalid_request, context_length (an
	// invalid request that does not fit the model's context window),
	// authentication, permission, not_found, rate_limit, overloaded,
	// api_error, timeout.
	Type    string
	Message string
}

func (e *APIError) Error() string { return "llmapi: " + e.Type + ": " + e.Message }
