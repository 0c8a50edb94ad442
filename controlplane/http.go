package controlplane

import (
	"bytes"
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/iop-dev/iop/internal/httpmux"
	"github.com/iop-dev/iop/internal/sse"
	"github.com/iop-dev/iop/wire/iopv1"
)

//go:embed ui
var ui embed.FS

// Handler returns the operator surfaces: the status page at / and the JSON
// API under /api/. Every API route but login requires an operator (see
// operator.go); state-changing requests made with a browser's ambient
// credentials also need the CSRF token. Mount it on an HTTPS server in
// production; with Config.OperatorMTLS that server may require client
// certificates.
//
//	GET  /api/session                  the signed-in operator and CSRF token
//	POST /api/login                    {"token": ...}: start a page session
//	POST /api/logout                   end it
//	GET  /api/edges[?nodes=1]          every Edge (with Nodes when asked)
//	GET  /api/edges/{id}[?refresh=1]   one Edge with Nodes and providers
//	POST /api/edges/{id}/commands      run a command; SSE with Accept: text/event-stream
//	GET  /api/events                   recent events
//	GET  /api/events/stream            live events (SSE)
//
// A query may hold only the flags shown, once each, as 1 or 0 (or true or
// false); any other parameter or value is refused with 400 invalid_query.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	// api holds the API's patterns, so that a known route asked with
	// another method gets 405 and not 404.
	api := http.NewServeMux()
	// handle serves an API route whose query may hold only the flags
	// named (onlyFlags).
	handle := func(pattern string, h http.HandlerFunc, flags ...string) {
		h = onlyFlags(h, flags...)
		mux.HandleFunc(pattern, h)
		api.HandleFunc(pattern, h)
	}
	mux.HandleFunc("GET /{$}", h.static("ui/index.html", "text/html; charset=utf-8"))
	mux.HandleFunc("GET /app.js", h.static("ui/app.js", "text/javascript; charset=utf-8"))
	mux.HandleFunc("GET /style.css", h.static("ui/style.css", "text/css; charset=utf-8"))
	handle("POST /api/login", h.login)
	handle("GET /api/session", h.auth(false, h.session))
	handle("POST /api/logout", h.auth(true, h.logout))
	handle("GET /api/edges", h.auth(false, h.listEdges), "nodes")
	handle("GET /api/edges/{id}", h.auth(false, h.getEdge), "refresh")
	handle("POST /api/edges/{id}/commands", h.auth(true, h.postCommand))
	handle("GET /api/events", h.auth(false, h.recentEvents))
	handle("GET /api/events/stream", h.auth(false, h.streamEvents))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if allow := httpmux.Allowed(api, r); allow != "" {
			w.Header().Set("Allow", allow)
			apiError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+allow)
			return
		}
		apiError(w, http.StatusNotFound, "not_found", "no such operator API route")
	})
	return securityHeaders(mux)
}

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (h *Hub) static(name, ctype string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := ui.ReadFile(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ctype)
		w.Write(b)
	}
}

