package agentconform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/anthropic"
	oaadapter "github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/execution/upstreamtest"
	"github.com/iop-dev/iop/node"
)

const (
	apiKey    = "sk-agent-0123456789abcdef0123456789abcdef"
	nodeToken = "node-token-0123456789abcdef0123"

	// command is what the model asks the client's shell to run, and
	// output what it prints: the command does not hold its output, so a
	// request that does holds the tool's result.
	command = "printf 'iop-tool-%s' ran > out.txt && cat out.txt"
	output  = "iop-tool-ran"
	// second is the model's other call of the tool in the same turn (a
	// parallel call), and secondOutput what it prints.
	second       = "printf 'iop-second-%s' ran"
	secondOutput = "iop-second-ran"
	answer       = "The tool said " + output + "."
	// thinking is the model's, before its tool call.
	thinking = "The user wants the check run."
	// overflow is a task the model refuses as past its context window.
	overflow = "Overflow the context."

	// codexModel is a model Codex knows and offers apply_patch to, a
	// freeform tool (its input is a patch, not JSON), which a translation
	// carries as a function with one string parameter. patchTask is a task
	// for it, patch what the model sends.
	codexModel = "gpt-5.5"
	patchTask  = "Apply the patch."
	patch      = "*** Begin Patch\n*** Add File: hello.txt\n+iop-patched\n*** End Patch\n"

	// keepAlive is the Edge's keep-alive interval. The model's first turn
	// is slow to begin (its head comes after five intervals, as a local
	// model's does after its prefill) and falls silent between chunks, so
	// every client is sent the Edge's keep-alives: before the provider's
	// head, a stream the Edge begins itself; in the stream, its format's
	// heartbeat (Anthropic's ping, Responses' response.in_progress).
	keepAlive = 50 * time.Millisecond

	// billing begins Claude Code's system prompt; no local provider may
	// be sent it (llmapi.DropBillingHeader).
	billing = "x-anthropic-billing-header"
)

// The routes, one per format the provider behind it speaks, and the API
// each one's provider is called with.
var routes = []struct{ model, api string }{
	{"via-anthropic", "messages"},
	{"via-chat", "chat"},
	{"via-responses", "responses"},
}

