// Package ollama is the adapter for Ollama: normalized runs use the native
// /api/chat (newline-delimited JSON when streamed); the raw tunnel carries
// the native API and Ollama's OpenAI-compatible endpoints untouched; health
// uses /api/version and model discovery /api/tags. It also answers the
// closed, read-only "Ollama API tunnel" node command: tags, ps, version and
// show.
package ollama

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/internal/upstream"
)

// Kind is this adapter's kind in configuration.
const Kind = "ollama"

// Config configures an Adapter.
type Config struct {
	// ID is the provider id. Required.
	ID string
	// BaseURL is Ollama's root, for example "http://127.0.0.1:11434".
	// Required.
	BaseURL string
	// Credential is sent as a Bearer token, for an Ollama behind an
	// authenticating proxy. Nil means none.
	Credential execution.Credential
	// Models the provider serves. Empty means whatever /api/tags lists.
	Models []string
	// HTTPClient replaces the default client.
	HTTPClient *http.Client
}

// Routes are the paths the tunnel allows: the native API and the
// OpenAI-compatible one.
var Routes = []upstream.Route{
	{Method: http.MethodPost, Path: "/api/chat"},
	{Method: http.MethodPost, Path: "/api/generate"},
	{Method: http.MethodPost, Path: "/api/embed"},
	{Method: http.MethodGet, Path: "/api/tags"},
	{Method: http.MethodGet, Path: "/api/ps"},
	{Method: http.MethodPost, Path: "/api/show"},
	{Method: http.MethodGet, Path: "/api/version"},
	{Method: http.MethodPost, Path: "/v1/chat/completions"},
	{Method: http.MethodPost, Path: "/v1/responses"},
	{Method: http.MethodPost, Path: "/v1/responses/compact"},
	{Method: http.MethodPost, Path: "/v1/completions"},
	{Method: http.MethodPost, Path: "/v1/embeddings"},
	{Method: http.MethodGet, Path: "/v1/models"},
}

// Commands are the read-only command names the adapter answers.
var Commands = []string{"tags", "ps", "version", "show"}

// Adapter implements execution.Provider, HealthChecker, Tunneler and
// Commander.
type Adapter struct {
	info execution.Info
	c    *upstream.Client
}

var (
	_ execution.Provider      = (*Adapter)(nil)
	_ execution.HealthChecker = (*Adapter)(nil)
	_ execution.Tunneler      = (*Adapter)(nil)
	_ execution.Commander     = (*Adapter)(nil)
)

// New returns an Adapter for cfg.
func New(cfg Config) (*Adapter, error) {
	info := execution.Info{ID: cfg.ID, Adapter: Kind, Category: execution.CategoryLocal, Models: append([]string(nil), cfg.Models...)}
	if err := info.Validate(); err != nil {
		return nil, err
	}
	c, err := upstream.NewClient(cfg.BaseURL, cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("ollama: provider %q: %w", cfg.ID, err)
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
	return a.c.CheckGET(ctx, "/api/version")
}

// ListModels returns the model names /api/tags lists.
func (a *Adapter) ListModels(ctx context.Context) ([]string, error) {
	b, err := a.get(ctx, "/api/tags")
	if err != nil {
		return nil, err
	}
	var tags struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.Unmarshal(b, &tags); err != nil {
		return nil, &execution.Failure{Class: execution.FailureProvider, Message: "malformed model list"}
	}
	var out []string
	for _, m := range tags.Models {
		out = append(out, m.Name)
	}
	sort.Strings(out)
	return out, nil
}

// Tunnel implements execution.Tunneler.
func (a *Adapter) Tunnel(ctx context.Context, req *execution.TunnelRequest, w execution.TunnelWriter) error {
	return a.c.Tunnel(ctx, Routes, req, w)
}

// maxCommandAnswer bounds a command's answer.
const maxCommandAnswer = 1 << 20

var modelName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$`)

// Commands implements execution.Commander.
func (a *Adapter) Commands() []string { return Commands }

// ErrUnknownCommand is returned for a command name outside Commands or a
// malformed argument.
var ErrUnknownCommand = errors.New("ollama: unknown or malformed command")

// Command implements execution.Commander: "tags", "ps", "version", or
// "show" with a model name as argument. Each maps to one fixed read-only
// endpoint; the argument is never part of a URL.
func (a *Adapter) Command(ctx context.Context, name, argument string) ([]byte, error) {
	switch name {
	case "tags":
		return a.get(ctx, "/api/tags")
	case "ps":
		return a.get(ctx, "/api/ps")
	case "version":
		return a.get(ctx, "/api/version")
	case "show":
		if !modelName.MatchString(argument) {
			return nil, ErrUnknownCommand
		}
		body, _ := json.Marshal(map[string]string{"model": argument})
		resp, err := a.c.Do(ctx, http.MethodPost, "/api/show", http.Header{"Content-Type": {"application/json"}}, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		return readBounded(resp)
	}
	return nil, ErrUnknownCommand
}

func (a *Adapter) get(ctx context.Context, path string) ([]byte, error) {
	resp, err := a.c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return nil, err
	}
	return readBounded(resp)
}

func readBounded(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	if err := upstream.StatusFailure(resp); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxCommandAnswer+1))
	if err != nil {
		return nil, &execution.Failure{Class: execution.FailureProvider, Message: "upstream body broken"}
	}
	if len(b) > maxCommandAnswer {
		return nil, &execution.Failure{Class: execution.FailureProvider, Message: "answer too large"}
	}
	return b, nil
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model    string         `json:"model"`
	Messages []chatMessage  `json:"messages"`
	Stream   bool           `json:"stream"`
	Options  map[string]any `json:"options,omitempty"`
}

type chatLine struct {
	Message struct {
		Content   string `json:"content"`
		Thinking  string `json:"thinking"`
		ToolCalls []struct {
			// ID is the call's id, which older Ollama servers do not send.
			ID       string `json:"id"`
			Function struct {
				Name      string          `json:"name"`
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"message"`
	Done            bool   `json:"done"`
	DoneReason      string `json:"done_reason"`
	PromptEvalCount int64  `json:"prompt_eval_count"`
	EvalCount       int64  `json:"eval_count"`
	Error           string `json:"error"`
}

