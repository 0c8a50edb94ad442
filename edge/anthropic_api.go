package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/internal/llmapi"
)

// countTokens answers POST /v1/messages/count_tokens. When a provider of
// the route speaks Anthropic and is available, the request passes through
// to it (the next such provider when a Node refused it unopened, as a
// draining one does); otherwise the answer is an estimate by the Edge's
// rule (EstimateTokens: request bytes / 4, an inline image at most
// ImageTokens), marked with the header X-IOP-Token-Count: estimate. The
// Anthropic headers travel as they do with a message (anthropicHeaders):
// a beta changes what a request may hold, so its count too.
func (s *Server) countTokens(w http.ResponseWriter, r *http.Request, rid string) {
	snap := s.snap.Load()
	key := s.authFor(w, r, snap, apiMessages)
	if key == nil {
		return
	}
	anthropic, ok := anthropicHeaders(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), snap.requestTimeout)
	defer cancel()
	body, ok := readRequestBody(ctx, w, r, snap.maxBody, apiMessages)
	if !ok {
		return
	}
	f, err := llmapi.Scan(body, "model")
	if err != nil {
		fail(w, apiMessages, http.StatusBadRequest, "invalid_request", "Request body must be a JSON object: "+err.Error(), nil)
		return
	}
	model, _ := f.String("model")
	rt := snap.routes[model]
	if rt == nil || !key.allows(model) {
		fail(w, apiMessages, http.StatusNotFound, "not_found", fmt.Sprintf("The model %q does not exist or you do not have access to it.", model), nil)
		return
	}
	for _, t := range rt.Targets {
		pi := snap.providers[t.ProviderID]
		if !pi.apis.has(apiMessages) {
			continue
		}
		gen, ok := s.reg.Available(pi.nodeID, t.ProviderID)
		if !ok {
			continue
		}
		g, err := s.grant(ctx, key.Name, model, rid, t, pi.nodeID, gen)
		if err != nil {
			continue
		}
		header := anthropic.Clone()
		header.Set("Content-Type", "application/json")
		tn, err := s.reg.OpenTunnel(ctx, pi.nodeID, gen, &nodes.TunnelRequest{
			ProviderID: t.ProviderID, Method: http.MethodPost, Path: "/v1/messages/count_tokens",
			Header: header,
			Body:   bytes.NewReader(f.Splice("model", llmapi.Quote(t.Model))), Slot: rid, Target: t.Model, Grant: g,
		})
		if notStarted(err) {
			continue // the Node never had it: the next provider may
		}
		if err != nil {
			break
		}
		status, hdr, err := tn.Response(ctx)
		if err != nil {
			tn.Close()
			if notStarted(err) {
				continue
			}
			break
		}
		defer tn.Close()
		for k, vs := range hdr {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		io.Copy(w, tn)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-IOP-Token-Count", "estimate")
	json.NewEncoder(w).Encode(map[string]int{"input_tokens": EstimateTokens(body)})
}

// getResponse answers GET /v1/responses/{id} by passing it to the provider
// that produced that response (stateful Responses features work only
// untranslated, on the same provider). Only the API key that created a
// response can read it; to any other it does not exist. While that
// provider is unavailable, or its Node refuses the read unopened (a
// draining Node), the answer is 503 with Retry-After.
func (s *Server) getResponse(w http.ResponseWriter, r *http.Request, rid string) {
	snap := s.snap.Load()
	key := s.authFor(w, r, snap, apiResponses)
	if key == nil {
		return
	}
	id := r.PathValue("id")
	node, provider, ok := s.responses.lookup(id, key.Name)
	if !ok {
		fail(w, apiResponses, http.StatusNotFound, "not_found", "No response with that id passed through this Edge.", nil)
		return
	}
	gen, ok := s.reg.Available(node, provider)
	if !ok {
		fail(w, apiResponses, http.StatusServiceUnavailable, "overloaded", "The provider that holds this response is unavailable.", nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), snap.requestTimeout)
	defer cancel()
	// A leased provider's GET is a dispatch of its own: no route, no
	// model, one lease for this request.
	g, err := s.grant(ctx, key.Name, "", rid, Target{ProviderID: provider}, node, gen)
	if err != nil {
		fail(w, apiResponses, http.StatusServiceUnavailable, "overloaded", "The provider is unavailable.", nil)
		return
	}
	tn, err := s.reg.OpenTunnel(ctx, node, gen, &nodes.TunnelRequest{ProviderID: provider, Method: http.MethodGet, Path: "/v1/responses/" + id,
		Slot: rid, Grant: g})
	if err != nil {
		fail(w, apiResponses, http.StatusServiceUnavailable, "overloaded", "The provider is unavailable.", nil)
		return
	}
	defer tn.Close()
	status, hdr, err := tn.Response(ctx)
	if notStarted(err) {
		// The Node refused it unopened (a draining one does): worth a
		// retry once the Node is back.
		fail(w, apiResponses, http.StatusServiceUnavailable, "overloaded", "The provider is unavailable.", nil)
		return
	}
	if err != nil {
		fail(w, apiResponses, http.StatusBadGateway, "api_error", "The provider could not answer.", nil)
		return
	}
	for k, vs := range hdr {
		w.Header()[k] = vs
	}
	w.WriteHeader(status)
	io.Copy(w, tn)
}

// responseIndex remembers which provider produced a Responses id, and for
// which API key, bounded to the most recent entries.
type responseIndex struct {
	mu    sync.Mutex
	byID  map[string]responseOwner
	order []string
}

type responseOwner struct{ node, provider, key string }

// maxRememberedResponses bounds the index (about 100 bytes an entry).
const maxRememberedResponses = 100_000

// remember records id for key. An id another key's response already
// holds is not taken over (held is true): the first owner keeps it, since
// a provider that hands out an id twice must not move one key's response
// to another, whose owner could then no longer reach it. An empty or
// over-long id is not remembered either.
func (x *responseIndex) remember(id, node, provider, key string) (held bool) {
	if id == "" || len(id) > 256 {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.byID == nil {
		x.byID = map[string]responseOwner{}
	}
	if old, ok := x.byID[id]; !ok {
		x.order = append(x.order, id)
	} else if old.key != key {
		return true
	}
	x.byID[id] = responseOwner{node, provider, key}
	if len(x.order) > maxRememberedResponses {
		delete(x.byID, x.order[0])
		x.order = x.order[1:]
	}
	return false
}

func (x *responseIndex) lookup(id, key string) (node, provider string, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	v, ok := x.byID[id]
	if !ok || v.key != key {
		return "", "", false
	}
	return v.node, v.provider, true
}
