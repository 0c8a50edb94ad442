package edge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/edge/pool"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/httpauth"
	"github.com/iop-dev/iop/internal/httpmux"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/internal/tunnelhdr"
)

// api is a client API the Edge serves.
type api uint8

const (
	apiChat api = iota + 1
	apiResponses
	apiEmbeddings
	apiMessages
	// apiCompact is Responses' compaction (POST /v1/responses/compact),
	// never streamed: the provider shortens a conversation into items
	// that carry it on. A provider whose upstream speaks Responses serves
	// it untranslated (one of the items is its own encrypted state); any
	// other has the model summarize the conversation
	// (llmapi.Compaction), translated as a Responses request is.
	apiCompact
)

func (a api) path() string {
	switch a {
	case apiChat:
		return "/v1/chat/completions"
	case apiResponses:
		return "/v1/responses"
	case apiMessages:
		return "/v1/messages"
	case apiCompact:
		return "/v1/responses/compact"
	}
	return "/v1/embeddings"
}

// dispatchPath is how a provider serves an API: relaying its own HTTP
// (tunnel, same format), relaying it in the provider's format with the
// request and answer translated (translate), or a normalized run rendered
// in the client's format (run).
type dispatchPath uint8

const (
	pathNone dispatchPath = iota
	pathTunnel
	pathTranslate
	pathRun
)

// wireFormat is the API format a provider is spoken to in when translating.
type wireFormat uint8

const (
	formatChat wireFormat = iota + 1
	formatMessages
	formatResponses
)

// apiNames are the API names of ProviderSpec.APIs.
var apiNames = map[string]api{"chat": apiChat, "responses": apiResponses, "messages": apiMessages, "embeddings": apiEmbeddings}

// clientFormat is the wire format of a generating API's requests and
// answers (embeddings have none of those).
func clientFormat(a api) (wireFormat, bool) {
	switch a {
	case apiChat:
		return formatChat, true
	case apiResponses:
		return formatResponses, true
	case apiMessages:
		return formatMessages, true
	}
	return 0, false
}

// adapterAPIs are, per adapter, the APIs its upstream serves natively by
// default (its tunnel allows them), for a provider that names none. A cli
// provider serves normalized runs only.
var adapterAPIs = map[string][]api{
	"openai":    {apiChat, apiResponses, apiEmbeddings},
	"ollama":    {apiChat, apiEmbeddings},
	"anthropic": {apiMessages},
	"cli":       nil,
}

// adapterOptionalAPIs are, per adapter, the APIs its tunnel also allows,
// served only by a provider that names them: Ollama serves Responses
// since 0.13.3 (its compaction since ollama/ollama PR #18224), which
// earlier versions do not.
var adapterOptionalAPIs = map[string][]api{
	"ollama": {apiResponses},
}

// adapterAllows is the set of APIs a provider of adapter may name.
func adapterAllows(adapter string) apiSet {
	return setOf(append(slices.Clone(adapterAPIs[adapter]), adapterOptionalAPIs[adapter]...)...)
}

// apiSet is a set of APIs a provider's upstream serves natively.
type apiSet uint8

func (s apiSet) has(a api) bool { return s&(1<<a) != 0 }

func setOf(as ...api) apiSet {
	var s apiSet
	for _, a := range as {
		s |= 1 << a
	}
	return s
}

// providerAPIs resolves a provider's configured API names (validated by
// Config.Validate) to a set, the adapter's default when none are named.
func providerAPIs(adapter string, names []string) apiSet {
	if len(names) == 0 {
		return setOf(adapterAPIs[adapter]...)
	}
	var s apiSet
	for _, n := range names {
		s |= setOf(apiNames[n])
	}
	return s
}

// capability says how a provider serves a client API for target t: relayed
// as is when its upstream speaks the API, translated into a format it does
// speak (Anthropic Messages, else Chat Completions, else Responses; but
// Responses before Chat Completions for one of OpenAI's reasoning models,
// whose reasoning only Responses carries from turn to turn), a normalized
// run for a cli provider, or not at all (embeddings are never
// translated). A compaction goes as a Responses request does, but
// untranslated wherever the upstream speaks Responses: a translation or a
// run serves its summary request (llmapi.Compaction).
func capability(pi providerInfo, a api, t Target) (dispatchPath, wireFormat) {
	switch {
	case pi.adapter == "cli":
		if a == apiEmbeddings {
			return pathNone, 0
		}
		return pathRun, 0
	case a == apiCompact:
		if pi.apis.has(apiResponses) {
			return pathTunnel, 0
		}
		return capability(pi, apiResponses, t)
	case pi.apis.has(a):
		return pathTunnel, 0
	case a == apiEmbeddings:
		return pathNone, 0
	case pi.apis.has(apiMessages):
		return pathTranslate, formatMessages
	case pi.apis.has(apiResponses) && t.class() == llmapi.ClassOpenAIReasoning:
		return pathTranslate, formatResponses
	case pi.apis.has(apiChat):
		return pathTranslate, formatChat
	case pi.apis.has(apiResponses):
		return pathTranslate, formatResponses
	}
	return pathNone, 0
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	// served holds the same patterns as mux, less the catch-all, so that
	// a known path asked with another method gets 405 and not 404.
	served := http.NewServeMux()
	handle := func(pattern string, h http.Handler) {
		mux.Handle(pattern, h)
		served.Handle(pattern, h)
	}
	handle("POST /v1/chat/completions", s.wrap(func(w http.ResponseWriter, r *http.Request, rid string) { s.generate(w, r, rid, apiChat) }))
	handle("POST /v1/responses", s.wrap(func(w http.ResponseWriter, r *http.Request, rid string) { s.generate(w, r, rid, apiResponses) }))
	handle("POST /v1/responses/compact", s.wrap(func(w http.ResponseWriter, r *http.Request, rid string) { s.generate(w, r, rid, apiCompact) }))
	handle("POST /v1/embeddings", s.wrap(func(w http.ResponseWriter, r *http.Request, rid string) { s.generate(w, r, rid, apiEmbeddings) }))
	handle("POST /v1/messages", s.wrap(func(w http.ResponseWriter, r *http.Request, rid string) { s.generate(w, r, rid, apiMessages) }))
	handle("POST /v1/messages/count_tokens", s.wrap(s.countTokens))
	handle("GET /v1/responses/{id}", s.wrap(s.getResponse))
	handle("GET /v1/models", s.wrap(s.models))
	handle("GET /v1/models/{id...}", s.wrap(s.model)) // a model id may hold a slash
	handle("GET /healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "ok\n")
	}))
	handle("GET /readyz", http.HandlerFunc(s.readyz))
	if s.reg2 != nil {
		handle("GET /metrics", s.metricsAuth(promhttp.HandlerFor(s.reg2, promhttp.HandlerOpts{})))
	}
	mux.Handle("GET /v1/responses", s.wrap(func(w http.ResponseWriter, r *http.Request, _ string) {
		if !websocketUpgrade(r) {
			unrouted(w, r, served)
			return
		}
		// Codex tries Responses over a WebSocket first when its built-in
		// OpenAI provider is pointed here; 426 is the answer it reads as
		// "use HTTP", and falls back on at once.
		fail(w, apiResponses, http.StatusUpgradeRequired, "invalid_request", "This gateway serves Responses over HTTP only: POST /v1/responses.", "websocket_unsupported")
	}))
	mux.Handle("/", s.wrap(func(w http.ResponseWriter, r *http.Request, _ string) { unrouted(w, r, served) }))
	return s.cors(mux, served)
}

