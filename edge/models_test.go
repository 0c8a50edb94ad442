package edge_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/iop-dev/iop/edge"
)

// TestModelRetrieval: one model by id through both SDKs (a route's name
// may hold a slash, raw or escaped), lists in Anthropic's format for a
// request naming anthropic-version, and 404 in the client's error shape
// for an unknown model or one the key may not use.
func TestModelRetrieval(t *testing.T) {
	r := newRig(t, rigOpts{mutate: func(c *edge.Config) {
		c.Routes = append(c.Routes, edge.Route{Model: "org/model-7b", Targets: []edge.Target{{ProviderID: "local", Model: "up-model"}}})
	}})
	for _, id := range []string{"gpt-local", "org/model-7b"} {
		m, err := r.client.Models.Get(ctx(t), id)
		if err != nil || m.ID != id || m.Object != "model" {
			t.Fatalf("openai get %q: %+v %v", id, m, err)
		}
	}
	var apiErr *openai.Error
	if _, err := r.client.Models.Get(ctx(t), "nope"); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
		t.Fatalf("openai get of an unknown model: %v", err)
	}
	bob := openai.NewClient(option.WithBaseURL(r.url+"/v1/"), option.WithAPIKey(apiKey+"-bob"), option.WithMaxRetries(0))
	if _, err := bob.Models.Get(ctx(t), "gpt-local"); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("bob gets a model he may not use: %v", err)
	}
	if m, err := bob.Models.Get(ctx(t), "via-anthropic"); err != nil || m.ID != "via-anthropic" {
		t.Fatalf("bob gets his model: %+v %v", m, err)
	}
	for _, path := range []string{"/v1/models/org/model-7b", "/v1/models/org%2Fmodel-7b"} {
		status, body := r.get(t, path, map[string]string{"Authorization": "Bearer " + apiKey})
		if status != 200 || !strings.Contains(body, `"id":"org/model-7b"`) {
			t.Fatalf("%s: %d %s", path, status, body)
		}
	}

	ac := anthropic.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey(apiKey), aoption.WithMaxRetries(0))
	page, err := ac.Models.List(ctx(t), anthropic.ModelListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range page.Data {
		if m.Type != "model" || m.DisplayName != m.ID || m.Lifecycle != anthropic.ModelInfoLifecycleActive {
			t.Fatalf("anthropic list entry %s", m.RawJSON())
		}
		ids = append(ids, m.ID)
	}
	if strings.Join(ids, ",") != "gpt-local,org/model-7b,via-anthropic,via-chat,via-responses" || page.HasMore || page.FirstID != "gpt-local" || page.LastID != "via-responses" {
		t.Fatalf("anthropic list: %s", page.RawJSON())
	}
	for _, id := range []string{"via-anthropic", "org/model-7b"} {
		m, err := ac.Models.Get(ctx(t), id, anthropic.ModelGetParams{})
		if err != nil || m.ID != id || m.Type != "model" {
			t.Fatalf("anthropic get %q: %+v %v", id, m, err)
		}
	}
	var aErr *anthropic.Error
	if _, err := ac.Models.Get(ctx(t), "nope", anthropic.ModelGetParams{}); !errors.As(err, &aErr) || aErr.StatusCode != 404 || !strings.Contains(aErr.RawJSON(), `"not_found_error"`) {
		t.Fatalf("anthropic get of an unknown model: %v", err)
	}
	wrong := anthropic.NewClient(aoption.WithBaseURL(r.url), aoption.WithAPIKey("sk-wrong"), aoption.WithMaxRetries(0))
	if _, err := wrong.Models.List(ctx(t), anthropic.ModelListParams{}); !errors.As(err, &aErr) || aErr.StatusCode != 401 || !strings.Contains(aErr.RawJSON(), `"authentication_error"`) {
		t.Fatalf("anthropic list with a wrong key: %v", err)
	}
}