// Run implements execution.Provider with /api/chat.
func (a *Adapter) Run(ctx context.Context, req *execution.RunRequest, w execution.EventWriter) (execution.Result, error) {
	cr := chatRequest{Model: req.Target, Stream: req.Options.Stream}
	if req.Input.System != "" {
		cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: req.Input.System})
	}
	for _, m := range req.Input.Messages {
		cr.Messages = append(cr.Messages, chatMessage{Role: m.Role, Content: m.Content})
	}
	if req.Options.MaxOutputTokens > 0 || req.Options.Temperature != nil {
		cr.Options = map[string]any{}
		if req.Options.MaxOutputTokens > 0 {
			cr.Options["num_predict"] = req.Options.MaxOutputTokens
		}
		if t := req.Options.Temperature; t != nil {
			cr.Options["temperature"] = *t
		}
	}
	resp, err := a.c.PostJSON(ctx, "/api/chat", nil, cr)
	if err != nil {
		return execution.Result{}, err
	}
	defer resp.Body.Close()
	return readChat(ctx, resp.Body, w)
}

// readChat reads /api/chat's answer: JSON lines, streamed or one whole,
// the last with done set.
func readChat(ctx context.Context, body io.Reader, w execution.EventWriter) (execution.Result, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	calls := 0
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var l chatLine
		if err := json.Unmarshal(line, &l); err != nil {
			return execution.Result{}, bodyFailure(ctx, "malformed stream line")
		}
		if l.Error != "" {
			return execution.Result{}, &execution.Failure{Class: execution.FailureProvider, Message: "upstream error in stream"}
		}
		if l.Message.Thinking != "" {
			if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: l.Message.Thinking, Reasoning: true}); err != nil {
				return execution.Result{}, err
			}
		}
		if l.Message.Content != "" {
			if err := w.WriteEvent(execution.Event{Kind: execution.EventDelta, Text: l.Message.Content}); err != nil {
				return execution.Result{}, err
			}
		}
		for _, tc := range l.Message.ToolCalls {
			calls++
			args := strings.TrimSpace(string(tc.Function.Arguments))
			if args == "" || args == "null" {
				args = "{}"
			}
			id := tc.ID
			if id == "" {
				// Clients answer a call by its id, and an Anthropic-format
				// history refuses two calls with one id: a made-up id is
				// unique across turns, never a count.
				id = "call_" + rand.Text()
			}
			if err := w.WriteEvent(execution.Event{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: id, Name: tc.Function.Name, Arguments: args}}); err != nil {
				return execution.Result{}, err
			}
		}
		if l.Done {
			if err := w.WriteEvent(execution.Event{Kind: execution.EventUsage, Usage: &execution.Usage{InputTokens: l.PromptEvalCount, OutputTokens: l.EvalCount}}); err != nil {
				return execution.Result{}, err
			}
			reason := "stop"
			switch {
			case calls > 0:
				reason = "tool_calls"
			case l.DoneReason == "length":
				reason = "length"
			}
			return execution.Result{StopReason: reason}, nil
		}
	}
	if sc.Err() != nil {
		return execution.Result{}, bodyFailure(ctx, "upstream body broken")
	}
	return execution.Result{}, bodyFailure(ctx, "stream ended without done")
}

func bodyFailure(ctx context.Context, msg string) error {
	if ctx.Err() != nil {
		return execution.Classify(ctx, ctx.Err())
	}
	return &execution.Failure{Class: execution.FailureProvider, Message: msg}
}
