// Package openai is the adapter for any OpenAI-compatible server: OpenAI
// itself, vLLM, llama.cpp server, LM Studio, Gemini's OpenAI-compatible
// endpoint. Normalized runs use Chat Completions (streamed or not); the raw
// tunnel carries Chat Completions, Responses, Embeddings and the model list
// untouched; health and model discovery use GET /v1/models.
package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"

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

type usageJSON struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (u *usageJSON) usage() *execution.Usage {
	out := &execution.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CachedInputTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		out.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	return out
}

type toolCallJSON struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// errorJSON is an error a stream reports in place of a chunk. Servers
// that put the HTTP status the error stands for in code (vLLM and other
// OpenAI-compatible servers) have it classed by that status; OpenAI's own
// codes are strings, and such an error is the provider's failure.
type errorJSON struct {
	Code json.RawMessage `json:"code"`
}

func (e *errorJSON) failure() *execution.Failure {
	status, err := strconv.Atoi(string(e.Code))
	if err != nil || status < 400 || status > 599 {
		return &execution.Failure{Class: execution.FailureProvider, Message: "upstream error in stream"}
	}
	return &execution.Failure{Class: upstream.StatusClass(status), Message: "upstream error in stream: " + strconv.Itoa(status)}
}

// StopReason maps a Chat Completions finish_reason to the normalized one.
func StopReason(finish string) string {
	switch finish {
	case "length":
		return "length"
	case "tool_calls", "function_call":
		return "tool_calls"
	case "content_filter":
		return "content_filter"
	}
	return "stop"
}

// Run implements execution.Provider with Chat Completions.
func (a *Adapter) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	resp, err := a.c.PostJSON(ctx, "/v1/chat/completions", nil, buildChatRequest(req))
	if err != nil {
		return execution.Result{}, err
	}
	defer resp.Body.Close()
	if !sse.Streamed(resp.Header.Get("Content-Type"), req.Options.Stream) {
		return readChat(ctx, resp.Body, w)
	}
	return readChatStream(ctx, resp.Body, w)
}

func readChat(ctx context.Context, body io.Reader, w execution.EventWriter) (execution.Result, error) {
	var out struct {
		Choices []struct {
			Message struct {
				Content          *string        `json:"content"`
				ReasoningContent *string        `json:"reasoning_content"`
				ToolCalls        []toolCallJSON `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *usageJSON `json:"usage"`
	}
	if err := upstream.DecodeAnswer(ctx, body, upstream.MaxAnswer, &out); err != nil {
		return execution.Result{}, err
	}
	if len(out.Choices) == 0 {
		return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "answer without choices"}
	}
	ch := out.Choices[0]
	if r := ch.Message.ReasoningContent; r != nil && *r != "" {
		if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: *r, Reasoning: true}); err != nil {
			return execution.Result{}, err
		}
	}
	if c := ch.Message.Content; c != nil && *c != "" {
		if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: *c}); err != nil {
			return execution.Result{}, err
		}
	}
	for _, tc := range ch.Message.ToolCalls {
		if err := w.WriteEvent(execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}}); err != nil {
			return execution.Result{}, err
		}
	}
	if out.Usage != nil {
		if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: out.Usage.usage()}); err != nil {
			return execution.Result{}, err
		}
	}
	return execution.Result{StopReason: StopReason(ch.FinishReason)}, nil
}

func bodyFailure(ctx context.Context) error {
	if ctx.Err() != nil {
		return execution.Classify(ctx, ctx.Err())
	}
	return &execution.Failure{Class: execution.FailureProvider, Message: "malformed upstream answer"}
}

func readChatStream(ctx context.Context, body io.Reader, w execution.EventWriter) (execution.Result, error) {
	r := sse.NewReader(body, 0)
	defer r.Release()
	type pending struct {
		id, name string
		args     strings.Builder
	}
	var calls []*pending
	argBytes := 0 // tool call arguments held, all calls together
	finish := ""
	sawDone := false
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return execution.Result{}, bodyFailure(ctx)
		}
		if string(ev.Data) == "[DONE]" {
			sawDone = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content          string         `json:"content"`
					ReasoningContent string         `json:"reasoning_content"`
					ToolCalls        []toolCallJSON `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usageJSON `json:"usage"`
			Error *errorJSON `json:"error"`
		}
		if err := json.Unmarshal(ev.Data, &chunk); err != nil {
			return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "malformed stream chunk"}
		}
		if chunk.Error != nil {
			return execution.Result{}, chunk.Error.failure()
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.ReasoningContent != "" {
				if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: ch.Delta.ReasoningContent, Reasoning: true}); err != nil {
					return execution.Result{}, err
				}
			}
			if ch.Delta.Content != "" {
				if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: ch.Delta.Content}); err != nil {
					return execution.Result{}, err
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index < 0 || tc.Index > 1024 {
					return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "tool call index out of range"}
				}
				for len(calls) <= tc.Index {
					calls = append(calls, &pending{})
				}
				p := calls[tc.Index]
				if tc.ID != "" {
					p.id = tc.ID
				}
				if tc.Function.Name != "" {
					p.name = tc.Function.Name
				}
				if argBytes += len(tc.Function.Arguments); argBytes > upstream.MaxAnswer {
					return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "tool call arguments too large"}
				}
				p.args.WriteString(tc.Function.Arguments)
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finish = *ch.FinishReason
			}
		}
		if chunk.Usage != nil {
			if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: chunk.Usage.usage()}); err != nil {
				return execution.Result{}, err
			}
		}
	}
	if !sawDone && finish == "" {
		return execution.Result{}, bodyFailure(ctx)
	}
	for _, p := range calls {
		if p.name == "" {
			continue
		}
		if err := w.WriteEvent(execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: p.id, Name: p.name, Arguments: p.args.String()}}); err != nil {
			return execution.Result{}, err
		}
	}
	return execution.Result{StopReason: StopReason(finish)}, nil
}