func apiError(w http.ResponseWriter, status int, code, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": message}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

type principalKey struct{}

// auth wraps a handler with operator authentication and, for
// state-changing routes, the CSRF check.
func (h *Hub) auth(changes bool, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := h.ops.authenticate(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="iop-hub"`)
			apiError(w, http.StatusUnauthorized, "unauthenticated", "sign in: a bearer token, the page session, or a client certificate")
			return
		}
		if changes && !csrfOK(r, p) {
			apiError(w, http.StatusForbidden, "csrf", "this request needs the X-CSRF-Token of your session and a same-origin request")
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

// decodeJSON reads a bounded JSON object body with no unknown fields.
func decodeJSON(w http.ResponseWriter, r *http.Request, limit int64, v any) bool {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		apiError(w, http.StatusUnsupportedMediaType, "content_type", "the body must be application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_body", "invalid JSON body: "+err.Error())
		return false
	}
	// Only white space may follow: another value, or a stray "}" or
	// "]" (which More would not see), is refused.
	if _, err := dec.Token(); err != io.EOF {
		apiError(w, http.StatusBadRequest, "invalid_body", "one JSON object expected")
		return false
	}
	return true
}

func (h *Hub) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		apiError(w, http.StatusForbidden, "csrf", "cross-site sign-in refused")
		return
	}
	var body struct {
		Token string `json:"token"`
	}
	if !decodeJSON(w, r, 4<<10, &body) {
		return
	}
	id, s, ok := h.ops.login(body.Token)
	if !ok {
		h.log.Warn("operator sign-in refused", "remote", r.RemoteAddr)
		apiError(w, http.StatusUnauthorized, "unauthenticated", "unknown token")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: int(sessionTTL.Seconds())})
	h.log.Info("operator signed in", "operator", s.name)
	writeJSON(w, http.StatusOK, map[string]string{"operator": s.name, "csrf": s.csrf})
}

func (h *Hub) session(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	out := map[string]string{"operator": p.name}
	if p.ambient {
		out["csrf"] = p.csrf
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Hub) logout(w http.ResponseWriter, r *http.Request) {
	h.ops.logout(principalOf(r))
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	writeJSON(w, http.StatusOK, map[string]bool{"signed_out": true})
}

// edgeSummary is an Edge in the list, with its Nodes when asked.
type edgeSummary struct {
	EdgeView
	NodeCount   int `json:"node_count"`
	NodesOnline int `json:"nodes_online"`
	InFlight    int `json:"in_flight"`
	Capacity    int `json:"capacity"`
}

func summarize(v EdgeView, withNodes bool) edgeSummary {
	s := edgeSummary{EdgeView: v, NodeCount: len(v.Nodes)}
	for _, n := range v.Nodes {
		if n.Connected {
			s.NodesOnline++
		}
		for _, p := range n.Providers {
			s.InFlight += p.InFlight
			s.Capacity += p.Capacity
		}
	}
	if !withNodes {
		s.Nodes = nil
	}
	return s
}

// onlyFlags wraps an API handler so that its query may hold only the
// boolean flags named, each at most once, with a value strconv.ParseBool
// takes ("1", "0", "true", "false", ...) or none (true). Anything else (an
// unknown or repeated parameter, another value) is refused with a 400
// that names it: a mistyped flag must not silently read as false. The
// handler reads its flags with queryFlag.
func onlyFlags(next http.HandlerFunc, names ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			apiError(w, http.StatusBadRequest, "invalid_query", "malformed query string")
			return
		}
		for k, vs := range q {
			switch {
			case !slices.Contains(names, k):
				msg := fmt.Sprintf("unknown query parameter %.64q", k)
				if len(names) > 0 {
					msg += "; this route takes " + strings.Join(names, ", ")
				}
				apiError(w, http.StatusBadRequest, "invalid_query", msg)
				return
			case len(vs) > 1:
				apiError(w, http.StatusBadRequest, "invalid_query", "query parameter "+k+" given more than once")
				return
			}
			if _, err := parseFlag(vs[0]); err != nil {
				apiError(w, http.StatusBadRequest, "invalid_query", fmt.Sprintf("query parameter %s must be 1 or 0 (true or false), not %.64q", k, vs[0]))
				return
			}
		}
		next(w, r)
	}
}

func parseFlag(v string) (bool, error) {
	if v == "" {
		return true, nil
	}
	return strconv.ParseBool(v)
}

// queryFlag reads a query flag onlyFlags has checked: false when absent.
func queryFlag(r *http.Request, name string) bool {
	vs, ok := r.URL.Query()[name]
	if !ok {
		return false
	}
	on, _ := parseFlag(vs[0])
	return on
}

func (h *Hub) listEdges(w http.ResponseWriter, r *http.Request) {
	withNodes := queryFlag(r, "nodes")
	edges := h.Edges()
	out := make([]edgeSummary, 0, len(edges))
	for _, e := range edges {
		out = append(out, summarize(e, withNodes))
	}
	writeJSON(w, http.StatusOK, map[string]any{"edges": out})
}

func (h *Hub) getEdge(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var v EdgeView
	var err error
	if queryFlag(r, "refresh") {
		v, err = h.Refresh(r.Context(), id)
	} else {
		var ok bool
		if v, ok = h.Edge(id); !ok {
			err = ErrUnknownEdge
		}
	}
	switch {
	case errors.Is(err, ErrUnknownEdge):
		apiError(w, http.StatusNotFound, "not_found", "no such edge")
	case errors.Is(err, ErrEdgeOffline):
		apiError(w, http.StatusConflict, "edge_offline", "the edge is not connected; its last known view is at GET /api/edges/"+id)
	case err != nil:
		apiError(w, http.StatusBadGateway, "edge_status", "the edge did not answer a status")
	default:
		writeJSON(w, http.StatusOK, summarize(v, true))
	}
}

func (h *Hub) recentEvents(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"events": h.RecentEvents()})
}

// sseStart begins an event stream, or answers 500 when the server's
// writer cannot flush. It flushes through http.ResponseController, so a
// middleware's writer that offers Flush only by Unwrap still streams.
func sseStart(w http.ResponseWriter) (*http.ResponseController, bool) {
	if !canFlush(w) {
		apiError(w, http.StatusInternalServerError, "streaming", "this server cannot stream")
		return nil, false
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, "retry: 2000\n\n")
	f := http.NewResponseController(w)
	f.Flush()
	return f, true
}

// canFlush reports whether w, or a writer it unwraps to, can flush, as
// http.ResponseController's Flush looks for it (FlushError or Flush).
func canFlush(w http.ResponseWriter) bool {
	for {
		switch w.(type) {
		case interface{ FlushError() error }, http.Flusher:
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

func sseEvent(w http.ResponseWriter, f *http.ResponseController, typ string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := w.Write(sse.AppendEvent(nil, typ, b)); err != nil {
		return err
	}
	return f.Flush()
}

// streamEvents streams the Hub's events for as long as the client stays
// and its credential still signs it in (serveStream).
func (h *Hub) streamEvents(w http.ResponseWriter, r *http.Request) {
	sub := h.Subscribe()
	defer sub.Close()
	f, ok := sseStart(w)
	if !ok {
		return
	}
	h.serveStream(w, f, r, func(ctx context.Context) (func() error, error) {
		ev, err := sub.Next(ctx)
		switch {
		case errors.Is(err, ErrResync):
			return func() error {
				return sseEvent(w, f, "resync", map[string]string{"note": "events were dropped; re-read /api/edges"})
			}, nil
		case err != nil:
			return nil, err
		}
		return func() error { return sseEvent(w, f, string(ev.Kind), ev) }, nil
	})
}

// errStreamEnd is what a stream's send returns after its last event.
var errStreamEnd = errors.New("controlplane: stream ended")

// serveStream runs an operator's event stream (the Hub's events, a
// command's phases) for as long as the client stays and its credential
// still signs it in: a stream whose session ends (sign-out, expiry), whose
// operator a reload removes or gives another token, or whose certificate
// expires ends at once, before anything else is written. next waits for
// the stream's next item and returns how to send it; it returns ctx's
// error when ctx ends first, and any other error to end the stream. ctx
// ends at the next keep-alive (a comment that keeps proxies from cutting
// a silent stream), at the certificate's end, and at any change to the
// operators. send's error ends the stream (errStreamEnd after a last
// event).
func (h *Hub) serveStream(w io.Writer, f *http.ResponseController, r *http.Request, next func(ctx context.Context) (send func() error, err error)) {
	p := principalOf(r)
	for {
		wait := cmp.Or(h.cfg.KeepAlive, DefaultKeepAlive)
		if !p.certEnd.IsZero() {
			wait = min(wait, time.Until(p.certEnd)) // wake when it expires
		}
		// A change to the operators cancels the wait (the timeout ends it
		// with DeadlineExceeded instead). Watched before the check, so
		// that no change between the two goes unseen.
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		stop := h.ops.watch(cancel)
		if !h.ops.valid(p) {
			stop()
			cancel()
			return
		}
		send, err := next(ctx)
		stop()
		woken := errors.Is(ctx.Err(), context.Canceled) && r.Context().Err() == nil
		timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded) && r.Context().Err() == nil
		cancel()
		if woken && !h.ops.valid(p) {
			return // not even an item that came with the change
		}
		switch {
		case err != nil && woken:
			continue // the operators changed, not this credential
		case err != nil && timedOut:
			if _, err = io.WriteString(w, ": keep-alive\n\n"); err == nil {
				err = f.Flush()
			}
		case err != nil:
			return
		default:
			err = send()
		}
		if err != nil {
			return
		}
	}
}

// commandBody is the operator's command.
type commandBody struct {
	Operation  string            `json:"operation"`
	NodeID     string            `json:"node_id"`
	ProviderID string            `json:"provider_id"`
	Args       map[string]string `json:"args"`
}

func rejectionStatus(r Rejection) int {
	switch r {
	case RejectNotFound:
		return http.StatusNotFound
	case RejectFailedPrecondition:
		return http.StatusConflict
	case RejectUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

func (h *Hub) postCommand(w http.ResponseWriter, r *http.Request) {
	var body commandBody
	if !decodeJSON(w, r, 16<<10, &body) {
		return
	}
	edgeID, p := r.PathValue("id"), principalOf(r)
	h.log.Info("operator command", "operator", p.name, "edge", edgeID, "operation", body.Operation, "node", body.NodeID, "provider", body.ProviderID)
	run, err := h.Command(r.Context(), edgeID, Command{Operation: body.Operation, NodeID: body.NodeID, ProviderID: body.ProviderID, Args: body.Args})
	var ce *CommandError
	switch {
	case errors.As(err, &ce):
		writeJSON(w, rejectionStatus(ce.Rejection), map[string]any{"accepted": false, "rejection": ce.Rejection.String(), "message": ce.Message})
		return
	case errors.Is(err, ErrUnknownEdge):
		apiError(w, http.StatusNotFound, "not_found", "no such edge")
		return
	case errors.Is(err, ErrEdgeOffline):
		apiError(w, http.StatusConflict, "edge_offline", "the edge is not connected")
		return
	case err != nil:
		apiError(w, http.StatusBadGateway, "edge_command", "the edge did not answer the command")
		return
	}
	defer run.Close()
	if !run.Accepted {
		writeJSON(w, rejectionStatus(run.Rejection), map[string]any{"command_id": run.ID, "accepted": false, "rejection": run.Rejection.String(), "message": run.Message})
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		f, ok := sseStart(w)
		if !ok {
			return
		}
		if sseEvent(w, f, "accepted", map[string]any{"command_id": run.ID, "accepted": true}) != nil {
			return
		}
		// The phases follow as a stream of their own: kept alive through a
		// long silent drain, and ended with the operator's credential (as
		// when the client leaves, the Edge stops following the command and
		// keeps what it changed: a drained node stays draining).
		h.serveStream(w, f, r, func(ctx context.Context) (func() error, error) {
			ev, err := run.Next(ctx)
			switch {
			case err == io.EOF || err != nil && ctx.Err() != nil:
				return nil, err
			case err != nil:
				return func() error {
					sseEvent(w, f, "error", map[string]string{"message": "the edge's answer broke off"})
					return errStreamEnd
				}, nil
			}
			return func() error { return sseEvent(w, f, "phase", phaseJSON(ev)) }, nil
		})
		return
	}
	events, err := run.Wait(r.Context())
	out := map[string]any{"command_id": run.ID, "accepted": true}
	list := make([]map[string]any, 0, len(events))
	for _, ev := range events {
		list = append(list, phaseJSON(ev))
	}
	out["events"] = list
	switch {
	case err != nil:
		out["outcome"] = "broken"
	case len(events) > 0:
		out["outcome"] = string(events[len(events)-1].Phase)
	}
	writeJSON(w, http.StatusOK, out)
}

// phaseJSON renders a phase, with a node command's result as JSON.
func phaseJSON(ev CommandEvent) map[string]any {
	m := map[string]any{"seq": ev.Seq, "phase": ev.Phase, "time": ev.Time}
	if ev.Message != "" {
		m["message"] = ev.Message
	}
	if ev.InFlight > 0 || ev.Phase == PhaseProgress {
		m["in_flight"] = ev.InFlight
	}
	if ev.NodeResult != nil {
		m["result"] = nodeResultJSON(ev.NodeResult)
	}
	return m
}

func nodeResultJSON(res *iopv1.NodeCommandResult) map[string]any {
	out := map[string]any{"command": enumName(res.GetCommand().String(), "NODE_COMMAND_"), "ok": res.GetOk()}
	if res.GetError() != "" {
		out["error"] = res.GetError()
	}
	opts := protojson.MarshalOptions{UseProtoNames: true}
	switch v := res.GetResult().(type) {
	case *iopv1.NodeCommandResult_Capabilities:
		if b, err := opts.Marshal(v.Capabilities); err == nil {
			out["capabilities"] = json.RawMessage(b)
		}
	case *iopv1.NodeCommandResult_TransportStatus:
		if b, err := opts.Marshal(v.TransportStatus); err == nil {
			out["transport_status"] = json.RawMessage(b)
		}
	case *iopv1.NodeCommandResult_ProviderResponse:
		if b := bytes.TrimSpace(v.ProviderResponse); json.Valid(b) {
			out["provider_response"] = json.RawMessage(b)
		} else {
			out["provider_response_text"] = fmt.Sprintf("%q", b)
		}
	}
	return out
}
