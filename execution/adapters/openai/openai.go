// Package openai is the adapter for any OpenAI-compatible server: OpenAI
// itself, vLLM, llama.cpp server, LM Studio, Gemini's OpenAI-compatible
// endpoint. Normalized runs use Chat Completions (streamed or not); the raw
// tunnel carries Chat Completions, Responses, Embeddings and the model list
// untouched; health and model discovery use GET /v1/models.
package openai

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/internal/upstream"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/sse"
)

// Kind is this adapter's kind in configuration.
const Kind = "openai"

// Config configures an Adapter. Each field's comment says what its zero
// value means.
type Config struct {
	// ID is the provider id. Required.
	ID string
	// BaseURL is the server's root, without /v1 (for example
	// "http://127.0.0.1:8000" or "https://api.openai.com"). Required.
	BaseURL string
	// APIPath is where the server's OpenAI API lives under BaseURL, when
	// not at /v1: every path this adapter sends (runs, health, the
	// tunnel's Routes) has it in place of "/v1". Gemini's OpenAI-compatible
	// endpoint is BaseURL "https://generativelanguage.googleapis.com" with
	// APIPath "/v1beta/openai". Empty means "/v1".
	APIPath string
	// Credential is the API key, sent as a Bearer token. Nil means none (a
	// local server).
	Credential execution.Credential
	// Category is local (the default) or api for a hosted service.
	Category execution.Category
	// Models the provider serves. Empty means whatever /v1/models lists.
	Models []string
	// HTTPClient replaces the default client (no overall timeout; runs end
	// on their context).
	HTTPClient *http.Client
}

// Routes are the paths the tunnel allows.
var Routes = []upstream.Route{
	{Method: http.MethodPost, Path: "/v1/chat/completions"},
	{Method: http.MethodPost, Path: "/v1/responses"},
	{Method: http.MethodPost, Path: "/v1/responses/compact"},
	{Method: http.MethodGet, Path: "/v1/responses/{id}"},
	{Method: http.MethodPost, Path: "/v1/embeddings"},
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
		cfg.Category = execution.CategoryLocal
	}
	info := execution.Info{ID: cfg.ID, Adapter: Kind, Category: cfg.Category, Models: append([]string(nil), cfg.Models...)}
	if err := info.Validate(); err != nil {
		return nil, err
	}
	c, err := upstream.NewClient(cfg.BaseURL, cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("openai: provider %q: %w", cfg.ID, err)
	}
	if cfg.APIPath != "" {
		if err := c.SetAPIPath(cfg.APIPath); err != nil {
			return nil, fmt.Errorf("openai: provider %q: %w", cfg.ID, err)
		}
	}
	c.Auth = upstream.BearerAuth(cfg.Credential)
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
	_, err := a.ListModels(ctx)
	return err
}

// ListModels returns the model ids GET /v1/models lists.
func (a *Adapter) ListModels(ctx context.Context) ([]string, error) {
	resp, err := a.c.Do(ctx, http.MethodGet, "/v1/models", nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := upstream.StatusFailure(resp); err != nil {
		return nil, err
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := upstream.DecodeAnswer(ctx, resp.Body, 8<<20, &list); err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return ids, nil
}

// Tunnel implements execution.Tunneler.
func (a *Adapter) Tunnel(ctx context.Context, req *execution.TunnelRequest, w execution.TunnelWriter) error {
	return a.c.Tunnel(ctx, Routes, req, w)
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model         string         `json:"model"`
	Messages      []chatMessage  `json:"messages"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
	MaxTokens     int            `json:"max_tokens,omitempty"`
	// MaxCompletionTokens replaces MaxTokens for OpenAI's reasoning
	// models, which refuse max_tokens (llmapi.CompletionTokensModel).
	MaxCompletionTokens int      `json:"max_completion_tokens,omitempty"`
	Temperature         *float64 `json:"temperature,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// buildChatRequest maps a normalized run to a Chat Completions request.
func buildChatRequest(req *execution.RunRequest) chatRequest {
	cr := chatRequest{Model: req.Target, Stream: req.Options.Stream, Temperature: req.Options.Temperature}
	if llmapi.CompletionTokensModel(req.Target) {
		cr.MaxCompletionTokens = req.Options.MaxOutputTokens
	} else {
		cr.MaxTokens = req.Options.MaxOutputTokens
	}
	if req.Input.System != "" {
		cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: req.Input.System})
	}
	for _, m := range req.Input.Messages {
		cr.Messages = append(cr.Messages, chatMessage{Role: m.Role, Content: m.Content})
	}
	if cr.Stream {
		cr.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	return cr
}

// Run implements execution.Provider with Chat Completions. The answer,
// streamed or whole, is read by the decoders the Edge translates with
// (package llmapi): the same checks, refusals and error classes.
func (a *Adapter) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	resp, err := a.c.PostJSON(ctx, "/v1/chat/completions", nil, buildChatRequest(req))
	if err != nil {
		return execution.Result{}, err
	}
	defer resp.Body.Close()
	return readAnswer(ctx, resp.Body, sse.Streamed(resp.Header.Get("Content-Type"), req.Options.Stream), w)
}

// readAnswer relays a Chat Completions answer, an event stream or a whole
// one, as run events.
func readAnswer(ctx context.Context, body io.Reader, streamed bool, w execution.EventWriter) (execution.Result, error) {
	if streamed {
		return upstream.Relay(ctx, llmapi.DecodeChatStream(body), w)
	}
	b, err := upstream.ReadWhole(ctx, body)
	if err != nil {
		return execution.Result{}, err
	}
	return upstream.Relay(ctx, llmapi.DecodeChat(b), w)
}
