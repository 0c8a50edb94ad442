// Package anthropic is the adapter for the Anthropic Messages API.
// Normalized runs use POST /v1/messages (streamed or not); the raw tunnel
// carries Messages, token counting and the model list untouched; health
// uses GET /v1/models.
package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/internal/upstream"
	"github.com/iop-dev/iop/internal/sse"
)

// Kind is this adapter's kind in configuration.
const Kind = "anthropic"

// Version is the anthropic-version header sent on normalized runs.
const Version = "2023-06-01"

// DefaultMaxTokens is sent when a run sets no output limit: the Messages API
// requires one.
const DefaultMaxTokens = 4096

// Config configures an Adapter.
type Config struct {
	// ID is the provider id. Required.
	ID string
	// BaseURL is the API root, for example "https://api.anthropic.com".
	// Required.
	BaseURL string
	// Credential is the API key, sent as x-api-key. Nil means none.
	Credential execution.Credential
	// Category is api (the default) or local.
	Category execution.Category
	// Models the provider serves.
	Models []string
	// HTTPClient replaces the default client.
	HTTPClient *http.Client
}

// Routes are the paths the tunnel allows.
var Routes = []upstream.Route{
	{Method: http.MethodPost, Path: "/v1/messages"},
	{Method: http.MethodPost, Path: "/v1/messages/count_tokens"},
	{Method: http.MethodGet, Path: "/v1/models"},
}

// Adapter implements execution.Provider, HealthChecker and Tunneler.
type Adapter struct {
	info execution.Info
	c    *upstream.Client
}

var (
	_ execution.Provider      = (*Adapter)(nil)
	_ execution.HealthChecker = (*Adapter)(nil)
	_ execution.Tunneler      = (*Adapter)(nil)
)

// New returns an Adapter for cfg.
func New(cfg Config) (*Adapter, error) {
	if cfg.Category == "" {
		cfg.Category = execution.CategoryAPI
	}
	info := execution.Info{ID: cfg.ID, Adapter: Kind, Category: cfg.Category, Models: append([]string(nil), cfg.Models...)}
	if err := info.Validate(); err != nil {
		return nil, err
	}
	c, err := upstream.NewClient(cfg.BaseURL, cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("anthropic: provider %q: %w", cfg.ID, err)
	}
	c.Auth = upstream.HeaderAuth(cfg.Credential, "X-Api-Key")
	return &Adapter{info: info, c: c}, nil
}

// Info implements execution.Provider.
func (a *Adapter) Info() execution.Info { return a.info }

// CloseIdleConnections closes the idle connections of the adapter's own
// HTTP transport (none when Config.HTTPClient was given: that client's
// owner manages it); exchanges in progress are not touched. It implements
// execution.IdleCloser.
func (a *Adapter) CloseIdleConnections() { a.c.CloseIdleConnections() }

// CheckHealth implements execution.HealthChecker.
func (a *Adapter) CheckHealth(ctx context.Context) error {
	return a.c.CheckGET(ctx, "/v1/models")
}

// Tunnel implements execution.Tunneler.
func (a *Adapter) Tunnel(ctx context.Context, req *execution.TunnelRequest, w execution.TunnelWriter) error {
	if req.Header.Get("Anthropic-Version") == "" {
		req.Header = req.Header.Clone()
		if req.Header == nil {
			req.Header = http.Header{}
		}
		req.Header.Set("Anthropic-Version", Version)
	}
	return a.c.Tunnel(ctx, Routes, req, w)
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type messagesRequest struct {
	Model       string    `json:"model"`
	System      string    `json:"system,omitempty"`
	Messages    []message `json:"messages"`
	MaxTokens   int       `json:"max_tokens"`
	Stream      bool      `json:"stream,omitempty"`
	Temperature *float64  `json:"temperature,omitempty"`
}

type usageJSON struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// StopReason maps an Anthropic stop_reason to the normalized one.
func StopReason(r string) string {
	switch r {
	case "max_tokens":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "refusal":
		return "content_filter"
	}
	return "stop"
}

// Run implements execution.Provider with the Messages API.
func (a *Adapter) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	mr := messagesRequest{Model: req.Target, System: req.Input.System, MaxTokens: req.Options.MaxOutputTokens, Stream: req.Options.Stream, Temperature: req.Options.Temperature}
	if mr.MaxTokens == 0 {
		mr.MaxTokens = DefaultMaxTokens
	}
	for _, m := range req.Input.Messages {
		role := m.Role
		if role != "assistant" {
			role = "user"
		}
		mr.Messages = append(mr.Messages, message{Role: role, Content: m.Content})
	}
	resp, err := a.c.PostJSON(ctx, "/v1/messages", http.Header{"Anthropic-Version": {Version}}, mr)
	if err != nil {
		return execution.Result{}, err
	}
	defer resp.Body.Close()
	if !sse.Streamed(resp.Header.Get("Content-Type"), mr.Stream) {
		return readMessage(ctx, resp.Body, w)
	}
	return readStream(ctx, resp.Body, w)
}

func failure(ctx context.Context, msg string) error {
	if ctx.Err() != nil {
		return execution.Classify(ctx, ctx.Err())
	}
	return &execution.Failure{Class: execution.FailureProvider, Message: msg}
}

// errorStatus is the HTTP status each of the Messages API's error types
// stands for (its documented pairs).
var errorStatus = map[string]int{
	"invalid_request_error": http.StatusBadRequest,
	"authentication_error":  http.StatusUnauthorized,
	"permission_error":      http.StatusForbidden,
	"not_found_error":       http.StatusNotFound,
	"request_too_large":     http.StatusRequestEntityTooLarge,
	"rate_limit_error":      http.StatusTooManyRequests,
	"api_error":             http.StatusInternalServerError,
	"overloaded_error":      529,
}