// TestClaudeCode: Claude Code, given a task, calls its Bash tool twice at
// once as the model asks, runs the commands, and prints the model's
// answer, through every route: relayed untranslated to an Anthropic-format
// provider, and translated to Chat Completions and to Responses. It takes
// the Edge's pings (before the provider's head and between its chunks) in
// its stride. No provider (all are local) is sent the billing line.
func TestClaudeCode(t *testing.T) {
	bin := client(t, "IOP_CLAUDE", "claude")
	g := newGateway(t)
	for _, rt := range routes {
		t.Run(rt.model, func(t *testing.T) {
			home, dir := t.TempDir(), t.TempDir()
			before := len(g.up.Requests())
			answered := g.tap.kept()
			out := run(t, bin, dir, g.claudeEnv(home, rt.model), "-p", "Run the check.", "--output-format", "json", "--allowedTools", "Bash")
			var res struct {
				IsError bool   `json:"is_error"`
				Result  string `json:"result"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.IsError || !strings.Contains(res.Result, answer) {
				t.Fatalf("Claude Code printed %s", out)
			}
			ran(t, dir)
			// The Edge's pings, past the one an Anthropic-format provider
			// sends in each of its answers.
			if sent := g.tap.since(answered); bytes.Count(sent, []byte("event: ping")) < 5 {
				t.Errorf("Claude Code was sent no keep-alive:\n%s", sent)
			}
			calls := g.calls(t, before, rt.api)
			for _, q := range calls {
				if bytes.Contains(q.Body, []byte(billing)) {
					t.Errorf("the provider was sent Claude Code's billing line: %.300s", q.Body)
				}
			}
		})
	}
}

// TestCodex: Codex, given a task, calls its shell tool twice at once as
// the model asks, runs the commands, and prints the model's answer,
// through every route: relayed untranslated to a Responses provider, and
// translated to Chat Completions and to Anthropic Messages. It takes the
// Edge's heartbeats (response.in_progress, renumbered among a relayed
// stream's events) in its stride.
func TestCodex(t *testing.T) {
	bin := client(t, "IOP_CODEX", "codex")
	g := newGateway(t)
	for _, rt := range routes {
		t.Run(rt.model, func(t *testing.T) {
			home, dir := t.TempDir(), t.TempDir()
			before := len(g.up.Requests())
			answered := g.tap.kept()
			out := run(t, bin, dir, g.codexEnv(t, home, rt.model), codexExec("Run the check.")...)
			if !strings.Contains(out, answer) {
				t.Fatalf("Codex printed %s", out)
			}
			ran(t, dir)
			// The Edge's heartbeats, past the one event of the answer's
			// start (and any of the provider's own).
			if sent := g.tap.since(answered); bytes.Count(sent, []byte("event: response.in_progress")) < 3 {
				t.Errorf("Codex was sent no heartbeat:\n%s", sent)
			}
			g.calls(t, before, rt.api)
		})
	}
}

// TestContextOverflowTold: a provider's refusal of a prompt past its
// model's context window, in vLLM's words and shape, reaches each client
// through a translated route as the client's own API would say it: Claude
// Code ends the turn for its prompt_too_long reason (in a longer
// conversation it compacts and tries again), Codex says it ran out of
// room in the model's context window. Before, Claude Code sent the same
// request again and Codex printed the error's JSON.
func TestContextOverflowTold(t *testing.T) {
	g := newGateway(t)
	t.Run("claude", func(t *testing.T) {
		bin := client(t, "IOP_CLAUDE", "claude")
		home, dir := t.TempDir(), t.TempDir()
		out, stderr, err := execute(bin, dir, g.claudeEnv(home, "via-chat"), "-p", overflow, "--output-format", "json")
		var res struct {
			TerminalReason string `json:"terminal_reason"`
		}
		if err == nil || json.Unmarshal([]byte(out), &res) != nil || res.TerminalReason != "prompt_too_long" {
			t.Errorf("Claude Code ended (%v) with %s\nstderr:\n%s", err, out, stderr)
		}
	})
	t.Run("codex", func(t *testing.T) {
		bin := client(t, "IOP_CODEX", "codex")
		home, dir := t.TempDir(), t.TempDir()
		out, stderr, err := execute(bin, dir, g.codexEnv(t, home, "via-chat"), codexExec(overflow)...)
		if err == nil || !strings.Contains(stderr, "context window") {
			t.Errorf("Codex ended (%v) with %s\nstderr:\n%s", err, out, stderr)
		}
	})
}

// TestCodexApplyPatch: Codex, offered its apply_patch tool (a freeform
// tool: its input is the patch itself) through a route translated to Chat
// Completions, where it is a function with one string parameter, is
// called with a patch as the freeform call it expects, applies it, and
// sends back its result.
func TestCodexApplyPatch(t *testing.T) {
	bin := client(t, "IOP_CODEX", "codex")
	g := newGateway(t)
	home, dir := t.TempDir(), t.TempDir()
	before := len(g.up.Requests())
	out := run(t, bin, dir, g.codexEnv(t, home, codexModel), codexExec(patchTask)...)
	if !strings.Contains(out, "Patched.") {
		t.Fatalf("Codex printed %s", out)
	}
	if sent := g.tap.since(0); !bytes.Contains(sent, []byte(`"type":"custom_tool_call"`)) {
		t.Errorf("Codex was not sent a freeform call:\n%s", sent)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "hello.txt")); err != nil || string(b) != "iop-patched\n" {
		t.Fatalf("the patch was not applied: %q, %v", b, err)
	}
	for _, q := range g.up.Requests()[before:] {
		if q.API != "models" && (q.API != "chat" || !slices.Contains(q.ToolNames(), "apply_patch")) {
			t.Errorf("the provider was called in %s with tools %v", q.API, q.ToolNames())
		}
	}
}

// claudeEnv is Claude Code's environment for model's route, with its
// home.
func (g *gateway) claudeEnv(home, model string) []string {
	return environ(home,
		"ANTHROPIC_BASE_URL="+g.url,
		"ANTHROPIC_AUTH_TOKEN="+apiKey,
		"ANTHROPIC_MODEL="+model,
		"ANTHROPIC_DEFAULT_HAIKU_MODEL="+model,
		"CLAUDE_CODE_MAX_RETRIES=0",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
	)
}

// codexEnv writes Codex's configuration for model's route under home and
// returns its environment.
func (g *gateway) codexEnv(t *testing.T, home, model string) []string {
	t.Helper()
	codexHome := filepath.Join(home, ".codex")
	config := fmt.Sprintf("model = %q\nmodel_provider = \"iop\"\n\n[model_providers.iop]\nname = \"IOP\"\nbase_url = %q\nenv_key = \"IOP_API_KEY\"\nwire_api = \"responses\"\n",
		model, g.url+"/v1")
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	return environ(home, "CODEX_HOME="+codexHome, "IOP_API_KEY="+apiKey)
}

// codexExec is Codex's command line for a task.
func codexExec(task string) []string {
	return []string{"exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", task}
}

// client is the path of a client's binary: the environment variable
// env's, or name on PATH. Without either the test skips, or fails under
// IOP_REQUIRE_CLIENTS=1.
func client(t *testing.T, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("IOP_REQUIRE_CLIENTS") == "1" {
		t.Fatalf("no %s: set %s or put it on PATH (make clients installs it)", name, env)
	}
	t.Skipf("no %s (set %s, or IOP_REQUIRE_CLIENTS=1 to fail instead)", name, env)
	return ""
}

// environ is a client's whole environment: a home of its own, this
// process's PATH (the client's shell runs the command), and vars; nothing
// else of this process's (no key of the user's) reaches it.
func environ(home string, vars ...string) []string {
	return append([]string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8", "NO_COLOR=1"}, vars...)
}

// run runs bin in dir with no standard input and returns its standard
// output; a failure, or a run past three minutes, fails the test with
// both outputs.
func run(t *testing.T, bin, dir string, env []string, args ...string) string {
	t.Helper()
	stdout, stderr, err := execute(bin, dir, env, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, stdout, stderr)
	}
	return stdout
}

// execute runs bin in dir with no standard input, for three minutes at
// most, and returns its outputs and how it ended.
func execute(bin, dir string, env []string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = dir, env
	// A process the client left holding its output does not hold the test.
	cmd.WaitDelay = 10 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// ran checks that the command ran in dir.
func ran(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "out.txt"))
	if err != nil || string(b) != output {
		t.Fatalf("the command did not run in the client's directory: %q, %v", b, err)
	}
}

// gateway is a real Edge and Node on loopback, the Node hosting three
// local providers of one fake upstream: one that speaks Anthropic
// Messages, one only Chat Completions, one only Responses.
type gateway struct {
	url string // the tap's
	up  *upstreamtest.Server
	tap *tap
}

// tap is a reverse proxy in front of the Edge that keeps the answers'
// bytes as it passes them on, so a test sees what its client was sent.
type tap struct {
	mu      sync.Mutex
	answers [][]byte
}

// kept is how many answers the tap has begun to pass on.
func (tp *tap) kept() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.answers)
}

// since returns the bytes of the answers after the first n, joined: every
// byte a client was sent, since the tap keeps each before passing it on.
func (tp *tap) since(n int) []byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return bytes.Join(tp.answers[min(n, len(tp.answers)):], nil)
}

// answer wraps the body of an answer the tap passes on.
func (tp *tap) answer(body io.ReadCloser) io.ReadCloser {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.answers = append(tp.answers, nil)
	return &taped{ReadCloser: body, tp: tp, i: len(tp.answers) - 1}
}

// taped is an answer's body, kept as the proxy reads it.
type taped struct {
	io.ReadCloser
	tp *tap
	i  int
}

func (b *taped) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.tp.mu.Lock()
	b.tp.answers[b.i] = append(b.tp.answers[b.i], p[:n]...)
	b.tp.mu.Unlock()
	return n, err
}

func newGateway(t *testing.T) *gateway {
	t.Helper()
	models := []string{"up-model"}
	up := upstreamtest.New(upstreamtest.Config{Models: models, Reply: reply})
	upURL := up.Start()
	t.Cleanup(up.Close)
	an, err := anthropic.New(anthropic.Config{ID: "anthropic", BaseURL: upURL, Models: models, Category: execution.CategoryLocal})
	if err != nil {
		t.Fatal(err)
	}
	chat, err := oaadapter.New(oaadapter.Config{ID: "chat", BaseURL: upURL, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := oaadapter.New(oaadapter.Config{ID: "responses", BaseURL: upURL, Models: models})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := edge.New(edge.Config{
		Epoch: 1,
		Nodes: []nodes.Record{{ID: "box", TokenHash: nodes.HashToken(nodeToken), Providers: []nodes.ProviderSpec{
			{ID: "anthropic", Adapter: "anthropic", Category: execution.CategoryLocal, Models: models, Capacity: 4},
			{ID: "chat", Adapter: "openai", Category: execution.CategoryLocal, Models: models, Capacity: 4, APIs: []string{"chat"}},
			{ID: "responses", Adapter: "openai", Category: execution.CategoryLocal, Models: models, Capacity: 4, APIs: []string{"responses"}},
		}}},
		APIKeys:   []edge.APIKey{{Name: "dev", Hash: edge.HashKey(apiKey), Models: []string{"*"}}},
		KeepAlive: keepAlive,
		Routes: []edge.Route{
			{Model: "via-anthropic", Targets: []edge.Target{{ProviderID: "anthropic", Model: "up-model"}}},
			{Model: "via-chat", Targets: []edge.Target{{ProviderID: "chat", Model: "up-model"}}},
			{Model: "via-responses", Targets: []edge.Target{{ProviderID: "responses", Model: "up-model"}}},
			// A name Codex knows, so that it offers its apply_patch tool.
			{Model: codexModel, Targets: []edge.Target{{ProviderID: "chat", Model: "up-model"}}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nodeLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := node.New(node.Config{EdgeAddr: nodeLn.Addr().String(), NodeID: "box", Token: nodeToken,
		Providers: []node.Hosted{{Provider: an}, {Provider: chat}, {Provider: resp}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(apiLn) })
	wg.Go(func() { srv.ServeNodes(nodeLn) })
	wg.Go(func() { rt.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := srv.Registry().Current("box"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Node did not connect")
		}
	}
	edgeURL, _ := url.Parse("http://" + apiLn.Addr().String())
	tp := &tap{}
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(edgeURL) },
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			resp.Body = tp.answer(resp.Body)
			return nil
		},
	})
	t.Cleanup(front.Close)
	return &gateway{url: front.URL, up: up, tap: tp}
}

// calls returns the model calls the upstream saw after the first before
// of its requests (health checks aside), and fails the test unless there
// are at least two (the tool call and the answer), each of api, the last
// holding the command's output and, to an Anthropic-format provider, the
// model's thinking.
func (g *gateway) calls(t *testing.T, before int, api string) []*upstreamtest.Request {
	t.Helper()
	var out []*upstreamtest.Request
	for _, q := range g.up.Requests()[before:] {
		if q.API == "models" {
			continue
		}
		if q.API != api {
			t.Errorf("the provider was called in %s, want %s", q.API, api)
		}
		out = append(out, q)
	}
	if len(out) < 2 || !bytes.Contains(out[len(out)-1].Body, []byte(output)) || !bytes.Contains(out[len(out)-1].Body, []byte(secondOutput)) {
		t.Fatalf("the provider saw %d calls, the last without both calls' output", len(out))
	}
	// Anthropic needs a tool loop's thinking back, whole: Codex, which
	// keeps no state at the provider, gives it back sealed in a reasoning
	// item's encrypted_content.
	if api == "messages" && !bytes.Contains(out[len(out)-1].Body, []byte(thinking)) {
		t.Errorf("the model's thinking did not come back: %.300s", out[len(out)-1].Body)
	}
	return out
}

// vllmOverflow is vLLM's refusal of a prompt past the context window
// (before 0.10; SGLang's is alike).
const vllmOverflow = `{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 40000 tokens (39000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`

// reply is the model: a task that says overflow is refused as too long
// for the context window (vllmOverflow); patchTask gets a call of
// apply_patch with patch, then an answer; otherwise, while a request
// holds no output of the command, it thinks and calls the first shell
// tool it knows among the client's tools (Claude Code's Bash, Codex's
// exec_command, or its older shell) twice at once, for the command and
// for second; then it answers with the command's output.
func reply(q *upstreamtest.Request) upstreamtest.Script {
	if bytes.Contains(q.Body, []byte(overflow)) {
		return upstreamtest.Script{Status: http.StatusBadRequest, ErrorBody: vllmOverflow}
	}
	if bytes.Contains(q.Body, []byte(patchTask)) {
		switch {
		case bytes.Contains(q.Body, []byte("hello.txt")): // the patch went, and its result came back
			return upstreamtest.Script{Text: []string{"Patched."}}
		case slices.Contains(q.ToolNames(), "apply_patch"):
			a, _ := json.Marshal(map[string]string{"input": patch})
			return upstreamtest.Script{ToolCalls: []upstreamtest.ToolCall{{ID: "call_iop_patch", Name: "apply_patch", Arguments: string(a)}}}
		}
		return upstreamtest.Script{Text: []string{"There is no apply_patch."}}
	}
	if bytes.Contains(q.Body, []byte(output)) {
		return upstreamtest.Script{Text: []string{"The tool said ", output, "."}}
	}
	for _, name := range q.ToolNames() {
		var calls []upstreamtest.ToolCall
		for i, cmd := range []string{command, second} {
			var args any
			switch name {
			case "Bash":
				args = map[string]string{"command": cmd, "description": "Run the check"}
			case "exec_command":
				args = map[string]string{"cmd": cmd}
			case "shell":
				args = map[string][]string{"command": {"bash", "-lc", cmd}}
			default:
				continue
			}
			a, _ := json.Marshal(args)
			calls = append(calls, upstreamtest.ToolCall{ID: fmt.Sprintf("call_iop_%d", i+1), Name: name, Arguments: string(a)})
		}
		if calls != nil {
			return upstreamtest.Script{Reasoning: []string{thinking}, Text: []string{"Running the check."}, ToolCalls: calls,
				HeadDelay: 5 * keepAlive, ChunkDelay: 2 * keepAlive}
		}
	}
	return upstreamtest.Script{Text: []string{"There is nothing to run."}}
}
