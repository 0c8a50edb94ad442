package ollama_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/ollama"
	"github.com/iop-dev/iop/execution/upstreamtest"
)

type sink struct{ events []execution.Event }

func (s *sink) WriteEvent(e execution.Event) error {
	s.events = append(s.events, e)
	return nil
}

func setup(t *testing.T, sc upstreamtest.Script) (*upstreamtest.Server, *ollama.Adapter) {
	srv := upstreamtest.New(upstreamtest.Config{Models: []string{"llama3:latest", "qwen2:7b"}, Reply: func(*upstreamtest.Request) upstreamtest.Script { return sc }})
	url := srv.Start()
	t.Cleanup(srv.Close)
	a, err := ollama.New(ollama.Config{ID: "ollama", BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return srv, a
}

func TestRun(t *testing.T) {
	ids := map[string]bool{} // the calls' ids, across both runs
	for _, stream := range []bool{false, true} {
		srv, a := setup(t, upstreamtest.Script{Text: []string{"one", " two"}, ToolCalls: []upstreamtest.ToolCall{{Name: "f", Arguments: `{"a":1}`}}, Usage: upstreamtest.Usage{InputTokens: 5, OutputTokens: 2}})
		var s sink
		res, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "ollama", Target: "llama3:latest", Options: execution.Options{Stream: stream, MaxOutputTokens: 50},
			Input: execution.Input{Messages: []execution.Message{{Role: "user", Content: "count"}}}}, &s)
		if err != nil {
			t.Fatal(err)
		}
		var text string
		var calls int
		var usage *execution.Usage
		for _, e := range s.events {
			switch e.Kind {
			case execution.EventDelta:
				text += e.Text
			case execution.EventToolCall:
				calls++
				if e.ToolCall.Arguments != `{"a":1}` {
					t.Errorf("arguments %q", e.ToolCall.Arguments)
				}
				// Ollama sent no id: the one made up is unique.
				if !strings.HasPrefix(e.ToolCall.ID, "call_") || ids[e.ToolCall.ID] {
					t.Errorf("call id %q (ids so far %v)", e.ToolCall.ID, ids)
				}
				ids[e.ToolCall.ID] = true
			case execution.EventUsage:
				usage = e.Usage
			}
		}
		if text != "one two" || calls != 1 || res.StopReason != "tool_calls" || usage == nil || usage.InputTokens != 5 {
			t.Fatalf("stream=%v: text %q calls %d stop %q usage %+v", stream, text, calls, res.StopReason, usage)
		}
		r := srv.Requests()[0]
		var body map[string]any
		json.Unmarshal(r.Body, &body)
		if r.Path != "/api/chat" || body["stream"] != stream || body["options"].(map[string]any)["num_predict"] != float64(50) {
			t.Errorf("upstream request %s %v", r.Path, body)
		}
	}
}

