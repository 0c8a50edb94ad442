package upstreamtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

func (s *Server) messages(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "messages")
	if !ok {
		return
	}
	defer s.watch(r, req)()
	sc := s.cfg.Reply(req)
	if !prelude(w, r, "messages", &sc) {
		return
	}
	id := fmt.Sprintf("msg_%d", s.nextID())
	u := usage(&sc, req)
	stop := "end_turn"
	if len(sc.ToolCalls) > 0 {
		stop = "tool_use"
	}
	if sc.StopReason != "" {
		stop = sc.StopReason
	}
	var content []any
	if len(sc.Reasoning) > 0 {
		content = append(content, map[string]any{"type": "thinking", "thinking": strings.Join(sc.Reasoning, ""), "signature": "sig-upstreamtest"})
	}
	if len(sc.Text) > 0 {
		content = append(content, map[string]any{"type": "text", "text": strings.Join(sc.Text, "")})
	}
	for _, tc := range sc.ToolCalls {
		var input any = map[string]any{}
		json.Unmarshal([]byte(tc.Arguments), &input)
		content = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": input})
	}
	usageObj := map[string]any{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": u.CachedTokens}
	if !req.Stream {
		if !firstChunk(r.Context(), &sc) {
			return
		}
		if content == nil {
			content = []any{}
		}
		req.finished.Store(true)
		writeJSON(w, map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usageObj})
		return
	}
	e := newSSE(w, r)
	start := map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model, "content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": u.InputTokens, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": u.CachedTokens}}
	if e.event("message_start", map[string]any{"type": "message_start", "message": start}) != nil {
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
			e.event("error", map[string]any{"type": "error", "error": map[string]any{"type": "api_error", "message": "scripted mid-stream error"}})
			return false
		}
		return true
	}
	ev := func(name string, v map[string]any) bool {
		v["type"] = name
		return e.event(name, v) == nil
	}
	idx := 0
	if len(sc.Reasoning) > 0 {
		if !ev("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "thinking", "thinking": "", "signature": ""}}) {
			return
		}
		for _, t := range sc.Reasoning {
			if !step() || !ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "thinking_delta", "thinking": t}}) {
				return
			}
		}
		if !ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "signature_delta", "signature": "sig-upstreamtest"}}) ||
			!ev("content_block_stop", map[string]any{"index": idx}) {
			return
		}
		idx++
	}
	if len(sc.Text) > 0 {
		if !ev("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "text", "text": ""}}) {
			return
		}
		if !ev("ping", map[string]any{}) {
			return
		}
		for _, t := range sc.Text {
			if !step() || !ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "text_delta", "text": t}}) {
				return
			}
		}
		if !ev("content_block_stop", map[string]any{"index": idx}) {
			return
		}
		idx++
	}
	for _, tc := range sc.ToolCalls {
		if !ev("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}}) {
			return
		}
		for _, frag := range argFragments(tc.Arguments, sc.ArgumentsInChunks) {
			if !step() || !ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": frag}}) {
				return
			}
		}
		if !ev("content_block_stop", map[string]any{"index": idx}) {
			return
		}
		idx++
	}
	if !ev("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": u.OutputTokens}}) {
		return
	}
	if ev("message_stop", map[string]any{}) {
		req.finished.Store(true)
	}
}

func (s *Server) countTokens(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "count_tokens")
	if !ok {
		return
	}
	writeJSON(w, map[string]any{"input_tokens": max(1, len(req.Body)/4)})
}