// TestUnknownPathShape: a path the Edge does not serve gets 404 in the
// asking client's error shape, Anthropic's for a request that carries
// anthropic-version (an Anthropic SDK calling an API the Edge lacks, such
// as message batches), OpenAI's otherwise.
func TestUnknownPathShape(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, c := range []struct {
		path   string
		header map[string]string
		want   map[string]any
	}{
		{"/v1/messages/batches", map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}, map[string]any{
			"type":  "error",
			"error": map[string]any{"type": "not_found_error", "message": "Unknown path GET /v1/messages/batches"},
		}},
		{"/v1/files", map[string]string{"Authorization": "Bearer " + apiKey}, map[string]any{
			"error": map[string]any{"type": "invalid_request_error", "code": "not_found", "param": nil, "message": "Unknown path GET /v1/files"},
		}},
	} {
		status, body := r.get(t, c.path, c.header)
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); err != nil || status != 404 {
			t.Fatalf("GET %s: %d %s (%v)", c.path, status, body, err)
		}
		delete(got, "request_id")
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("GET %s: body (-want +got):\n%s", c.path, d)
		}
	}
}

// TestWrongMethod: a path the Edge serves, asked with a method it does not
// serve there, gets 405 with an Allow header in the client's error shape,
// not 404 (which says the path does not exist). Nothing reaches a
// provider.
func TestWrongMethod(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, c := range []struct {
		method, path string
		header       map[string]string
		allow        string
		want         map[string]any
	}{
		{"GET", "/v1/chat/completions", map[string]string{"Authorization": "Bearer " + apiKey}, "POST", map[string]any{
			"error": map[string]any{"type": "invalid_request_error", "code": "method_not_allowed", "param": nil, "message": "Method GET is not allowed on /v1/chat/completions; allowed: POST"},
		}},
		{"DELETE", "/v1/models/gpt-x", nil, "GET, HEAD", map[string]any{
			"error": map[string]any{"type": "invalid_request_error", "code": "method_not_allowed", "param": nil, "message": "Method DELETE is not allowed on /v1/models/gpt-x; allowed: GET, HEAD"},
		}},
		{"PUT", "/v1/messages", map[string]string{"x-api-key": apiKey, "anthropic-version": "2023-06-01"}, "POST", map[string]any{
			"type":  "error",
			"error": map[string]any{"type": "invalid_request_error", "message": "Method PUT is not allowed on /v1/messages; allowed: POST"},
		}},
		{"GET", "/v1/responses", map[string]string{"Authorization": "Bearer " + apiKey}, "POST", map[string]any{
			"error": map[string]any{"type": "invalid_request_error", "code": "method_not_allowed", "param": nil, "message": "Method GET is not allowed on /v1/responses; allowed: POST"},
		}},
		{"POST", "/healthz", nil, "GET, HEAD", map[string]any{
			"error": map[string]any{"type": "invalid_request_error", "code": "method_not_allowed", "param": nil, "message": "Method POST is not allowed on /healthz; allowed: GET, HEAD"},
		}},
	} {
		resp, b := r.do(t, c.method, c.path, "{}", c.header)
		var got map[string]any
		if err := json.Unmarshal([]byte(b), &got); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
			t.Fatalf("%s %s: %d %s (%v)", c.method, c.path, resp.StatusCode, b, err)
		}
		if a := resp.Header.Get("Allow"); a != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, a, c.allow)
		}
		delete(got, "request_id")
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("%s %s: body (-want +got):\n%s", c.method, c.path, d)
		}
	}
	for _, req := range r.upstream.Requests() {
		if req.API != "models" { // the Node's discovery and health checks
			t.Errorf("upstream saw %s %s", req.Method, req.Path)
		}
	}
}

// TestResponsesWebSocketRefused: Codex, its built-in OpenAI provider
// pointed at the Edge, asks for Responses over a WebSocket first. It is
// answered 426, which Codex reads as "use HTTP" and falls back on at
// once; the Edge serves Responses over HTTP only.
func TestResponsesWebSocketRefused(t *testing.T) {
	r := newRig(t, rigOpts{})
	resp, b := r.do(t, "GET", "/v1/responses", "", map[string]string{"Authorization": "Bearer " + apiKey,
		"Connection": "keep-alive, Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
		"OpenAI-Beta": "responses_websockets=2026-02-06"})
	var got struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(b), &got); err != nil || resp.StatusCode != http.StatusUpgradeRequired || got.Error.Code != "websocket_unsupported" ||
		!strings.Contains(got.Error.Message, "POST /v1/responses") {
		t.Fatalf("%d %s (%v)", resp.StatusCode, b, err)
	}
}