func TestCommands(t *testing.T) {
	_, a := setup(t, upstreamtest.Script{})
	tags, err := a.Command(context.Background(), "tags", "")
	if err != nil {
		t.Fatal(err)
	}
	var parsed struct {
		Models []struct{ Name string } `json:"models"`
	}
	if json.Unmarshal(tags, &parsed); len(parsed.Models) != 2 {
		t.Fatalf("tags %s", tags)
	}
	for _, name := range []string{"ps", "version"} {
		if _, err := a.Command(context.Background(), name, ""); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := a.Command(context.Background(), "show", "llama3:latest"); err != nil {
		t.Errorf("show: %v", err)
	}
	for _, bad := range [][2]string{{"pull", "x"}, {"delete", "x"}, {"show", "../../etc"}, {"show", ""}, {"show", "a b"}} {
		if _, err := a.Command(context.Background(), bad[0], bad[1]); !errors.Is(err, ollama.ErrUnknownCommand) {
			t.Errorf("%v: err %v, want ErrUnknownCommand", bad, err)
		}
	}
	ids, err := a.ListModels(context.Background())
	if err != nil || !cmp.Equal(ids, []string{"llama3:latest", "qwen2:7b"}) {
		t.Fatalf("models %v %v", ids, err)
	}
	if err := a.CheckHealth(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// tunnelRec is a TunnelWriter that keeps what it is given.
type tunnelRec struct {
	status int
	header http.Header
	body   bytes.Buffer
}

func (r *tunnelRec) WriteHead(status int, h http.Header) error {
	r.status, r.header = status, h
	return nil
}

func (r *tunnelRec) Write(p []byte) (int, error) { return r.body.Write(p) }

// TestTunnel: the tunnel relays Ollama's native and OpenAI-compatible
// APIs byte for byte, and refuses every path outside Routes (model pulls,
// deletes, copies, pushes) before it reaches the server.
func TestTunnel(t *testing.T) {
	srv, a := setup(t, upstreamtest.Script{Text: []string{"hi"}})
	for _, c := range []struct{ method, path, body, api, want string }{
		{"POST", "/api/chat", `{"model":"llama3:latest","stream":false,"messages":[{"role":"user","content":"x"}]}`, "ollama_chat", `"content":"hi"`},
		{"POST", "/v1/chat/completions", `{"model":"llama3:latest","messages":[{"role":"user","content":"x"}]}`, "chat", `"content":"hi"`},
		{"GET", "/api/tags", "", "ollama_tags", `"qwen2:7b"`},
		{"GET", "/v1/models", "", "models", `"llama3:latest"`},
		// Ollama 0.13.3 and later serve Responses (ProviderSpec.APIs names it).
		{"POST", "/v1/responses", `{"model":"llama3:latest","input":"x"}`, "responses", `"text":"hi"`},
	} {
		var rec tunnelRec
		err := a.Tunnel(context.Background(), &execution.TunnelRequest{ProviderID: "ollama", Method: c.method, Path: c.path,
			Header: http.Header{"Content-Type": {"application/json"}}, Body: strings.NewReader(c.body)}, &rec)
		if err != nil || rec.status != http.StatusOK || !strings.Contains(rec.body.String(), c.want) {
			t.Errorf("%s %s: %v, status %d, body %s", c.method, c.path, err, rec.status, rec.body.String())
			continue
		}
		reqs := srv.Requests()
		if last := reqs[len(reqs)-1]; last.API != c.api || last.Path != c.path || string(last.Body) != c.body {
			t.Errorf("%s %s: upstream saw %s %s %q", c.method, c.path, last.API, last.Path, last.Body)
		}
	}
	before := len(srv.Requests())
	for _, c := range []struct{ method, path string }{
		{"POST", "/api/pull"}, {"DELETE", "/api/delete"}, {"POST", "/api/copy"}, {"POST", "/api/push"},
		{"POST", "/api/create"}, {"GET", "/api/chat"}, {"POST", "/api/chat/../pull"}, {"GET", "/v1/responses/resp_1"},
	} {
		var rec tunnelRec
		err := a.Tunnel(context.Background(), &execution.TunnelRequest{ProviderID: "ollama", Method: c.method, Path: c.path, Body: strings.NewReader(`{"model":"x"}`)}, &rec)
		var f *execution.Failure
		if !errors.As(err, &f) || f.Class != execution.FailureInvalidRequest || rec.status != 0 {
			t.Errorf("%s %s: %v, status %d", c.method, c.path, err, rec.status)
		}
	}
	if n := len(srv.Requests()); n != before {
		t.Fatalf("%d refused tunnels reached the server", n-before)
	}
}

// TestAnswerFailures: an answer the adapter cannot use ends the run with
// a classified failure and no usage.
func TestAnswerFailures(t *testing.T) {
	const line = `{"message":{"role":"assistant","content":"a"},"done":false}` + "\n"
	for _, tc := range []struct {
		name, raw, note string
	}{
		{"malformed line", line + `{"message":` + "\n", "malformed stream line"},
		{"not an object", `[1,2]` + "\n", "malformed stream line"},
		{"error line", line + `{"error":"model not found"}` + "\n", "upstream error in stream"},
		{"no done", line + line, "stream ended without done"},
		{"empty", "\n", "stream ended without done"},
		{"line beyond the bound", `{"message":{"content":"` + strings.Repeat("x", 17<<20) + `"}}` + "\n", "upstream body broken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, a := setup(t, upstreamtest.Script{Raw: tc.raw})
			var s sink
			_, err := a.Run(context.Background(), &execution.RunRequest{RunID: "r", ProviderID: "ollama", Target: "llama3:latest", Options: execution.Options{Stream: true}}, &s)
			var f *execution.Failure
			if !errors.As(err, &f) || f.Class != execution.FailureProvider || f.Message != tc.note {
				t.Fatalf("err %v, want provider: %s", err, tc.note)
			}
			for _, e := range s.events {
				if e.Kind == execution.EventUsage {
					t.Fatalf("usage written for a failed run: %+v", e.Usage)
				}
			}
		})
	}
}
