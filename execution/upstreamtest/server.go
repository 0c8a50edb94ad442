// Package upstreamtest is a fake model server that speaks the real wire
// formats of the APIs IOP's adapters drive, written from the providers'
// published API references: OpenAI Chat Completions, Responses, Embeddings
// and Models; Anthropic Messages; Ollama's native API (/api/chat,
// /api/tags, /api/ps, /api/show, /api/version) and Ollama's
// OpenAI-compatible endpoints, which are the OpenAI ones.
//
// Replies are scripted (text deltas, reasoning, tool calls including
// parallel ones, usage), with a configurable time to first token and
// inter-chunk delay, an error in the middle of a stream, a hang before
// headers, and a record of every request, including whether the client
// cancelled it. Like net/http/httptest, it is meant for tests of code that
// talks to model servers, and it is also the quickstart's built-in model.
package upstreamtest

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Script is what the server answers to one request.
type Script struct {
	// Text is the answer, one streamed delta per element.
	Text []string
	// Reasoning is thinking text, streamed before Text where the API has a
	// place for it (Anthropic thinking blocks, Chat Completions
	// reasoning_content, Responses reasoning items).
	Reasoning []string
	// ToolCalls are emitted after the text; several make parallel calls.
	ToolCalls []ToolCall
	// Usage is reported at the end; zero fields are estimated.
	Usage Usage
	// RequestID, when set, is the answer's own request id, in the header
	// its API's clients read: request-id for Anthropic Messages,
	// X-Request-Id for the others (as the hosted APIs send them).
	RequestID string
	// StopReason overrides the natural one (the natural one is the API's
	// tool-call reason when there are tool calls, else its stop reason).
	// A Responses answer with one ends incomplete, this its reason
	// (max_output_tokens, content_filter).
	StopReason string
	// TTFT delays the first chunk (after the headers, for streams) or the
	// whole answer (otherwise).
	TTFT time.Duration
	// Gate, when not nil, holds what TTFT delays until it is closed: a
	// test decides when the first chunk leaves.
	Gate <-chan struct{}
	// ChunkDelay separates streamed chunks.
	ChunkDelay time.Duration
	// Hold, when not nil, holds a Chat Completions stream after its first
	// delta chunk (reasoning or content) until it is closed: a test sees
	// what reached the client while the provider is silent.
	Hold <-chan struct{}
	// Comment, when set, follows each event of a Chat Completions stream
	// as an SSE comment line, in the same write (some hosted APIs and
	// proxies send such comments as keep-alives).
	Comment string
	// ErrorAfter, when positive, ends a stream after that many content
	// chunks with the API's own mid-stream error event.
	ErrorAfter int
	// HangBeforeHeaders makes the server send nothing until the client
	// gives up.
	HangBeforeHeaders bool
	// HeadDelay delays the answer's head (status and headers), whatever
	// it is: Ollama sends none until its first token, after a model load
	// and the prompt's prefill.
	HeadDelay time.Duration
	// Status, when not 0 or 200, answers with the API's error body and this
	// status.
	Status int
	// RetryAfter, when set, is the Retry-After header of an error answer.
	RetryAfter string
	// ErrorBody, when set, is an error answer's body, verbatim, in place
	// of the API's error body: a model server's own shape and words.
	ErrorBody string
	// ArgumentsInChunks splits each tool call's arguments into this many
	// streamed fragments (default 3).
	ArgumentsInChunks int
	// Raw, when set, is written verbatim as the whole body with status 200
	// (Content-Type text/event-stream when it starts with "data:" or
	// "event:", else application/json): a malformed answer for fault
	// tests.
	Raw string
}

// ToolCall is one scripted tool call.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is a JSON object, or empty for a call of a tool that
	// takes no parameters, sent as each API's provider sends one: {} in
	// the OpenAI formats, and in Anthropic's a tool_use whose input is {}
	// and whose one input_json_delta is empty.
	Arguments string
}

// openAIArguments is the call's arguments as OpenAI sends them.
func (tc ToolCall) openAIArguments() string {
	if tc.Arguments == "" {
		return "{}"
	}
	return tc.Arguments
}

// Usage is scripted token usage.
type Usage struct {
	InputTokens, OutputTokens, CachedTokens, ReasoningTokens int
}

