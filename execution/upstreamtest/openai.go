package upstreamtest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "chat")
	if !ok {
		return
	}
	defer s.watch(r, req)()
	sc := s.cfg.Reply(req)
	if !prelude(w, r, "chat", &sc) {
		return
	}
	id := fmt.Sprintf("chatcmpl-%d", s.nextID())
	created := time.Now().Unix()
	u := usage(&sc, req)
	finish := "stop"
	if len(sc.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	if sc.StopReason != "" {
		finish = sc.StopReason
	}
	usageObj := map[string]any{
		"prompt_tokens":             u.InputTokens,
		"completion_tokens":         u.OutputTokens,
		"total_tokens":              u.InputTokens + u.OutputTokens,
		"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedTokens},
		"completion_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
	}
	if !req.Stream {
		if !firstChunk(r.Context(), &sc) {
			return
		}
		msg := map[string]any{"role": "assistant", "content": strings.Join(sc.Text, ""), "refusal": nil}
		if len(sc.Reasoning) > 0 {
			msg["reasoning_content"] = strings.Join(sc.Reasoning, "")
		}
		if len(sc.ToolCalls) > 0 {
			if len(sc.Text) == 0 {
				msg["content"] = nil
			}
			var calls []map[string]any
			for _, tc := range sc.ToolCalls {
				calls = append(calls, map[string]any{"id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": tc.openAIArguments()}})
			}
			msg["tool_calls"] = calls
		}
		req.finished.Store(true)
		writeJSON(w, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices":            []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":              usageObj,
			"system_fingerprint": "fp_upstreamtest",
		})
		return
	}
	e := newSSE(w, r)
	e.comment = sc.Comment
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"system_fingerprint": "fp_upstreamtest",
			"choices":            []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": nil}},
		}
		if req.IncludeUsage {
			c["usage"] = nil // as OpenAI sends it on every chunk but the last
		}
		return c
	}
	if !firstChunk(r.Context(), &sc) {
		return
	}
	if e.event("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil)) != nil {
		return
	}
	n := 0
	step := func(delta map[string]any) bool {
		if n > 0 && !sleep(r.Context(), sc.ChunkDelay) {
			return false
		}
		n++
		if sc.ErrorAfter > 0 && n > sc.ErrorAfter {
			e.event("", map[string]any{"error": map[string]any{"message": "scripted mid-stream error", "type": "server_error", "param": nil, "code": nil}})
			return false
		}
		if e.event("", chunk(delta, nil)) != nil {
			return false
		}
		if n == 1 && sc.Hold != nil {
			select {
			case <-sc.Hold:
			case <-r.Context().Done():
				return false
			}
		}
		return true
	}
	for _, t := range sc.Reasoning {
		if !step(map[string]any{"reasoning_content": t}) {
			return
		}
	}
	for _, t := range sc.Text {
		if !step(map[string]any{"content": t}) {
			return
		}
	}
	for i, tc := range sc.ToolCalls {
		head := map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": tc.ID, "type": "function", "function": map[string]any{"name": tc.Name, "arguments": ""}}}}
		if !step(head) {
			return
		}
		for _, frag := range argFragments(tc.openAIArguments(), sc.ArgumentsInChunks) {
			if !step(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": frag}}}}) {
				return
			}
		}
	}
	if e.event("", chunk(map[string]any{}, finish)) != nil {
		return
	}
	if req.IncludeUsage {
		c := chunk(nil, nil)
		c["choices"] = []any{}
		c["usage"] = usageObj
		if e.event("", c) != nil {
			return
		}
	}
	if e.raw("data: [DONE]\n\n") == nil {
		req.finished.Store(true)
	}
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "responses")
	if !ok {
		return
	}
	defer s.watch(r, req)()
	var state struct {
		Store    *bool    `json:"store"`
		Previous string   `json:"previous_response_id"`
		Include  []string `json:"include"`
	}
	json.Unmarshal(req.Body, &state)
	if state.Previous != "" && s.storedResponse(state.Previous) == nil {
		writeJSONStatus(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("Previous response with id '%s' not found.", state.Previous),
			"type":    "invalid_request_error", "param": "previous_response_id", "code": "previous_response_not_found"}})
		return
	}
	sc := s.cfg.Reply(req)
	if !prelude(w, r, "responses", &sc) {
		return
	}
	n := s.nextID()
	id := fmt.Sprintf("resp_%d", n)
	store := state.Store == nil || *state.Store // the API stores unless told not to
	created := time.Now().Unix()
	u := usage(&sc, req)
	usageObj := map[string]any{
		"input_tokens":          u.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CachedTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
		"total_tokens":          u.InputTokens + u.OutputTokens,
	}
	var output []any
	if len(sc.Reasoning) > 0 {
		item := map[string]any{"type": "reasoning", "id": fmt.Sprintf("rs_%d", n), "summary": []any{map[string]any{"type": "summary_text", "text": strings.Join(sc.Reasoning, "")}}}
		if slices.Contains(state.Include, "reasoning.encrypted_content") {
			// The reasoning's state, opaque to the client, as OpenAI
			// gives it to one that keeps none at the provider.
			item["encrypted_content"] = base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "upstreamtest reasoning %d", n))
		}
		output = append(output, item)
	}
	msgID := fmt.Sprintf("msg_%d", n)
	text := strings.Join(sc.Text, "")
	if len(sc.Text) > 0 {
		output = append(output, map[string]any{
			"type": "message", "id": msgID, "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
		})
	}
	for i, tc := range sc.ToolCalls {
		output = append(output, map[string]any{"type": "function_call", "id": fmt.Sprintf("fc_%d_%d", n, i), "call_id": tc.ID, "name": tc.Name, "arguments": tc.openAIArguments(), "status": "completed"})
	}
	// A stop reason ends the response incomplete, for that reason.
	final := "completed"
	var incomplete any
	if sc.StopReason != "" {
		final, incomplete = "incomplete", map[string]any{"reason": sc.StopReason}
	}
	response := func(status string, out []any, usage any) map[string]any {
		if out == nil {
			out = []any{}
		}
		r := map[string]any{"id": id, "object": "response", "created_at": created, "status": status, "model": req.Model, "output": out, "usage": usage, "error": nil, "incomplete_details": nil}
		if status == "incomplete" {
			r["incomplete_details"] = incomplete
		}
		return r
	}
	if store {
		s.storeResponse(id, response(final, output, usageObj))
	}
	if !req.Stream {
		if !firstChunk(r.Context(), &sc) {
			return
		}
		req.finished.Store(true)
		writeJSON(w, response(final, output, usageObj))
		return
	}
	e := newSSE(w, r)
	seq := 0
	ev := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		return e.event(typ, fields) == nil
	}
	if !ev("response.created", map[string]any{"response": response("in_progress", nil, nil)}) ||
		!ev("response.in_progress", map[string]any{"response": response("in_progress", nil, nil)}) {
		return
	}
	if !firstChunk(r.Context(), &sc) {
		return
	}
	chunks := 0
	step := func() bool {
		if chunks > 0 && !sleep(r.Context(), sc.ChunkDelay) {
			return false
		}
		chunks++
		if sc.ErrorAfter > 0 && chunks > sc.ErrorAfter {
			ev("error", map[string]any{"code": "server_error", "message": "scripted mid-stream error", "param": nil})
			return false
		}
		return true
	}
	idx := 0
	if len(sc.Reasoning) > 0 {
		item := output[0].(map[string]any)
		if !ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "reasoning", "id": item["id"], "summary": []any{}}}) ||
			!ev("response.reasoning_summary_part.added", map[string]any{"item_id": item["id"], "output_index": idx, "summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}}) {
			return
		}
		for _, t := range sc.Reasoning {
			if !step() || !ev("response.reasoning_summary_text.delta", map[string]any{"item_id": item["id"], "output_index": idx, "summary_index": 0, "delta": t}) {
				return
			}
		}
		summary := strings.Join(sc.Reasoning, "")
		if !ev("response.reasoning_summary_text.done", map[string]any{"item_id": item["id"], "output_index": idx, "summary_index": 0, "text": summary}) ||
			!ev("response.reasoning_summary_part.done", map[string]any{"item_id": item["id"], "output_index": idx, "summary_index": 0, "part": map[string]any{"type": "summary_text", "text": summary}}) ||
			!ev("response.output_item.done", map[string]any{"output_index": idx, "item": item}) {
			return
		}
		idx++
	}
	if len(sc.Text) > 0 {
		if !ev("response.output_item.added", map[string]any{"output_index": idx, "item": map[string]any{"type": "message", "id": msgID, "status": "in_progress", "role": "assistant", "content": []any{}}}) ||
			!ev("response.content_part.added", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}}) {
			return
		}
		for _, t := range sc.Text {
			if !step() || !ev("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "delta": t}) {
				return
			}
		}
		part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
		if !ev("response.output_text.done", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "text": text}) ||
			!ev("response.content_part.done", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "part": part}) ||
			!ev("response.output_item.done", map[string]any{"output_index": idx, "item": output[idx]}) {
			return
		}
		idx++
	}
	for _, tc := range sc.ToolCalls {
		item := output[idx].(map[string]any)
		added := map[string]any{"type": "function_call", "id": item["id"], "call_id": tc.ID, "name": tc.Name, "arguments": "", "status": "in_progress"}
		if !ev("response.output_item.added", map[string]any{"output_index": idx, "item": added}) {
			return
		}
		for _, frag := range argFragments(tc.openAIArguments(), sc.ArgumentsInChunks) {
			if !step() || !ev("response.function_call_arguments.delta", map[string]any{"item_id": item["id"], "output_index": idx, "delta": frag}) {
				return
			}
		}
		if !ev("response.function_call_arguments.done", map[string]any{"item_id": item["id"], "output_index": idx, "arguments": tc.openAIArguments()}) ||
			!ev("response.output_item.done", map[string]any{"output_index": idx, "item": item}) {
			return
		}
		idx++
	}
	if ev("response."+final, map[string]any{"response": response(final, output, usageObj)}) {
		req.finished.Store(true)
	}
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "embeddings")
	if !ok {
		return
	}
	defer s.watch(r, req)()
	sc := s.cfg.Reply(req)
	if !prelude(w, r, "embeddings", &sc) || !firstChunk(r.Context(), &sc) {
		return
	}
	var body struct {
		Input json.RawMessage `json:"input"`
	}
	json.Unmarshal(req.Body, &body)
	var inputs []string
	if json.Unmarshal(body.Input, &inputs) != nil {
		var one string
		json.Unmarshal(body.Input, &one)
		inputs = []string{one}
	}
	var data []any
	tokens := 0
	for i, in := range inputs {
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": embed(in, 16)})
		tokens += max(1, len(in)/4)
	}
	req.finished.Store(true)
	writeJSON(w, map[string]any{"object": "list", "data": data, "model": req.Model, "usage": map[string]any{"prompt_tokens": tokens, "total_tokens": tokens}})
}