// websocketUpgrade reports whether r asks to become a WebSocket.
func websocketUpgrade(r *http.Request) bool {
	return headerHasToken(r.Header, "Connection", "upgrade") && headerHasToken(r.Header, "Upgrade", "websocket")
}

// headerHasToken reports whether a comma-separated list in h's values
// of name holds token, compared without case.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// unrouted answers a request no route serves: 405 naming the methods its
// path is served with, or 404.
func unrouted(w http.ResponseWriter, r *http.Request, served *http.ServeMux) {
	if allow := httpmux.Allowed(served, r); allow != "" {
		w.Header().Set("Allow", allow)
		fail(w, clientAPI(r), http.StatusMethodNotAllowed, "method_not_allowed", "Method "+r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+allow, "method_not_allowed")
		return
	}
	fail(w, clientAPI(r), http.StatusNotFound, "not_found", "Unknown path "+r.Method+" "+r.URL.Path, "not_found")
}

// metricsAuth requires Config.MetricsTokenHash's bearer token, when one
// is configured, before next serves the metrics.
func (s *Server) metricsAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if want := s.snap.Load().metricsToken; want != ([32]byte{}) {
			h, _, _ := httpauth.One(r.Header, "Authorization")
			token, _ := httpauth.Bearer(h)
			sum := sha256.Sum256([]byte(token))
			if token == "" || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="iop-metrics"`)
				http.Error(w, "401 the metrics need their bearer token", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// readyz answers 200 while the Edge is serving and at least one route has
// a provider that can take work now (online, and with its credential,
// when it is leased, not revoked), and 503 otherwise.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	if s.closing.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "shutting down\n")
		return
	}
	snap := s.snap.Load()
	for _, rt := range snap.routes {
		for _, t := range rt.Targets {
			if pi, ok := snap.providers[t.ProviderID]; ok && (pi.credential == "" || snap.leasable(pi.credential)) {
				if _, ok := s.reg.Available(pi.nodeID, t.ProviderID); ok {
					io.WriteString(w, "ready\n")
					return
				}
			}
		}
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	io.WriteString(w, "no provider available\n")
}

// wrap gives every response a request id and a recorder (which the
// handler receives as its ResponseWriter), and turns a panic into a 500
// without leaking it. A panic after the answer began cuts the connection
// instead: an error body appended to a started answer (a stream's events,
// say) would read as part of it.
func (s *Server) wrap(h func(http.ResponseWriter, *http.Request, string)) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rid := s.newRequestID()
		// OpenAI's clients read X-Request-Id, Anthropic's request-id. A
		// tunnelled answer passes the provider's own on instead.
		rw.Header().Set("X-Request-Id", rid)
		rw.Header().Set("Request-Id", rid)
		w := &recorder{ResponseWriter: rw, rid: rid}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("handler panic", "request_id", rid, "panic", fmt.Sprint(p), "answer_started", w.status != 0)
				if w.status != 0 {
					panic(http.ErrAbortHandler)
				}
				apiError(w, http.StatusInternalServerError, "Internal error.", "server_error", nil)
			}
		}()
		h(w, r, rid)
	})
}

func apiError(w http.ResponseWriter, status int, msg, typ string, code any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(llmapi.OpenAIErrorBody(msg, typ, code))
}

// presentedKey reads "Authorization: Bearer <key>" (the scheme in any
// case) or, without an Authorization header, x-api-key. An Authorization
// header of another scheme presents no key, whatever x-api-key says, and
// neither does a header sent twice.
func presentedKey(r *http.Request) string {
	h, present, once := httpauth.One(r.Header, "Authorization")
	switch {
	case present && !once:
		return ""
	case h != "":
		k, _ := httpauth.Bearer(h)
		return k
	}
	k, _, _ := httpauth.One(r.Header, "X-Api-Key")
	return k
}

func (s *Server) authFor(w http.ResponseWriter, r *http.Request, snap *snapshot, a api) *APIKey {
	k := snap.authenticate(presentedKey(r))
	if k == nil {
		w.Header().Set("WWW-Authenticate", `Bearer realm="iop"`)
		fail(w, a, http.StatusUnauthorized, "authentication", "Incorrect or missing API key.", "invalid_api_key")
	}
	return k
}

// retryHint gives a 429, 503 or 529 answer Retry-After: 1 when no
// better delay was set.
func retryHint(h http.Header, status int) {
	if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || status == 529) && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
}

// fail writes an error in the client API's own shape: Anthropic's for
// Messages, OpenAI's otherwise. A 429 or 503 (Anthropic's 529) carries
// Retry-After: the caller's, set before, or one second.
func fail(w http.ResponseWriter, a api, status int, typ, msg string, code any) {
	w.Header().Set("Content-Type", "application/json")
	retryHint(w.Header(), status)
	if a == apiMessages {
		if status == http.StatusServiceUnavailable && typ == "overloaded" {
			status = 529
		}
		rid := ""
		if rec, ok := w.(*recorder); ok {
			rid = rec.rid
		}
		w.WriteHeader(status)
		w.Write(llmapi.AnthropicErrorBody(anthropicType(status, typ), msg, rid))
		return
	}
	if code == nil {
		code = llmapi.OpenAIErrorCode(typ)
	}
	oa := "invalid_request_error"
	switch {
	case typ == "rate_limit":
		oa = "rate_limit_error"
	case typ == "requests" || typ == "tokens" || typ == "concurrent":
		oa = typ
	case status >= 500 || typ == "overloaded":
		oa = "server_error"
	case typ == "timeout":
		oa = "timeout"
	}
	w.WriteHeader(status)
	w.Write(llmapi.OpenAIErrorBody(msg, oa, code))
}

func anthropicType(status int, typ string) string {
	switch {
	case typ == "overloaded" || status == 529:
		return "overloaded_error"
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusGatewayTimeout || status == http.StatusRequestTimeout:
		return "timeout_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

// models lists the routes the key may use, in the format of the client
// asking: Anthropic's when the request carries anthropic-version (its SDKs
// always send it; the list is whole, so has_more is false), OpenAI's
// otherwise.
func (s *Server) models(w http.ResponseWriter, r *http.Request, _ string) {
	snap := s.snap.Load()
	a := clientAPI(r)
	key := s.authFor(w, r, snap, a)
	if key == nil {
		return
	}
	data := []any{}
	var first, last any // Anthropic's first_id and last_id (a key always has a route; null for none)
	for _, rt := range snap.sortedRoutes() {
		if key.allows(rt.Model) {
			data = append(data, modelObject(rt, a))
			if first == nil {
				first = rt.Model
			}
			last = rt.Model
		}
	}
	body := map[string]any{"object": "list", "data": data}
	if a == apiMessages {
		body = map[string]any{"data": data, "has_more": false, "first_id": first, "last_id": last}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(body)
}

// model answers a retrieval of one model (OpenAI's GET /v1/models/{model},
// Anthropic's GET /v1/models/{model_id}): the route of that name, or 404
// when there is none or the key may not use it.
func (s *Server) model(w http.ResponseWriter, r *http.Request, _ string) {
	snap := s.snap.Load()
	a := clientAPI(r)
	key := s.authFor(w, r, snap, a)
	if key == nil {
		return
	}
	id := r.PathValue("id")
	rt := snap.routes[id]
	if rt == nil || !key.allows(id) {
		fail(w, a, http.StatusNotFound, "not_found", fmt.Sprintf("The model %q does not exist or you do not have access to it.", id), "model_not_found")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(modelObject(rt, a))
}

// clientAPI is the format a request that names no API by its path (a
// models request, an unknown path) is answered in: Anthropic's for a
// request that carries anthropic-version, as its SDKs always do, OpenAI's
// (apiChat) otherwise.
func clientAPI(r *http.Request) api {
	if r.Header.Get("Anthropic-Version") != "" {
		return apiMessages
	}
	return apiChat
}

// modelObject is a route as the models API shows it to the client's
// format. The Edge keeps no creation time for a route, so it reports the
// epoch (Anthropic's reference allows one for an unknown release date),
// and a route it lists is in service, so "active".
func modelObject(rt *Route, a api) map[string]any {
	if a == apiMessages {
		return map[string]any{"type": "model", "id": rt.Model, "display_name": rt.Model, "created_at": "1970-01-01T00:00:00Z", "lifecycle": "active"}
	}
	return map[string]any{"id": rt.Model, "object": "model", "created": 0, "owned_by": "iop"}
}

func (snap *snapshot) sortedRoutes() []*Route {
	out := make([]*Route, 0, len(snap.routes))
	for _, r := range snap.routes {
		out = append(out, r)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Model < out[j-1].Model; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// request is one admitted-or-about-to-be API request.
type request struct {
	rid          string
	api          api
	key          *APIKey
	route        *Route
	snap         *snapshot
	body         []byte
	fields       llmapi.Fields
	stream       bool
	includeUsage bool
	// ir is the request in canonical form, decoded only when a target needs
	// translation or a normalized run; irErr says why it could not be.
	ir    *llmapi.Request
	irErr error
	// compaction is a compaction request decoded for a provider with no
	// compaction of its own; ir is its request for the summary.
	compaction *llmapi.Compaction
	// prep is the decoded request made ready for each provider that
	// translates or runs it (nil on the untranslated path).
	prep *preparation
	// anthropic carries the client's anthropic-version and -beta headers.
	anthropic http.Header
	// pin is the only provider that may serve the request: the one holding
	// the state a Responses previous_response_id refers to.
	pin string
	// usage is what the provider reported, once booked (recordUsage).
	usage *execution.Usage
	// answered says a successful answer began (a provider's 200, or a
	// run's output or successful end); estOut is the output it carried,
	// in estimated tokens; cut says it broke off before its end, so the
	// usage booked may be a snapshot taken earlier. See chargeEstimate.
	answered bool
	estOut   int64
	cut      bool
	// estimated is what chargeEstimate charged (for the access log).
	estimated int64
	// providerRID is the provider's own request id for this request, if
	// its answer named one (for the access log).
	providerRID string
}

// generate is the one handler of the generation APIs: authenticate, read
// and check the body, find the route, admit, dispatch, answer.
func (s *Server) generate(rw http.ResponseWriter, r *http.Request, rid string, a api) {
	start := time.Now()
	w := rw.(*recorder) // wrap's: every route goes through it
	snap := s.snap.Load()
	routeLabel := "unknown"
	streamed := false // a streamed answer was asked for: only it has a first event
	var (
		key    *APIKey
		req    *request
		served *exchange
	)
	defer func() {
		took := time.Since(start)
		rs := routeSeries{routeLabel, a}
		s.metrics.requestsBy.get(requestSeries{rs, w.outcomeOf()}).Inc()
		s.metrics.durationBy.get(rs).Observe(took.Seconds())
		if streamed && !w.first.IsZero() && w.status == http.StatusOK {
			s.metrics.ttftBy.get(rs).Observe(w.first.Sub(start).Seconds())
		}
		if snap.accessLog {
			s.logAccess(w, a, routeLabel, key, req, served, streamed, start, took)
		}
	}()
	key = s.authFor(w, r, snap, a)
	if key == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), snap.requestTimeout)
	defer cancel()
	body, ok := readRequestBody(ctx, w, r, snap.maxBody, a)
	if !ok {
		return
	}
	f, err := llmapi.Scan(body, requestKeys...)
	if err != nil {
		fail(w, a, http.StatusBadRequest, "invalid_request", "Request body must be a JSON object: "+err.Error(), nil)
		return
	}
	model, ok := f.String("model")
	if !ok || model == "" {
		fail(w, a, http.StatusBadRequest, "invalid_request", "model is required.", nil)
		return
	}
	rt := snap.routes[model]
	if rt == nil || !key.allows(model) {
		fail(w, a, http.StatusNotFound, "not_found", fmt.Sprintf("The model %q does not exist or you do not have access to it.", model), "model_not_found")
		return
	}
	routeLabel = rt.Model
	stream, ok := f.Bool("stream")
	if !ok || (stream && (a == apiEmbeddings || a == apiCompact)) {
		fail(w, a, http.StatusBadRequest, "invalid_request", "stream must be a boolean (and false for embeddings and compaction).", nil)
		return
	}
	streamed = stream
	req = &request{rid: rid, api: a, key: key, route: rt, snap: snap, body: body, fields: f, stream: stream}
	if so := f.Raw("stream_options"); so != nil {
		var opt struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if string(so) != "null" && json.Unmarshal(so, &opt) != nil {
			fail(w, a, http.StatusBadRequest, "invalid_request", "stream_options must be an object.", nil)
			return
		}
		req.includeUsage = opt.IncludeUsage
	}
	if prev := f.Raw("previous_response_id"); a == apiResponses && prev != nil && string(prev) != "null" {
		id, ok := f.String("previous_response_id")
		_, provider, known := s.responses.lookup(id, key.Name)
		if !ok || !known {
			fail(w, a, http.StatusBadRequest, "invalid_request", "previous_response_id is not a response this API key created through this Edge (or the Edge no longer remembers it).", "previous_response_not_found")
			return
		}
		if !rt.hasProvider(provider) {
			fail(w, a, http.StatusBadRequest, "invalid_request", fmt.Sprintf("previous_response_id refers to a response served outside model %q; continue it with the model that created it.", rt.Model), "previous_response_not_found")
			return
		}
		req.pin = provider
	}
	if a == apiMessages {
		if req.anthropic, ok = anthropicHeaders(w, r); !ok {
			return
		}
	}
	// The key's limits come after the cheap checks (a malformed request
	// spends none of its budget) and before the conversation is decoded:
	// a refused request costs no full decode of its body.
	kl, refusal := s.limits.admit(key, time.Now())
	if refusal != nil {
		s.usage.limited(key.Name, refusal.kind)
		w.outcome = "key_limited" // the Edge's own limit, not a provider's 429
		secs := int(refusal.retry.Seconds() + 0.999)
		w.Header().Set("Retry-After", fmt.Sprint(max(secs, 1)))
		fail(w, a, http.StatusTooManyRequests, refusal.kind, fmt.Sprintf("Rate limit reached for key %q (%s).", key.Name, refusal.kind), "rate_limit_exceeded")
		return
	}
	defer kl.release()
	// Decode the conversation only when a provider of this route needs a
	// translation or a normalized run: the tunnel path never decodes it.
	if snap.needsIR(rt, a) {
		switch a {
		case apiChat:
			req.ir, req.irErr = llmapi.DecodeChatRequest(body)
		case apiResponses:
			req.ir, req.irErr = llmapi.DecodeResponsesRequest(body)
		case apiCompact:
			if req.compaction, req.irErr = llmapi.DecodeCompactionRequest(body); req.irErr == nil {
				req.ir = req.compaction.Summarize
			}
		case apiMessages:
			req.ir, req.irErr = llmapi.DecodeAnthropicRequest(body)
		}
	}

	if req.ir != nil {
		req.prepare()
	}

	x, status, err := s.dispatch(ctx, req)
	if err != nil {
		kl.refund(key) // never served: it does not count against the rate
		s.refuse(w, req, status, err)
		return
	}
	defer x.close()
	served = x
	s.usage.request(key.Name)
	s.metrics.queueWaitBy.get(rt.Model).Observe(x.lease.Waited.Seconds())
	switch {
	case x.run != nil:
		s.relayRun(ctx, w, req, x)
	case x.format != 0:
		s.relayTranslate(ctx, w, req, x)
	default:
		s.relayTunnel(ctx, w, req, x)
	}
	s.chargeEstimate(req)
}

// queueRetryAfter is the Retry-After, in seconds, of a request whose
// queue timeout passed: the queue timeout and one second more, or, when
// one of its candidates now cools for the request's model and its
// cooldown ends sooner than that, the time until the earliest such end
// (rounded up): a slot the cooldown held comes back then, and a client
// that retries at once would only queue behind it. A provider that is
// no candidate (its Node is gone, say) is not counted: the end of its
// cooldown gives back no slot.
func (s *Server) queueRetryAfter(req *request, now time.Time) int {
	return coolingRetryAfter(&s.cool, req.snap.queueTimeout, s.candidates(req), now)
}

// coolingRetryAfter is queueRetryAfter's rule over the candidates cands.
func coolingRetryAfter(c *cooldown, queue time.Duration, cands []pool.Candidate, now time.Time) int {
	secs := int(queue/time.Second) + 1
	for _, cand := range cands {
		t := cand.Target.(*Target)
		if end := c.endAt(t.ProviderID, t.Model, now); !end.IsZero() {
			secs = min(secs, int((end.Sub(now)+time.Second-1)/time.Second))
		}
	}
	return secs
}

func (s *Server) refuse(w http.ResponseWriter, req *request, status int, err error) {
	a := req.api
	var ae *llmapi.APIError
	switch {
	case errors.Is(err, pool.ErrQueueTimeout), errors.Is(err, pool.ErrNoCandidate), errors.Is(err, pool.ErrClosed), errors.Is(err, pool.ErrQueueFull):
		w.Header().Set("Retry-After", "1")
		msg, outcome := "No provider for this model is available right now.", "overloaded"
		switch {
		case errors.Is(err, pool.ErrQueueTimeout):
			w.Header().Set("Retry-After", strconv.Itoa(s.queueRetryAfter(req, time.Now())))
			msg = "All providers for this model are busy; the request waited its full queue timeout."
		case errors.Is(err, pool.ErrQueueFull):
			msg, outcome = "Too many requests are waiting for a slot; try again shortly.", "queue_full"
		}
		fail(w, a, http.StatusServiceUnavailable, "overloaded", msg, "overloaded")
		if rec, ok := w.(*recorder); ok {
			rec.outcome = outcome
		}
	case errors.As(err, &ae):
		fail(w, a, ae.Status, ae.Type, ae.Message, nil)
	case errors.Is(err, llmapi.ErrUnsupported):
		fail(w, a, http.StatusBadRequest, "invalid_request", "This model's providers cannot serve this request: "+err.Error(), "unsupported")
	case errors.Is(err, context.Canceled):
		// The client went away while queued: nobody to answer.
	case errors.Is(err, context.DeadlineExceeded):
		fail(w, a, http.StatusGatewayTimeout, "timeout", "The request exceeded its deadline.", nil)
	default:
		s.log.Warn("dispatch failed", "request_id", req.rid, "error", err)
		if status == 0 {
			status = http.StatusBadGateway
		}
		fail(w, a, status, "api_error", "The model provider could not be reached.", nil)
	}
}

// exchange is a dispatched request: the lease and the tunnel or run that
// holds it. close releases the lease exactly once.
type exchange struct {
	lease  *pool.Lease
	target Target
	tunnel *nodes.Tunnel
	run    *nodes.Run
	// format is the provider's format on the translate path (0 otherwise).
	format wireFormat
}

func (x *exchange) close() {
	if x.tunnel != nil {
		x.tunnel.Close()
	}
	if x.run != nil {
		x.run.Close()
	}
	x.lease.Release()
}

// dispatch is the seam every API goes through: candidates from the route
// (filtered by capability and health), admission in FIFO order, then the
// tunnel or the run on the exact generation the lease belongs to. Once
// dispatched, a request is never replayed or moved.
func (s *Server) dispatch(ctx context.Context, req *request) (*exchange, int, error) {
	cands := func() []pool.Candidate { return s.candidates(req) }
	if err := req.unservable(); err != nil {
		// No provider of this route can carry the request, however many
		// are online: waiting for one would not help.
		return nil, http.StatusBadRequest, err
	}
	queueEnd := time.Now().Add(req.snap.queueTimeout)
	for attempt := 1; ; attempt++ {
		// The bounds are the configuration's now: a reload that lowers
		// them turns newcomers away until the queue is below them.
		cur := s.snap.Load()
		lease, err := s.pool.Acquire(ctx, pool.Request{
			Candidates:  cands,
			Choose:      req.route.Strategy.choice(),
			Priority:    req.key.Priority,
			LongContext: EstimateTokens(req.body) >= req.snap.longContext,
			// The queue timeout bounds the whole wait, retries included.
			Timeout:        max(time.Until(queueEnd), time.Millisecond),
			MaxQueued:      cur.maxQueued,
			Size:           int64(len(req.body)),
			MaxQueuedBytes: cur.maxQueuedBytes,
		})
		if err != nil {
			return nil, 0, err
		}
		x, status, err := s.open(ctx, req, lease)
		if notStarted(err) && attempt < maxAdmissions {
			// The Node is shutting down or gone: its GOAWAY or its
			// connection's end came between the lease and the stream,
			// which never ran there, so the request is admitted again
			// (the registry no longer offers that connection).
			continue
		}
		return x, status, err
	}
}

// candidates are the providers of req's route that may take it now,
// each with the capacity it has now: admission asks for them on every
// evaluation of the request, so a provider that goes offline, cools or
// has its capacity changed is seen at once.
func (s *Server) candidates(req *request) []pool.Candidate {
	out := make([]pool.Candidate, 0, len(req.route.Targets))
	// Capacity is the configuration's now, not the request's: a
	// reload that lowers it binds the requests already queued.
	cur := s.snap.Load()
	for i, t := range req.route.Targets {
		pi, ok := req.snap.providers[t.ProviderID]
		if !ok || (req.pin != "" && t.ProviderID != req.pin) {
			continue
		}
		now, ok := cur.providers[t.ProviderID]
		if !ok || now.nodeID != pi.nodeID {
			continue // gone from that Node since the request came
		}
		if now.credential != "" && !cur.leasable(now.credential) {
			// Its credential is revoked (or gone): no lease will be
			// issued, so the route's other providers serve, or the
			// request is refused at once.
			continue
		}
		if p, f := capability(pi, req.api, t); p == pathNone || req.unfit(p, f, t) != nil {
			continue
		}
		gen, applied, ok := s.reg.Admission(pi.nodeID, t.ProviderID, t.Model)
		if !ok {
			continue
		}
		// The Node admits by the configuration it has applied: a
		// raised capacity counts once the Node acknowledged it (its
		// acknowledgement kicks the queue), a lowered one at once. A
		// model it has not applied yet has no slot until it has; one
		// it lacks under the latest configuration is no candidate.
		capacity := now.capacity
		if applied.Capacity > 0 && applied.Capacity < capacity {
			capacity = applied.Capacity
		}
		if len(applied.Models) > 0 && !slices.Contains(applied.Models, t.Model) {
			if applied.Current {
				continue
			}
			capacity = 0
		}
		// Work the Node would refuse under a configuration it may
		// still hold (a credential rotated right after its
		// revocation, a model removed and added back) waits for its
		// acknowledgement too.
		if applied.Held {
			capacity = 0
		}
		// A provider (or this model of it) that refused with "not
		// now" (cooldown) has no free slot until its delay ends: the
		// request goes to another candidate, or waits for this one.
		if s.cool.cooling(t.ProviderID, t.Model) {
			capacity = 0
		}
		out = append(out, pool.Candidate{Key: pool.Key{NodeID: pi.nodeID, ProviderID: t.ProviderID}, Generation: gen,
			Capacity: capacity, LongContextCapacity: now.longCapacity, Weight: t.Weight,
			Target: &req.route.Targets[i]}) // the snapshot's, never changed: no copy to box
	}
	return out
}

// maxAdmissions bounds how often one request is admitted: a lease whose
// Node refuses the stream before it runs (its GOAWAY), or whose
// connection ended before the request left, sends the request back to
// admission, at most this many times in all.
const maxAdmissions = 3

// notStarted reports whether err says that a dispatch never reached its
// Node: the lease's connection or provider was gone when the stream was
// to open, the stream was not opened or its request not sent (the Node's
// GOAWAY had come, the connection ended), or the Node refused it
// unopened (its GOAWAY crossed the stream). Only such a request may be
// admitted again.
func notStarted(err error) bool {
	return err != nil && (errors.Is(err, nodes.ErrNotStarted) ||
		errors.Is(err, nodes.ErrStaleGeneration) || errors.Is(err, nodes.ErrNotReady) || errors.Is(err, nodes.ErrProviderUnavailable))
}

// open starts the tunnel or the run of an admitted request on its lease's
// Node and generation. On an error the lease is released.
func (s *Server) open(ctx context.Context, req *request, lease *pool.Lease) (*exchange, int, error) {
	var err error
	t := *lease.Target.(*Target)
	pi := req.snap.providers[t.ProviderID]
	x := &exchange{lease: lease, target: t}
	deadline, _ := ctx.Deadline()
	path, format := capability(pi, req.api, t)
	switch path {
	case pathTunnel, pathTranslate:
		var body []byte
		var upPath string
		header := tunnelHeader // shared and never changed: a header that needs more is a copy
		switch {
		case path == pathTunnel:
			body, err = tunnelBody(req, t.Model, pi.dropBilling)
			upPath = req.api.path()
			if len(req.anthropic) > 0 {
				header = header.Clone()
				for k, v := range req.anthropic {
					header[k] = v
				}
			}
		default:
			// A candidate's format carries the request (cands): its body
			// is ready but for the target's model.
			body = req.prep.find(req.ir, format, t).body.Splice("model", llmapi.Quote(t.Model))
			x.format = format
			switch format {
			case formatChat:
				upPath = apiChat.path()
			case formatResponses:
				upPath = apiResponses.path()
			default:
				upPath = apiMessages.path()
				header = header.Clone()
				header.Set("Anthropic-Version", "2023-06-01")
			}
		}
		if err != nil {
			lease.Release()
			return nil, http.StatusBadRequest, err
		}
		g, err := s.grant(ctx, req.key.Name, req.route.Model, req.rid, t, lease.NodeID, lease.Generation)
		if err != nil {
			lease.Release()
			return nil, http.StatusServiceUnavailable, err
		}
		tn, err := s.reg.OpenTunnel(ctx, lease.NodeID, lease.Generation, &nodes.TunnelRequest{
			ProviderID: t.ProviderID, Method: http.MethodPost, Path: upPath, Deadline: deadline,
			Header: header, Body: bytes.NewReader(body), Slot: req.rid, Target: t.Model, Grant: g,
		})
		if err != nil {
			lease.Release()
			return nil, http.StatusServiceUnavailable, err
		}
		// The head is awaited here rather than by the relay (which reads
		// it again from the tunnel, at no cost): a Node that refused the
		// stream unopened sends the request back to admission. A refusal
		// comes within a round trip; a stream's head is awaited for the
		// keep-alive interval at most, after which the relay waits on,
		// the client's stream begun and kept alive meanwhile but for a
		// Responses stream relayed untranslated (awaitHead).
		wait := ctx
		if req.stream {
			var cancel context.CancelFunc
			wait, cancel = context.WithTimeout(ctx, req.snap.keepAlive)
			defer cancel()
		}
		if _, _, err := tn.Response(wait); notStarted(err) {
			tn.Close()
			lease.Release()
			return nil, http.StatusServiceUnavailable, err
		}
		x.tunnel = tn
		return x, 0, nil
	}
	in, opts := req.prep.run.in, req.prep.run.opts
	opts.Stream = true // a renderer streams or buffers; the provider may always stream
	g, err := s.grant(ctx, req.key.Name, req.route.Model, req.rid, t, lease.NodeID, lease.Generation)
	if err != nil {
		lease.Release()
		return nil, http.StatusServiceUnavailable, err
	}
	run, err := s.reg.StartRun(ctx, lease.NodeID, lease.Generation, &execution.RunRequest{
		RunID: req.rid, ProviderID: t.ProviderID, Adapter: pi.adapter, Target: t.Model,
		Input: in, Options: opts, Deadline: deadline, Grant: g,
	})
	if err != nil {
		lease.Release()
		return nil, http.StatusServiceUnavailable, err
	}
	// As a tunnel's head, the run's first event is awaited here (the
	// relay holds the answer for it anyway): a Node that refused the
	// stream unopened sends the request back to admission.
	if err := run.Started(ctx); notStarted(err) {
		run.Close()
		lease.Release()
		return nil, http.StatusServiceUnavailable, err
	}
	x.run = run
	return x, 0, nil
}

// needsIR reports whether a target of rt serves a through translation or a
// normalized run (so the request must be decoded).
func (snap *snapshot) needsIR(rt *Route, a api) bool {
	for _, t := range rt.Targets {
		if pi, ok := snap.providers[t.ProviderID]; ok {
			if p, _ := capability(pi, a, t); p == pathTranslate || p == pathRun {
				return true
			}
		}
	}
	return false
}

// preparation is a decoded request made ready before it is queued: enc
// holds it encoded for each OpenAI provider format a target of its route
// translates to (at encIndex), messages for Anthropic Messages (one for
// each output limit and way of thinking its targets take), run its
// conversion for a normalized run. A provider that cannot carry it is no candidate.
type preparation struct {
	enc      [modelClasses * (formatResponses + 1)]prepared
	messages []modelPrepared
	run      struct {
		done bool
		in   execution.Input
		opts execution.Options
		err  error
	}
}

// prepared is a request encoded for one provider format: its fields
// (scanned for the model, which dispatch sets to the target's), or why
// the format cannot carry it.
type prepared struct {
	done bool
	body llmapi.Fields
	err  error
}

// modelPrepared is a request encoded for Anthropic Messages to a model
// the encoder is told model of.
type modelPrepared struct {
	model llmapi.AnthropicModel
	prepared
}

// messagesModel is what the Anthropic Messages encoder is told of target
// t for r: its output limit where r sets none (0, the client's own
// whatever the target, where it sets one), whether it thinks adaptively,
// and whether the request marks its prefix for the prompt cache.
func messagesModel(r *llmapi.Request, t Target) llmapi.AnthropicModel {
	am := llmapi.AnthropicModel{Adaptive: t.adaptive(), PromptCache: !t.NoPromptCache}
	if r.MaxTokens <= 0 {
		am.MaxTokens = t.maxTokens()
	}
	return am
}

// find is where pr keeps r encoded for format f to target t: nil when it
// was not prepared. It only reads pr, so candidates may ask it from the
// pool's goroutines.
func (pr *preparation) find(r *llmapi.Request, f wireFormat, t Target) *prepared {
	if f != formatMessages {
		return &pr.enc[encIndex(f, t.class())]
	}
	am := messagesModel(r, t)
	for i := range pr.messages {
		if pr.messages[i].model == am {
			return &pr.messages[i].prepared
		}
	}
	return nil
}

// encode encodes r for format f to target t.
func encode(r *llmapi.Request, f wireFormat, t Target) ([]byte, error) {
	switch f {
	case formatChat:
		return llmapi.EncodeChatAs(r, t.Model, t.class())
	case formatResponses:
		return llmapi.EncodeResponsesAs(r, t.Model, t.class())
	}
	return llmapi.EncodeAnthropicWith(r, t.Model, messagesModel(r, t))
}

// modelClasses is how many encodings of one request a format may need:
// besides the model's name, the encoders read only the model's class
// (Target.class): one of OpenAI's reasoning models (its Chat Completions
// limit field differs, and it is sent no temperature or top_p in either
// format), one that takes no reasoning effort, one that is given its
// reasoning back in Chat Completions, or another.
const modelClasses = 4

// encIndex is where a preparation keeps the request encoded for OpenAI
// format f to a model of class c: one body for each class the format's
// encoder tells apart (modelClasses).
func encIndex(f wireFormat, c llmapi.ModelClass) int {
	i := modelClasses * int(f)
	switch {
	case c == llmapi.ClassOpenAIChat:
		i += 2
	case c == llmapi.ClassOpenAIReasoning:
		i++
	case f == formatChat && c == llmapi.ClassReasoningContent:
		i += 3
	}
	return i
}

// prepare encodes the decoded request once for each format its route's
// providers are spoken to in, and converts it for a normalized run if one
// of them runs it, so that dispatch takes only a provider that can carry
// it. Call it only with req.ir set, before dispatch.
func (req *request) prepare() {
	pr := &preparation{}
	req.prep = pr
	for _, t := range req.route.Targets {
		pi, ok := req.snap.providers[t.ProviderID]
		if !ok {
			continue
		}
		switch p, f := capability(pi, req.api, t); {
		case p == pathTranslate:
			e := pr.find(req.ir, f, t)
			if e == nil {
				pr.messages = append(pr.messages, modelPrepared{model: messagesModel(req.ir, t)})
				e = &pr.messages[len(pr.messages)-1].prepared
			}
			if e.done {
				continue
			}
			e.done = true
			var body []byte
			if body, e.err = encode(req.ir, f, t); e.err == nil {
				e.body, e.err = llmapi.Scan(body, "model")
			}
		case p == pathRun && !pr.run.done:
			pr.run.done = true
			pr.run.in, pr.run.opts, pr.run.err = llmapi.ToInput(req.ir)
		}
	}
}

// unfit says why a provider reached by path p (in format f to target t,
// when it translates) cannot carry the request, or nil when it can.
func (req *request) unfit(p dispatchPath, f wireFormat, t Target) error {
	switch {
	case p == pathTunnel:
		return nil
	case p == pathNone:
		return errNoPath
	case req.irErr != nil:
		return req.irErr
	case req.prep == nil:
		return errUnprepared
	case p == pathTranslate:
		if e := req.prep.find(req.ir, f, t); e != nil && e.done {
			return e.err
		}
	case p == pathRun && req.prep.run.done:
		return req.prep.run.err
	}
	return errUnprepared
}

var (
	errNoPath     = errors.New("edge: the provider does not serve this API")
	errUnprepared = errors.New("edge: the request was not prepared for this provider")
)

// unservable says why no provider of the route can carry the request,
// whatever is online: the first one's reason. It is nil when one can, or
// when the route names none that serves this API at all (that is no
// candidate, for the pool to refuse).
func (req *request) unservable() error {
	var first error
	for _, t := range req.route.Targets {
		pi, ok := req.snap.providers[t.ProviderID]
		if !ok {
			continue
		}
		p, f := capability(pi, req.api, t)
		if p == pathNone {
			continue
		}
		err := req.unfit(p, f, t)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// chargeEstimate charges what an answer's booked usage leaves out, by
// estimate, so that no answer escapes its key's TokensPerMinute:
//   - an answer with no usage booked (a command-line provider, which
//     reports none; a stream cut short before its usage chunk; a provider
//     that reports none, or an impossible count) is charged its input, by
//     EstimateTokens of the request body, and its output;
//   - a stream cut short after a usage snapshot (Anthropic's
//     message_start, a chunk of continuous usage stats) is charged the
//     output estimated beyond the snapshot's.
//
// The output is estimated as the relay counted it: text bytes / 4, rounded
// up, where the Edge decoded the answer; one token per streamed delta
// event (deltaEvent), or body bytes / 4, where it passed the provider's
// answer through. The estimate goes to the key's token budget and to
// Usage.EstimatedTokens only: the reported token counts and their metrics
// stay the providers'.
func (s *Server) chargeEstimate(req *request) {
	var n int64
	switch {
	case !req.answered:
		return
	case req.usage == nil:
		n = int64(EstimateTokens(req.body)) + req.estOut
	case req.cut:
		n = req.estOut - req.usage.OutputTokens
	}
	if n <= 0 {
		return
	}
	req.estimated = n
	s.usage.estimated(req.key.Name, n)
	s.limits.spend(req.key, n)
}

// tunnelBody rewrites only the model (a byte splice, no re-encode), for a
// streamed chat asks the upstream for usage, and leaves out of a
// Responses request the reasoning items the Edge sealed for Anthropic and
// opens the compactions it made into their summaries
// (llmapi.UnsealResponses), out of an Anthropic one the thinking that
// holds an OpenAI model's state (llmapi.DropForeignThinking) and, where
// dropBilling says so (ProviderSpec.BillingHeader), Claude Code's billing
// header (llmapi.DropBillingHeader); a body that holds none is not
// re-encoded.
//
// By default the billing header stays in a request to a hosted API: it
// may be Anthropic's, which reads it. Any other Anthropic-format server, a
// local one above all, would only see a prompt whose first line changes
// with every request, and prefill it all again.
func tunnelBody(req *request, upstreamModel string, dropBilling bool) ([]byte, error) {
	body := req.fields.Splice("model", llmapi.Quote(upstreamModel))
	switch req.api {
	case apiResponses, apiCompact:
		// Thinking the Edge sealed for the client when an Anthropic
		// provider answered it is for Anthropic only; a compaction the
		// Edge made is its summary, to any provider.
		return llmapi.UnsealResponses(body)
	case apiMessages:
		// And an OpenAI reasoning model's state, given to the client as
		// a thinking block's signature, is for OpenAI only.
		body, err := llmapi.DropForeignThinking(body)
		if err != nil || !dropBilling {
			return body, err
		}
		return llmapi.DropBillingHeader(body)
	}
	if req.api != apiChat || !req.stream || req.includeUsage {
		return body, nil
	}
	f, err := llmapi.Scan(body, "stream_options")
	if err != nil {
		return nil, err
	}
	// The client's other members stay as written (raw: a number is not
	// rounded through a float64).
	opts := map[string]json.RawMessage{}
	if raw := f.Raw("stream_options"); raw != nil && string(raw) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, err
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(opts)
	return f.Splice("stream_options", raw), nil
}

// keepAliveComment keeps proxies from cutting a silent stream.
var keepAliveComment = []byte(": keep-alive\n\n")

// anthropicPing keeps a silent Anthropic stream alive for its client as
// well: Anthropic's own API sends it, and a client that watches the
// stream for events, not bytes, counts it where it counts no comment.
var anthropicPing = []byte(llmapi.AnthropicPing)

// keepAliveFor is what a silent stream relayed untranslated to a client
// of a is sent: Anthropic's ping, a comment otherwise (Chat Completions
// has no event that says nothing; a Responses stream's keep-alive is a
// response.in_progress of its response, once created: see
// createdResponse.heartbeat and the renderer's Heartbeat).
func keepAliveFor(a api) []byte {
	if a == apiMessages {
		return anthropicPing
	}
	return keepAliveComment
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// tunnelHeader is the header of every tunnelled request (the Node adds its
// credential); it is shared, so it is cloned before any change.
var tunnelHeader = http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}}

// requestKeys and usageKeys are the top-level keys the Edge reads from a
// request body and from a usage object.
var (
	requestKeys = []string{"model", "stream", "stream_options", "previous_response_id"}
	// usageKeys are the counts of a usage object: Chat Completions'
	// (prompt, completion), the Responses and Anthropic APIs' (input,
	// output), and Anthropic's cache reads and writes, which its
	// input_tokens leaves out; and the details objects in which Chat
	// Completions and Responses say how much of their input the cache
	// held (usageDetailKeys).
	usageKeys = []string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
		"cache_read_input_tokens", "cache_creation_input_tokens", "prompt_tokens_details", "input_tokens_details"}
	usageDetailKeys = []string{"cached_tokens"}
)

// readUsage reads a whole answer's usage object, of any of the three
// generation APIs. Input is every prompt token the provider processed, as
// the adapters count it: Chat Completions' prompt_tokens and the
// Responses API's input_tokens already hold the cached ones, and an
// Anthropic answer's input is its input_tokens plus its cache reads and
// writes.
func readUsage(raw []byte) *execution.Usage {
	f, err := llmapi.Scan(raw, usageKeys...)
	if err != nil {
		return nil
	}
	var n [6]int64
	for i, k := range usageKeys[:len(n)] {
		if n[i], err = usageCount(f.Raw(k)); err != nil {
			return nil
		}
	}
	// Cached input: Anthropic's cache reads, or what Chat Completions'
	// prompt_tokens_details or the Responses API's input_tokens_details
	// count as cached_tokens (part of their input already).
	cached := n[4]
	for _, k := range usageKeys[len(n):] {
		d := f.Raw(k)
		if len(d) == 0 || d[0] != '{' {
			continue // absent or null; anything else is not a count to book
		}
		df, err := llmapi.Scan(d, usageDetailKeys...)
		if err != nil {
			return nil
		}
		c, err := usageCount(df.Raw("cached_tokens"))
		if err != nil {
			return nil
		}
		cached = llmapi.SumTokens(cached, c)
	}
	in := llmapi.SumTokens(n[0], n[2], n[4], n[5])
	// A cache cannot have held more than the input was: a count beyond is
	// the provider's mistake, and books no more than the input.
	return &execution.Usage{InputTokens: in, OutputTokens: llmapi.SumTokens(n[1], n[3]), CachedInputTokens: min(cached, max(in, 0))}
}

// usageCount is a usage object's count v: 0 when it is absent or null.
func usageCount(v []byte) (int64, error) {
	if v == nil || string(v) == "null" {
		return 0, nil
	}
	return strconv.ParseInt(string(v), 10, 64)
}

// readRequestBody reads r's body, at most limit bytes, before ctx's
// deadline: the request timeout bounds the upload too. A body sent with
// gzip or deflate (Content-Encoding) is decoded, and limit bounds what it
// decodes to as well. When it cannot, it answers the client itself (413;
// 415 for another content coding; 400 for a body that does not decode;
// 408 once the deadline passed) and reports false; a client that went
// away gets nothing.
func readRequestBody(ctx context.Context, w http.ResponseWriter, r *http.Request, limit int64, a api) ([]byte, bool) {
	coding, err := contentCoding(r.Header.Values("Content-Encoding"))
	if err != nil {
		fail(w, a, http.StatusUnsupportedMediaType, "invalid_request", "The request body's "+err.Error()+": send it uncompressed, or with gzip or deflate.", "unsupported_content_encoding")
		return nil, false
	}
	stop := context.AfterFunc(ctx, func() { http.NewResponseController(w).SetReadDeadline(aLongTimeAgo) })
	body, err := readBody(w, r, limit)
	stop()
	if err == nil && coding != "" {
		body, err = decodeBody(coding, body, limit)
	}
	if err == nil {
		return body, true
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		fail(w, a, http.StatusRequestEntityTooLarge, "invalid_request", fmt.Sprintf("Request body larger than %d bytes.", limit), "request_too_large")
	case errors.Is(err, errCorruptBody):
		fail(w, a, http.StatusBadRequest, "invalid_request", "The request body does not decode as its Content-Encoding says.", nil)
	case errors.Is(err, os.ErrDeadlineExceeded) && errors.Is(ctx.Err(), context.DeadlineExceeded):
		fail(w, a, http.StatusRequestTimeout, "timeout", "The request body did not all arrive within the request timeout.", nil)
	}
	return nil, false
}

// aLongTimeAgo is a deadline already passed, to end a blocked read.
var aLongTimeAgo = time.Unix(1, 0)

// bodyReserve bounds what readBody sets aside for a body on the word of
// its Content-Length alone; beyond it the buffer grows as bytes arrive.
const bodyReserve = 256 << 10

// readBody reads a request body of at most limit bytes (a larger one fails
// with *http.MaxBytesError). A declared Content-Length up to bodyReserve
// sizes the buffer once instead of growing it; a larger one is not taken
// on trust, so that a client cannot make the Edge hold a maximum body for
// a stalled upload of a few bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	n := r.ContentLength
	if n > 0 && n <= min(limit, bodyReserve) {
		b := make([]byte, n)
		if _, err := io.ReadFull(body, b); err != nil {
			return nil, err
		}
		// The declared length is the body's: net/http ends it there.
		// Closed once read, net/http has nothing left to drain when the
		// answer's head is written (it drains an open body, allocating
		// to do so, even one already at its end).
		r.Body.Close()
		return b, nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, min(max(n, 512), bodyReserve)))
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, err
	}
	r.Body.Close()
	return buf.Bytes(), nil
}

// anthropicHeaders returns the Anthropic headers of a client's request
// that travel to an Anthropic provider (Anthropic-Version, 2023-06-01 when
// the client sent none, and Anthropic-Beta, which changes what a request
// may hold), or answers 400 and reports false for one that cannot travel.
func anthropicHeaders(w http.ResponseWriter, r *http.Request) (http.Header, bool) {
	out := http.Header{}
	for _, h := range []string{"Anthropic-Version", "Anthropic-Beta"} {
		v := r.Header.Values(h)
		for _, one := range v {
			// They travel to the provider as they came, in protobuf
			// strings: one that is not UTF-8 (or would be dropped on the
			// way) is refused here, not lost or sent as a failure.
			if !tunnelhdr.ValueOK(one) {
				fail(w, apiMessages, http.StatusBadRequest, "invalid_request", fmt.Sprintf("The %s header is not a valid value (UTF-8, at most 4 KiB, one line).", h), nil)
				return nil, false
			}
		}
		if len(v) > 0 {
			out[h] = v
		}
	}
	if out.Get("Anthropic-Version") == "" {
		out.Set("Anthropic-Version", "2023-06-01")
	}
	return out, true
}

// ImageTokens is the most EstimateTokens counts for an image sent inline.
const ImageTokens = llmapi.ImageTokens

// EstimateTokens is the Edge's cheap prompt-size rule, used for
// long-context admission, for count_tokens where no provider counts, and
// for a key's TokensPerMinute where no provider reported usage: the
// request body's bytes divided by 4, rounded up, except that an image
// sent inline in base64 (a data URL, or Anthropic's base64 source) counts
// at most ImageTokens (a screenshot's base64 runs to megabytes; what it
// costs a model does not grow with them). It runs no tokenizer and
// decodes no JSON; other inline files (a PDF) count their bytes.
func EstimateTokens(body []byte) int { return llmapi.EstimateTokens(body) }