// Request is a request the server received.
type Request struct {
	// API is "chat", "responses", "responses_compact", "get_response", "embeddings", "models", "messages",
	// "count_tokens", "ollama_chat", "ollama_tags", "ollama_ps",
	// "ollama_show", "ollama_version".
	API    string
	Method string
	Path   string
	Header http.Header
	Body   []byte
	// Model and Stream as parsed from the body.
	Model  string
	Stream bool
	// IncludeUsage is Chat Completions' stream_options.include_usage.
	IncludeUsage bool
	// Prompt is the text of the last user message.
	Prompt string
	// Canceled is closed if the client went away before the answer ended.
	Canceled chan struct{}

	finished atomic.Bool
}

// ToolNames are the names of the tools the request offers, in its
// format's place for them (Chat Completions' function.name, the name of
// an Anthropic or Responses tool), in order; nil for a body with none.
// The body is decoded at each call: the server does not, so a request's
// cost does not depend on its tools.
func (q *Request) ToolNames() []string {
	var body struct {
		Tools []struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	json.Unmarshal(q.Body, &body)
	var names []string
	for _, t := range body.Tools {
		if t.Name == "" {
			t.Name = t.Function.Name
		}
		names = append(names, t.Name)
	}
	return names
}

// Config configures a Server.
type Config struct {
	// Models are listed by /v1/models and /api/tags. Empty means
	// ["fake-model"].
	Models []string
	// Reply scripts the answer to a request. Nil means Echo.
	Reply func(*Request) Script
	// MaxRecorded bounds the requests Requests keeps (the oldest go
	// first) and the Responses kept for GET /v1/responses/{id} and
	// previous_response_id. Zero means 10,000.
	MaxRecorded int
	// APIKey, when set, is required on every request as a hosted API
	// would: "Authorization: Bearer <key>" or "X-Api-Key: <key>". Others
	// get 401 with an error body and are not recorded.
	APIKey string
}

// Server is the fake upstream. It is an http.Handler; Start serves it on
// loopback.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu       sync.Mutex
	requests []*Request
	stored   map[string]map[string]any // Responses stored by id
	canceled int
	srv      *http.Server
	url      string
	seq      uint64
	conns    int // open client connections of a started server
}

var _ http.Handler = (*Server)(nil)

// New returns a Server for cfg; it serves nothing until Start or until it
// is mounted as a handler.
func New(cfg Config) *Server {
	if len(cfg.Models) == 0 {
		cfg.Models = []string{"fake-model"}
	}
	if cfg.Reply == nil {
		cfg.Reply = Echo
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
	s.mux.HandleFunc("POST /v1/responses", s.responses)
	s.mux.HandleFunc("POST /v1/responses/compact", s.compact)
	s.mux.HandleFunc("GET /v1/responses/{id}", s.getResponse)
	s.mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("POST /v1/messages", s.messages)
	s.mux.HandleFunc("POST /v1/messages/count_tokens", s.countTokens)
	s.mux.HandleFunc("POST /api/chat", s.ollamaChat)
	s.mux.HandleFunc("GET /api/tags", s.ollamaTags)
	s.mux.HandleFunc("GET /api/ps", s.ollamaPS)
	s.mux.HandleFunc("POST /api/show", s.ollamaShow)
	s.mux.HandleFunc("GET /api/version", s.ollamaVersion)
	return s
}

// Echo is the default script: it answers "echo: " and the prompt, a word
// per delta.
func Echo(r *Request) Script {
	words := strings.Fields("echo: " + r.Prompt)
	text := make([]string, len(words))
	for i, w := range words {
		if i > 0 {
			w = " " + w
		}
		text[i] = w
	}
	return Script{Text: text}
}

// Start serves on a fresh loopback port and returns the base URL (no
// trailing slash).
func (s *Server) Start() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic("upstreamtest: listen: " + err.Error())
	}
	s.mu.Lock()
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ConnState: s.connState}
	s.url = "http://" + ln.Addr().String()
	srv := s.srv
	s.mu.Unlock()
	go srv.Serve(ln)
	return s.url
}

