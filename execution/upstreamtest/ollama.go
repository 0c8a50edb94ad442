package upstreamtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

func (s *Server) ollamaChat(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "ollama_chat")
	if !ok {
		return
	}
	defer s.watch(r, req)()
	sc := s.cfg.Reply(req)
	if !prelude(w, r, "ollama_chat", &sc) {
		return
	}
	u := usage(&sc, req)
	now := func() string { return time.Now().UTC().Format(time.RFC3339Nano) }
	reason := "stop"
	if sc.StopReason != "" {
		reason = sc.StopReason
	}
	var calls []any
	for _, tc := range sc.ToolCalls {
		var args any = map[string]any{}
		json.Unmarshal([]byte(tc.Arguments), &args)
		calls = append(calls, map[string]any{"function": map[string]any{"name": tc.Name, "arguments": args}})
	}
	final := func(content string) map[string]any {
		msg := map[string]any{"role": "assistant", "content": content}
		if calls != nil {
			msg["tool_calls"] = calls
		}
		return map[string]any{
			"model": req.Model, "created_at": now(), "message": msg, "done": true, "done_reason": reason,
			"total_duration": 1000000, "load_duration": 1000, "prompt_eval_count": u.InputTokens, "prompt_eval_duration": 1000,
			"eval_count": u.OutputTokens, "eval_duration": 1000,
		}
	}
	if !req.Stream {
		if !firstChunk(r.Context(), &sc) {
			return
		}
		req.finished.Store(true)
		writeJSON(w, final(strings.Join(sc.Text, "")))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	line := func(v any) bool {
		if r.Context().Err() != nil {
			return false
		}
		b, _ := json.Marshal(v)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return false
		}
		if f != nil {
			f.Flush()
		}
		return true
	}
	if f != nil {
		f.Flush()
	}
	if !firstChunk(r.Context(), &sc) {
		return
	}
	for i, t := range sc.Text {
		if i > 0 && !sleep(r.Context(), sc.ChunkDelay) {
			return
		}
		if sc.ErrorAfter > 0 && i >= sc.ErrorAfter {
			line(map[string]any{"error": "scripted mid-stream error"})
			return
		}
		if !line(map[string]any{"model": req.Model, "created_at": now(), "message": map[string]any{"role": "assistant", "content": t}, "done": false}) {
			return
		}
	}
	if line(final("")) {
		req.finished.Store(true)
	}
}

func (s *Server) ollamaTags(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.record(w, r, "ollama_tags"); !ok {
		return
	}
	var models []any
	for _, m := range s.cfg.Models {
		models = append(models, map[string]any{
			"name": m, "model": m, "modified_at": "2026-01-01T00:00:00Z", "size": int64(4661224676),
			"digest":  "sha256:0000000000000000000000000000000000000000000000000000000000000000",
			"details": map[string]any{"format": "gguf", "family": "llama", "parameter_size": "8.0B", "quantization_level": "Q4_0"},
		})
	}
	writeJSON(w, map[string]any{"models": models})
}

func (s *Server) ollamaPS(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.record(w, r, "ollama_ps"); !ok {
		return
	}
	var models []any
	if len(s.cfg.Models) > 0 {
		m := s.cfg.Models[0]
		models = append(models, map[string]any{"name": m, "model": m, "size": int64(5137025024), "digest": "sha256:0", "details": map[string]any{"format": "gguf"}, "expires_at": "2026-01-01T00:05:00Z", "size_vram": int64(5137025024)})
	}
	writeJSON(w, map[string]any{"models": models})
}

func (s *Server) ollamaShow(w http.ResponseWriter, r *http.Request) {
	req, ok := s.record(w, r, "ollama_show")
	if !ok {
		return
	}
	var body struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	json.Unmarshal(req.Body, &body)
	name := body.Model
	if name == "" {
		name = body.Name
	}
	found := false
	for _, m := range s.cfg.Models {
		found = found || m == name
	}
	if !found {
		writeErr(w, "ollama_show", http.StatusNotFound, "not_found", "model '"+name+"' not found")
		return
	}
	writeJSON(w, map[string]any{"modelfile": "FROM " + name, "parameters": "", "template": "{{ .Prompt }}", "details": map[string]any{"format": "gguf", "family": "llama"}, "model_info": map[string]any{"general.architecture": "llama"}})
}

func (s *Server) ollamaVersion(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.record(w, r, "ollama_version"); !ok {
		return
	}
	io.WriteString(w, `{"version":"0.5.7"}`+"\n")
}
