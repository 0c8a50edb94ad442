// Package anthropic is the adapter for the Anthropic Messages API.
// Normalized runs use POST /v1/messages (streamed or not); the raw tunnel
// carries Messages, token counting and the model list untouched; health
// uses GET /v1/models.
package anthropic

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/internal/upstream"
	"github.com/iop-dev/iop/internal/llmapi"
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
	return readAnswer(ctx, resp.Body, sse.Streamed(resp.Header.Get("Content-Type"), mr.Stream), w)
}

// readAnswer relays a Messages answer, an event stream or a whole one, as
// run events. It is read by the decoders the Edge translates with
// (package llmapi): the same checks and error classes.
func readAnswer(ctx context.Context, body io.Reader, streamed bool, w execution.EventWriter) (execution.Result, error) {
	if streamed {
		return upstream.Relay(ctx, llmapi.DecodeAnthropicStream(body), w)
	}
	b, err := upstream.ReadWhole(ctx, body)
	if err != nil {
		return execution.Result{}, err
	}
	return upstream.Relay(ctx, llmapi.DecodeAnthropic(b), w)
}