func (s *Server) connState(_ net.Conn, st http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st {
	case http.StateNew:
		s.conns++
	case http.StateClosed, http.StateHijacked:
		s.conns--
	}
}

// OpenConns is how many client connections a started server holds open,
// idle ones included: a client that closes what it no longer needs
// leaves none.
func (s *Server) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// URL returns the base URL after Start.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Close stops a started server and its connections.
func (s *Server) Close() {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
	if srv != nil {
		srv.Close()
	}
}

// Requests returns the requests received so far.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.requests...)
}

// CanceledCount is how many requests the client abandoned mid-answer.
func (s *Server) CanceledCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.canceled
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	k := s.cfg.APIKey
	s.mu.Unlock()
	if k != "" {
		bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(bearer), []byte(k)) != 1 && subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Api-Key")), []byte(k)) != 1 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}`)
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// SetAPIKey changes the key the server requires (a rotation at the
// provider); empty means none.
func (s *Server) SetAPIKey(k string) {
	s.mu.Lock()
	s.cfg.APIKey = k
	s.mu.Unlock()
}

// maxBody bounds request bodies the fake reads.
const maxBody = 64 << 20

// record reads and parses the request.
func (s *Server) record(w http.ResponseWriter, r *http.Request, api string) (*Request, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return nil, false
	}
	req := &Request{API: api, Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body, Canceled: make(chan struct{})}
	if len(body) > 0 {
		var probe struct {
			Model         string `json:"model"`
			Stream        *bool  `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
			Input json.RawMessage `json:"input"`
		}
		if err := json.Unmarshal(body, &probe); err != nil {
			writeErr(w, api, http.StatusBadRequest, "invalid_request_error", "body is not valid JSON")
			return nil, false
		}
		req.Model = probe.Model
		req.Stream = probe.Stream != nil && *probe.Stream
		if api == "ollama_chat" && probe.Stream == nil {
			req.Stream = true // Ollama streams unless told not to
		}
		req.IncludeUsage = probe.StreamOptions != nil && probe.StreamOptions.IncludeUsage
		for _, m := range probe.Messages {
			if m.Role == "user" {
				req.Prompt = contentText(m.Content)
			}
		}
		if req.Prompt == "" && len(probe.Input) > 0 {
			req.Prompt = inputText(probe.Input)
		}
	}
	s.mu.Lock()
	limit := s.maxRecorded()
	if len(s.requests) >= limit {
		s.requests = append(s.requests[:0], s.requests[len(s.requests)-limit+1:]...)
	}
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	return req, true
}

// maxRecorded is the bound on recorded requests and stored responses.
func (s *Server) maxRecorded() int {
	if s.cfg.MaxRecorded <= 0 {
		return 10000
	}
	return s.cfg.MaxRecorded
}

// watch returns the handler's deferred check: a request whose answer did
// not finish while its client's context ended was cancelled by the client.
// Handlers notice the end of the context in every wait and write, so the
// check runs promptly.
func (s *Server) watch(r *http.Request, req *Request) (done func()) {
	return func() {
		if req.finished.Load() || r.Context().Err() == nil {
			return
		}
		s.mu.Lock()
		s.canceled++
		s.mu.Unlock()
		close(req.Canceled)
	}
}

// contentText flattens a message content (a string or content parts).
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return ""
}

// inputText reads a Responses or Embeddings input: a string, a list of
// strings, or a list of input items.
func inputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return ""
	}
	last := list[len(list)-1]
	if json.Unmarshal(last, &s) == nil {
		return s
	}
	var item struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(last, &item) == nil {
		return contentText(item.Content)
	}
	return ""
}

// firstChunk waits out the script's TTFT and Gate; it reports whether the
// client is still there.
func firstChunk(ctx context.Context, sc *Script) bool {
	if !sleep(ctx, sc.TTFT) {
		return false
	}
	if sc.Gate == nil {
		return true
	}
	select {
	case <-sc.Gate:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits for d or the request's end.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// prelude applies the script's failure modes common to every API. It
// reports whether the handler should go on.
func prelude(w http.ResponseWriter, r *http.Request, api string, sc *Script) bool {
	if sc.HangBeforeHeaders {
		<-r.Context().Done()
		return false
	}
	if !sleep(r.Context(), sc.HeadDelay) {
		return false
	}
	if sc.RequestID != "" {
		if api == "messages" {
			w.Header().Set("Request-Id", sc.RequestID)
		} else {
			w.Header().Set("X-Request-Id", sc.RequestID)
		}
	}
	if sc.Raw != "" {
		if strings.HasPrefix(sc.Raw, "data:") || strings.HasPrefix(sc.Raw, "event:") {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, sc.Raw)
		return false
	}
	if sc.Status != 0 && sc.Status != http.StatusOK {
		if sc.RetryAfter != "" {
			w.Header().Set("Retry-After", sc.RetryAfter)
		}
		kind := "server_error"
		switch sc.Status {
		case http.StatusTooManyRequests:
			kind = "rate_limit_error"
		case http.StatusBadRequest:
			kind = "invalid_request_error"
		case http.StatusUnauthorized:
			kind = "authentication_error"
		case 529:
			kind = "overloaded_error"
		}
		if sc.ErrorBody != "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(sc.Status)
			io.WriteString(w, sc.ErrorBody)
			return false
		}
		writeErr(w, api, sc.Status, kind, "scripted upstream error")
		return false
	}
	return true
}

// writeErr writes the API's error body.
func writeErr(w http.ResponseWriter, api string, status int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	var body any
	switch {
	case api == "messages" || api == "count_tokens":
		if kind == "server_error" {
			kind = "api_error"
		}
		body = map[string]any{"type": "error", "error": map[string]any{"type": kind, "message": msg}}
	case strings.HasPrefix(api, "ollama"):
		body = map[string]any{"error": msg}
	default:
		body = map[string]any{"error": map[string]any{"message": msg, "type": kind, "param": nil, "code": nil}}
	}
	json.NewEncoder(w).Encode(body)
}

// usage fills estimated usage for zero fields.
func usage(sc *Script, req *Request) Usage {
	u := sc.Usage
	if u.InputTokens == 0 {
		u.InputTokens = max(1, len(req.Body)/4)
	}
	if u.OutputTokens == 0 {
		u.OutputTokens = len(sc.Text) + len(sc.Reasoning) + 4*len(sc.ToolCalls)
	}
	return u
}

func (s *Server) nextID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return s.seq
}

// argFragments splits a tool call's arguments for streaming.
func argFragments(args string, n int) []string {
	if n <= 0 {
		n = 3
	}
	if len(args) < n {
		return []string{args}
	}
	var out []string
	step := (len(args) + n - 1) / n
	for i := 0; i < len(args); i += step {
		out = append(out, args[i:min(i+step, len(args))])
	}
	return out
}

// embed returns a deterministic unit vector for text.
func embed(text string, dims int) []float64 {
	v := make([]float64, dims)
	var norm float64
	for i := range v {
		h := sha256.Sum256([]byte(text + string(rune(i))))
		x := float64(int32(binary.BigEndian.Uint32(h[:4]))) / math.MaxInt32
		v[i] = x
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] /= norm
	}
	return v
}

var errGone = errors.New("client gone")

// sse writes Server-Sent Events and flushes after each.
type sse struct {
	w   http.ResponseWriter
	f   http.Flusher
	ctx context.Context
	// comment follows each event; see Script.Comment.
	comment string
}

func newSSE(w http.ResponseWriter, r *http.Request) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	if f != nil {
		f.Flush()
	}
	return &sse{w: w, f: f, ctx: r.Context()}
}

func (e *sse) event(name string, v any) error {
	if e.ctx.Err() != nil {
		return errGone
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if name != "" {
		if _, err := io.WriteString(e.w, "event: "+name+"\n"); err != nil {
			return err
		}
	}
	if _, err := io.WriteString(e.w, "data: "+string(b)+"\n\n"); err != nil {
		return err
	}
	if e.comment != "" {
		if _, err := io.WriteString(e.w, ": "+e.comment+"\n\n"); err != nil {
			return err
		}
	}
	if e.f != nil {
		e.f.Flush()
	}
	return nil
}

func (e *sse) raw(s string) error {
	if _, err := io.WriteString(e.w, s); err != nil {
		return err
	}
	if e.f != nil {
		e.f.Flush()
	}
	return nil
}