// streamError is the failure of an error event in a stream, classed as
// the status its type stands for would be (an overloaded API is
// unavailable, so the caller may retry elsewhere or later). The note
// names the type only when it is one of the API's own.
func streamError(typ string) *execution.Failure {
	status, ok := errorStatus[typ]
	if !ok {
		return &execution.Failure{Class: execution.FailureProvider, Message: "upstream error in stream"}
	}
	return &execution.Failure{Class: upstream.StatusClass(status), Message: "upstream error in stream: " + typ}
}

func readMessage(ctx context.Context, body io.Reader, w execution.EventWriter) (execution.Result, error) {
	var out struct {
		Content []struct {
			Type     string          `json:"type"`
			Text     string          `json:"text"`
			Thinking string          `json:"thinking"`
			ID       string          `json:"id"`
			Name     string          `json:"name"`
			Input    json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string    `json:"stop_reason"`
		Usage      usageJSON `json:"usage"`
	}
	if err := upstream.DecodeAnswer(ctx, body, upstream.MaxAnswer, &out); err != nil {
		return execution.Result{}, err
	}
	for _, b := range out.Content {
		var ev execution.Event
		switch b.Type {
		case "text":
			ev = execution.Event{Kind: execution.EventDelta, Text: b.Text}
		case "thinking":
			ev = execution.Event{Kind: execution.EventDelta, Text: b.Thinking, Reasoning: true}
		case "tool_use":
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			ev = execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: b.ID, Name: b.Name, Arguments: args}}
		default:
			continue
		}
		if err := w.WriteEvent(ev); err != nil {
			return execution.Result{}, err
		}
	}
	u := &execution.Usage{InputTokens: out.Usage.InputTokens + out.Usage.CacheReadInputTokens + out.Usage.CacheCreationInputTokens, OutputTokens: out.Usage.OutputTokens, CachedInputTokens: out.Usage.CacheReadInputTokens}
	if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: u}); err != nil {
		return execution.Result{}, err
	}
	return execution.Result{StopReason: StopReason(out.StopReason)}, nil
}

func readStream(ctx context.Context, body io.Reader, w execution.EventWriter) (execution.Result, error) {
	r := sse.NewReader(body, 0)
	defer r.Release()
	type block struct {
		typ, id, name string
		args          strings.Builder
	}
	blocks := map[int]*block{}
	argBytes := 0 // tool call arguments held, all blocks together
	var usage execution.Usage
	stop := ""
	for {
		ev, err := r.Next()
		if err == io.EOF {
			return execution.Result{}, failure(ctx, "stream ended without message_stop")
		}
		if err != nil {
			return execution.Result{}, failure(ctx, "malformed stream")
		}
		var m struct {
			Type    string `json:"type"`
			Index   int    `json:"index"`
			Message struct {
				Usage usageJSON `json:"usage"`
			} `json:"message"`
			ContentBlock struct {
				Type string `json:"type"`
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"content_block"`
			Delta struct {
				Type        string `json:"type"`
				Text        string `json:"text"`
				Thinking    string `json:"thinking"`
				PartialJSON string `json:"partial_json"`
				StopReason  string `json:"stop_reason"`
			} `json:"delta"`
			Usage *usageJSON `json:"usage"`
			Error struct {
				Type string `json:"type"`
			} `json:"error"`
		}
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			return execution.Result{}, failure(ctx, "malformed stream event")
		}
		switch m.Type {
		case "message_start":
			u := m.Message.Usage
			usage.InputTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
			usage.CachedInputTokens = u.CacheReadInputTokens
			usage.OutputTokens = u.OutputTokens
		case "content_block_start":
			if m.Index < 0 || m.Index > 1024 {
				return execution.Result{}, failure(ctx, "content block index out of range")
			}
			blocks[m.Index] = &block{typ: m.ContentBlock.Type, id: m.ContentBlock.ID, name: m.ContentBlock.Name}
		case "content_block_delta":
			b := blocks[m.Index]
			if b == nil {
				return execution.Result{}, failure(ctx, "delta for an unknown content block")
			}
			var out *execution.Event
			switch m.Delta.Type {
			case "text_delta":
				out = &execution.Event{Kind: execution.EventDelta, Text: m.Delta.Text}
			case "thinking_delta":
				out = &execution.Event{Kind: execution.EventDelta, Text: m.Delta.Thinking, Reasoning: true}
			case "input_json_delta":
				if argBytes += len(m.Delta.PartialJSON); argBytes > upstream.MaxAnswer {
					return execution.Result{}, failure(ctx, "tool call arguments too large")
				}
				b.args.WriteString(m.Delta.PartialJSON)
			}
			if out != nil {
				if err := w.WriteEvent(*out); err != nil {
					return execution.Result{}, err
				}
			}
		case "content_block_stop":
			b := blocks[m.Index]
			if b != nil && b.typ == "tool_use" {
				args := b.args.String()
				if args == "" {
					args = "{}"
				}
				if err := w.WriteEvent(execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: b.id, Name: b.name, Arguments: args}}); err != nil {
					return execution.Result{}, err
				}
			}
			delete(blocks, m.Index)
		case "message_delta":
			stop = m.Delta.StopReason
			if u := m.Usage; u != nil {
				// The output so far; newer API versions total the input
				// here too.
				usage.OutputTokens = u.OutputTokens
				if u.InputTokens > 0 {
					usage.InputTokens = u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens
					usage.CachedInputTokens = u.CacheReadInputTokens
				}
			}
		case "message_stop":
			if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: &usage}); err != nil {
				return execution.Result{}, err
			}
			return execution.Result{StopReason: StopReason(stop)}, nil
		case "error":
			return execution.Result{}, streamError(m.Error.Type)
		}
	}
}