// compact answers Responses' compaction as OpenAI does: the input's user
// messages, kept, and one compaction item whose encrypted content carries
// the rest (here the number of items it replaced, opaque to the client).
func (s *Server) compact(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "responses_compact")
	if !ok {
		return
	}
	defer s.watch(r, req)()
	sc := s.cfg.Reply(req)
	if !prelude(w, r, "responses", &sc) || !firstChunk(r.Context(), &sc) {
		return
	}
	var body struct {
		Input []json.RawMessage `json:"input"`
	}
	if json.Unmarshal(req.Body, &body) != nil {
		writeErr(w, "responses", http.StatusBadRequest, "invalid_request_error", "input must be a list of items")
		return
	}
	output := []any{}
	replaced := 0
	for _, it := range body.Input {
		var m struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		json.Unmarshal(it, &m)
		if (m.Type == "" || m.Type == "message") && m.Role == "user" {
			output = append(output, map[string]any{"type": "message", "role": "user", "content": m.Content})
			continue
		}
		replaced++
	}
	id := s.nextID()
	output = append(output, map[string]any{"type": "compaction", "id": fmt.Sprintf("cmp_%d", id),
		"encrypted_content": base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "upstreamtest compaction of %d items", replaced))})
	req.finished.Store(true)
	in := max(1, len(req.Body)/4)
	writeJSON(w, map[string]any{"id": fmt.Sprintf("resp_%d", id), "object": "response.compaction", "created_at": 1700000000,
		"output": output, "usage": map[string]any{"input_tokens": in, "output_tokens": 32, "total_tokens": in + 32}})
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.record(w, r, "models"); !ok {
		return
	}
	var data []any
	for _, m := range s.cfg.Models {
		data = append(data, map[string]any{"id": m, "object": "model", "created": 1700000000, "owned_by": "upstreamtest"})
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// getResponse serves GET /v1/responses/{id}: a stored response, or the
// API's 404.
func (s *Server) getResponse(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "get_response")
	if !ok {
		return
	}
	req.finished.Store(true)
	id := r.PathValue("id")
	resp := s.storedResponse(id)
	if resp == nil {
		writeJSONStatus(w, http.StatusNotFound, map[string]any{"error": map[string]any{
			"message": fmt.Sprintf("Response with id '%s' not found.", id), "type": "invalid_request_error", "param": nil, "code": nil}})
		return
	}
	writeJSON(w, resp)
}

func (s *Server) storeResponse(id string, resp map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stored == nil {
		s.stored = map[string]map[string]any{}
	}
	if len(s.stored) >= s.maxRecorded() {
		for k := range s.stored { // forget one: the fake keeps a bounded set
			delete(s.stored, k)
			break
		}
	}
	s.stored[id] = resp
}

func (s *Server) storedResponse(id string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored[id]
}
