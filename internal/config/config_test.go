package config

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge"
)

// examples is a file under the repository's examples, found from the
// test's working directory (this package's directory), so that -trimpath
// builds find it too.
func examples(_ *testing.T, rel string) string {
	return filepath.Join("..", "..", "examples", rel)
}

func TestSamplesLoad(t *testing.T) {
	t.Setenv("IOP_ALICE_KEY", "sk-alice-0123456789abcdef0123456789")
	t.Setenv("IOP_GPU_BOX_TOKEN", "node-token-0123456789abcdef0123")
	ef, err := LoadEdge(examples(t, "edge/edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ef.Config(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Nodes) != 1 || len(cfg.Routes) != 2 || len(cfg.APIKeys) != 2 || cfg.Epoch != 3 {
		t.Fatalf("edge config %+v", cfg)
	}
	// Every limit the sample sets reaches the Config.
	if cfg.MaxBodyBytes != 16<<20 || cfg.QueueTimeout != 30*time.Second || cfg.MaxQueued != 1024 || cfg.MaxQueuedBytes != 256<<20 || cfg.RequestTimeout != 10*time.Minute ||
		cfg.KeepAlive != 15*time.Second || cfg.LongContextTokens != 32768 || cfg.AgingStep != 2*time.Second {
		t.Fatalf("edge limits: body %d, queue %v, queued %d (%d bytes), request %v, keep-alive %v, long context %d, aging %v",
			cfg.MaxBodyBytes, cfg.QueueTimeout, cfg.MaxQueued, cfg.MaxQueuedBytes, cfg.RequestTimeout, cfg.KeepAlive, cfg.LongContextTokens, cfg.AgingStep)
	}
	nf, err := ParseNode(mustRead(t, examples(t, "node/node.yaml")), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if nf.NodeID != "gpu-box" || len(nf.Providers) != 2 {
		t.Fatalf("node file %+v", nf)
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const minimalEdge = `
api: {listen: "127.0.0.1:0"}
nodes_listen: "127.0.0.1:0"
state_dir: state
api_keys:
  - name: a
    key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}
    models: ["*"]
nodes:
  - id: n1
    token: {sha256: 0000000000000000000000000000000000000000000000000000000000000002}
    providers:
      - {id: p1, adapter: openai, category: local, models: [m], capacity: 1}
routes:
  - model: pub
    targets: [{provider: p1, model: m}]
`

// minimalHub is the smallest valid hub.yaml (it needs IOP_OPERATOR_TOKEN).
const minimalHub = `
edges_listen: 127.0.0.1:0
http: {listen: 127.0.0.1:0}
edges:
  - {id: e1, token: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}}
operators:
  - {name: alice, token: {env: IOP_OPERATOR_TOKEN}}
`

// mustParse parses doc with parse (ParseEdge, ParseHub) in dir.
func mustParse[F any](t *testing.T, parse func([]byte, string) (F, error), doc, dir string) F {
	t.Helper()
	f, err := parse([]byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestEdgeStrictness(t *testing.T) {
	if _, err := ParseEdge([]byte(minimalEdge), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, edit, want string }{
		{"unknown key names its line", "state_dir: state\nstatedir: oops", `line 5: unknown key "statedir" at the top level; did you mean "state_dir"?`},
		{"unknown nested key", "capacity: 1}", `unknown key "gpus" in nodes[0].providers[0]`},
		{"inline secret refused", "key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}", "unknown key in api_keys[0].key (it has env, file, sha256)"},
		{"route to unknown provider", "provider: p1, model: m}", "Routes[0] (pub).Targets[0]: unknown provider"},
		{"zero capacity", "capacity: 1}", "Capacity 0 outside 1..1048576"},
		{"capacity beyond the wire's 32 bits", "capacity: 1}", "Capacity 4294967297 outside 1..1048576"},
		{"short secret", "key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}", "at least 128 random bits"},
		{"unknown api", "capacity: 1}", `unknown API "completions"`},
		{"api the adapter cannot serve", "capacity: 1}", `the openai adapter cannot serve "messages"`},
		{"no generation api", "capacity: 1}", "names no generation API"},
		{"cors origin with a path", `api: {listen: "127.0.0.1:0"}`, `CORSOrigins[0]: "https://chat.example/": an origin has no path`},
		{"unknown model class", "provider: p1, model: m}", `Routes[0] (pub).Targets[0]: ModelClass "gpt" is not openai-reasoning, openai-chat, reasoning-content or other`},
		{"one secret under two names", `models: ["*"]`, "APIKeys[1] (b): same secret as APIKeys[0] (a)"},
		{"queue bytes below a body", "nodes_listen:", "MaxQueuedBytes (1024) is below MaxBodyBytes (2048)"},
		{"queue bytes below the default body", "nodes_listen:", "MaxQueuedBytes (1048576) is below MaxBodyBytes (16777216)"},
		{"a node id that is a dot segment", "  - id: n1", `nodes: record: ID: ".." is a dot segment`},
		{"weight beyond the pool's", "provider: p1, model: m}", "Routes[0] (pub).Targets[0]: Weight 9223372036854775807 outside 0..1048576"},
		{"aging too slow for the queue timeout", `models: ["*"]`, `AgingStep 3s: a request of key "a" (priority 0) would climb to the priority of key "b" (10) only after 10 steps, but may wait at most 30s`},
		{"aging too slow for the request timeout", `models: ["*"]`, "set AgingStep to at most 999ms"},
		{"a negative output limit", "provider: p1, model: m}", "Routes[0] (pub).Targets[0]: MaxTokens -1 is negative"},
		{"an unknown way of thinking", "provider: p1, model: m}", `Routes[0] (pub).Targets[0]: Thinking "enabled" is not adaptive or budget`},
		{"a prompt cache neither on nor off", "provider: p1, model: m}", "line 16: cannot unmarshal !!str `sometimes` into bool"},
		{"api an ollama provider cannot serve", "adapter: openai, category: local, models: [m], capacity: 1}", `the ollama adapter cannot serve "messages"`},
		{"a billing header neither kept nor dropped", "capacity: 1}", `BillingHeader "strip" is not keep or drop`},
	}
	replacements := []string{
		"state_dir: state\nstatedir: oops",
		"capacity: 1, gpus: 8}",
		"key: {value: sk-inline-secret-0123456789abcdef}",
		"provider: p2, model: m}",
		"capacity: 0}",
		"capacity: 4294967297}",
		"key: {env: IOP_TEST_SHORT_KEY}",
		"capacity: 1, apis: [completions]}",
		"capacity: 1, apis: [chat, messages]}",
		"capacity: 1, apis: [embeddings]}",
		`api: {listen: "127.0.0.1:0", cors_origins: ["https://chat.example/"]}`,
		"provider: p1, model: m, model_class: gpt}",
		"models: [\"*\"]\n  - name: b\n    key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}\n    models: [pub]",
		"limits: {max_body_bytes: 2048, max_queued_bytes: 1024}\nnodes_listen:",
		"limits: {max_queued_bytes: 1048576}\nnodes_listen:",
		"  - id: \"..\"",
		"provider: p1, model: m, weight: 9223372036854775807}",
		"models: [\"*\"]\n  - name: b\n    key: {sha256: 0000000000000000000000000000000000000000000000000000000000000003}\n    models: [pub]\n    priority: 10\nlimits: {aging_step: 3s}",
		"models: [\"*\"]\n  - name: b\n    key: {sha256: 0000000000000000000000000000000000000000000000000000000000000003}\n    models: [pub]\n    priority: 10\nlimits: {aging_step: 2s, request_timeout: 10s}",
		"provider: p1, model: m, max_tokens: -1}",
		"provider: p1, model: m, thinking: enabled}",
		"provider: p1, model: m, prompt_cache: sometimes}",
		"adapter: ollama, category: local, models: [m], capacity: 1, apis: [chat, messages]}",
		"capacity: 1, billing_header: strip}",
	}
	t.Setenv("IOP_TEST_SHORT_KEY", "short")
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := tc.edit
			if old == "state_dir: state\nstatedir: oops" {
				old = "state_dir: state"
			}
			doc := strings.Replace(minimalEdge, old, replacements[i], 1)
			_, err := ParseEdge([]byte(doc), t.TempDir())
			if err == nil {
				t.Fatalf("accepted:\n%s", doc)
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	ok := strings.Replace(minimalEdge, "capacity: 1}", "capacity: 1, apis: [responses]}", 1)
	ef, err := ParseEdge([]byte(ok), t.TempDir())
	if err != nil {
		t.Fatalf("apis: [responses] refused: %v", err)
	}
	cfg, err := ef.Config(1)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Nodes[0].Providers[0].APIs; len(got) != 1 || got[0] != "responses" {
		t.Fatalf("apis not carried: %v", got)
	}
	ok = strings.Replace(minimalEdge, "capacity: 1}", "capacity: 1, billing_header: drop}", 1)
	if ef, err = ParseEdge([]byte(ok), t.TempDir()); err != nil {
		t.Fatalf("billing_header: drop refused: %v", err)
	}
	if cfg, err = ef.Config(1); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Nodes[0].Providers[0].BillingHeader; got != "drop" {
		t.Fatalf("billing_header not carried: %q", got)
	}
	ok = strings.Replace(minimalEdge, `api: {listen: "127.0.0.1:0"}`, `api: {listen: "127.0.0.1:0", cors_origins: ["https://chat.example", "http://localhost:3000"], access_log: true}`, 1)
	if ef, err = ParseEdge([]byte(ok), t.TempDir()); err != nil {
		t.Fatalf("cors_origins refused: %v", err)
	}
	if cfg, err = ef.Config(1); err != nil {
		t.Fatal(err)
	}
	if got := cfg.CORSOrigins; len(got) != 2 || got[0] != "https://chat.example" || got[1] != "http://localhost:3000" {
		t.Fatalf("cors_origins not carried: %v", got)
	}
	if !cfg.AccessLog {
		t.Fatal("access_log not carried")
	}
	t.Setenv("IOP_TEST_METRICS_TOKEN", "metrics-token-0123456789abcdef0123")
	ok = strings.Replace(minimalEdge, `api: {listen: "127.0.0.1:0"}`, `api: {listen: "127.0.0.1:0", metrics_token: {env: IOP_TEST_METRICS_TOKEN}}`, 1)
	if ef, err = ParseEdge([]byte(ok), t.TempDir()); err != nil {
		t.Fatalf("metrics_token refused: %v", err)
	}
	if cfg, err = ef.Config(1); err != nil {
		t.Fatal(err)
	}
	if cfg.MetricsTokenHash != edge.HashKey("metrics-token-0123456789abcdef0123") {
		t.Fatal("metrics_token not carried")
	}
	short := strings.Replace(minimalEdge, `api: {listen: "127.0.0.1:0"}`, `api: {listen: "127.0.0.1:0", metrics_token: {env: IOP_TEST_SHORT_KEY}}`, 1)
	if _, err := ParseEdge([]byte(short), t.TempDir()); err == nil || !strings.Contains(err.Error(), "api.metrics_token") {
		t.Fatalf("a short metrics_token: %v", err)
	}
	ok = strings.Replace(minimalEdge, "provider: p1, model: m}", "provider: p1, model: m, model_class: openai-reasoning, max_tokens: 64000, thinking: adaptive, prompt_cache: false}", 1)
	if ef, err = ParseEdge([]byte(ok), t.TempDir()); err != nil {
		t.Fatalf("model_class refused: %v", err)
	}
	if cfg, err = ef.Config(1); err != nil {
		t.Fatal(err)
	}
	if got := cfg.Routes[0].Targets[0]; got.ModelClass != "openai-reasoning" || got.MaxTokens != 64000 || got.Thinking != "adaptive" || !got.NoPromptCache {
		t.Fatalf("model_class, max_tokens, thinking or prompt_cache not carried: %+v", got)
	}
	for _, on := range []string{"provider: p1, model: m}", "provider: p1, model: m, prompt_cache: true}"} {
		ef, err := ParseEdge([]byte(strings.Replace(minimalEdge, "provider: p1, model: m}", on, 1)), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if cfg, err := ef.Config(1); err != nil || cfg.Routes[0].Targets[0].NoPromptCache {
			t.Fatalf("%s: %v %+v", on, err, cfg)
		}
	}
	// Ollama serves Responses when its provider names it (0.13.3 and later).
	ok = strings.Replace(minimalEdge, "adapter: openai, category: local, models: [m], capacity: 1}", "adapter: ollama, category: local, models: [m], capacity: 1, apis: [chat, responses, embeddings]}", 1)
	if ef, err = ParseEdge([]byte(ok), t.TempDir()); err != nil {
		t.Fatalf("an ollama provider with responses: %v", err)
	}
	if cfg, err = ef.Config(1); err != nil || !slices.Equal(cfg.Nodes[0].Providers[0].APIs, []string{"chat", "responses", "embeddings"}) {
		t.Fatalf("an ollama provider with responses: %v %+v", err, cfg.Nodes)
	}
	// Two classes ten apart climbed in 29.99 s of a 30 s queue timeout.
	ok = strings.Replace(minimalEdge, `models: ["*"]`, "models: [\"*\"]\n  - name: b\n    key: {sha256: 0000000000000000000000000000000000000000000000000000000000000003}\n    models: [pub]\n    priority: 10\nlimits: {aging_step: 2999ms}", 1)
	if ef, err = ParseEdge([]byte(ok), t.TempDir()); err != nil {
		t.Fatalf("aging_step 2999ms refused: %v", err)
	}
	if cfg, err = ef.Config(1); err != nil {
		t.Fatal(err)
	}
	if cfg.AgingStep != 2999*time.Millisecond || cfg.APIKeys[1].Priority != 10 {
		t.Fatalf("aging_step %v, priority %d", cfg.AgingStep, cfg.APIKeys[1].Priority)
	}
	if _, err := ParseEdge([]byte(minimalEdge+"---\nextra: doc\n"), t.TempDir()); err == nil {
		t.Fatal("a second YAML document was accepted")
	}
}

func TestNodeFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "token"), []byte("node-token-0123456789abcdef\n"), 0o600)
	doc := `
edge: 127.0.0.1:9440
node_id: n1
token: {file: token}
plaintext: true
providers:
  - {id: p1, adapter: openai, base_url: "http://127.0.0.1:8000", models: [m]}
  - {id: c1, adapter: cli, argv: [/bin/cat], models: [m]}
  - {id: g1, adapter: openai, base_url: "https://generativelanguage.googleapis.com", api_path: /v1beta/openai, models: [m]}
`
	nf, err := ParseNode([]byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nf.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Token != "node-token-0123456789abcdef" || len(cfg.Providers) != 3 {
		t.Fatalf("node config %+v", cfg)
	}
	nf, err = ParseNode([]byte(doc+"health_interval: 30s\nunhealthy_interval: 2s\n"), dir)
	if err == nil {
		cfg, err = nf.Config()
	}
	if err != nil || cfg.HealthInterval != 30*time.Second || cfg.UnhealthyInterval != 2*time.Second {
		t.Fatalf("health intervals: %v, %v %v", err, cfg.HealthInterval, cfg.UnhealthyInterval)
	}
	bad := map[string]string{
		"negative unhealthy_interval": doc + "unhealthy_interval: -1s\n",
		"no tls nor plaintext":        strings.Replace(doc, "plaintext: true\n", "", 1),
		"cli field on openai":         strings.Replace(doc, `models: [m]}`, `models: [m], argv: [/bin/sh]}`, 1),
		"unknown adapter":             strings.Replace(doc, "adapter: openai", "adapter: gpt", 1),
		"relative argv":               strings.Replace(doc, "argv: [/bin/cat]", "argv: [cat]", 1),
		"api_path on cli":             strings.Replace(doc, "argv: [/bin/cat]", "argv: [/bin/cat], api_path: /v1", 1),
		"api_path escapes":            strings.Replace(doc, "api_path: /v1beta/openai", "api_path: /v1beta/../admin", 1),
		"unknown key":                 doc + "gpu: true\n",
	}
	for name, d := range bad {
		nf, err := ParseNode([]byte(d), dir)
		if err == nil {
			_, err = nf.Config()
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestHubFile(t *testing.T) {
	t.Setenv("IOP_EDGE_A_TOKEN", "edge-a-token-0123456789abcdef")
	t.Setenv("IOP_OPERATOR_TOKEN", "op-token-0123456789abcdef0123")
	hf, err := LoadHub(examples(t, "controlplane/hub.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := hf.Config()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Edges) != 2 || cfg.Edges[0].ID != "edge-a" || cfg.Edges[0].TokenHash == ([32]byte{}) ||
		len(cfg.Operators) != 1 || cfg.CommandTimeout.Minutes() != 5 || cfg.KeepAlive != 15*time.Second {
		t.Fatalf("hub config %+v", cfg)
	}
	if _, err := ParseHub([]byte(minimalHub), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct{ old, new, want string }{
		"unknown key":             {"http:", "htp: {}\nhttp:", `line 3: unknown key "htp" at the top level; did you mean "http"?`},
		"no operators":            {"operators:\n  - {name: alice, token: {env: IOP_OPERATOR_TOKEN}}", "", "at least one operator"},
		"edge without identity":   {"{id: e1, token: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}}", "{id: e1}", "no TokenHash"},
		"bad edge id":             {"id: e1", "id: e/1", "Edges[0].ID"},
		"duplicate edge":          {"edges:\n", "edges:\n  - {id: e1, token: {env: IOP_OPERATOR_TOKEN}}\n", "duplicate"},
		"unknown edges need mtls": {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\nallow_unknown_edges: true", "AllowUnknownEdges"},
		"operator mtls needs ca":  {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\noperator_mtls: true", "client_ca_file"},
		"negative limit":          {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\nlimits: {command_timeout: -1s}", "negative"},
		"negative keep-alive":     {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\nlimits: {keep_alive: -1s}", "limits.keep_alive is negative"},
		"unset operator token":    {"IOP_OPERATOR_TOKEN}}", "IOP_UNSET_FOR_TEST}}", "unset"},
		"edge tls without key":    {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\nedge_tls: {cert_file: hub.crt}", "key_file"},
		"managed without mtls":    {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\ntrust_domain: iop.test", "TrustDomain"},
		"managed, a bad domain":   {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\ntrust_domain: IOP.test", "invalid name"},
		"one token, two names":    {"IOP_OPERATOR_TOKEN}}", "IOP_OPERATOR_TOKEN}}\n  - {name: bob, token: {env: IOP_OPERATOR_TOKEN}}", "Operators[1] (bob): same token as Operators[0] (alice)"},
	} {
		doc := strings.Replace(minimalHub, c.old, c.new, 1)
		if doc == minimalHub {
			t.Fatalf("%s: the edit did not apply", name)
		}
		_, err := ParseHub([]byte(doc), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestEdgeControlPlaneSection(t *testing.T) {
	t.Setenv("IOP_EDGE_TOKEN", "edge-token-0123456789abcdef0123")
	t.Setenv("IOP_SHORT", "short")
	ef, err := ParseEdge([]byte(minimalEdge), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if cc, err := ef.Connector(); cc != nil || err != nil {
		t.Fatalf("no section: %+v %v", cc, err)
	}
	doc := minimalEdge + "control_plane: {addr: \"127.0.0.1:9450\", edge_id: e1, token: {env: IOP_EDGE_TOKEN}}\n"
	ef, err = ParseEdge([]byte(doc), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cc, err := ef.Connector()
	if err != nil || cc.HubAddr != "127.0.0.1:9450" || cc.EdgeID != "e1" || cc.Token != "edge-token-0123456789abcdef0123" {
		t.Fatalf("connector %+v %v", cc, err)
	}
	for name, c := range map[string]struct{ old, new, want string }{
		"hash cannot be presented": {"{env: IOP_EDGE_TOKEN}", "{sha256: 0000000000000000000000000000000000000000000000000000000000000001}", "file or env"},
		"no identity":              {", token: {env: IOP_EDGE_TOKEN}", "", "token or a tls client certificate"},
		"no addr":                  {`addr: "127.0.0.1:9450", `, "", "addr is required"},
		"short token":              {"IOP_EDGE_TOKEN", "IOP_SHORT", "shorter"},
		"unknown key":              {"edge_id: e1", "edge_id: e1, region: x", `unknown key "region" in control_plane (it has addr, edge_id, tls, token)`},
	} {
		_, err := ParseEdge([]byte(strings.Replace(doc, c.old, c.new, 1)), t.TempDir())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to mention %q", name, err, c.want)
		}
	}
}

func TestLeaseAndManagedSections(t *testing.T) {
	t.Setenv("IOP_TEST_UPSTREAM", "sk-upstream-0123456789abcdef")
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "state"), 0o700)
	doc := strings.Replace(minimalEdge, "capacity: 1}", "capacity: 1, credential: up}", 1) +
		"credentials:\n  - {id: up, revision: 3, secret: {env: IOP_TEST_UPSTREAM}}\nlease_ttl: 30s\n"
	ef, err := ParseEdge([]byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	// Parsing (a reload's, `edge check`'s) writes nothing; building the
	// configuration to run creates the key.
	if _, err := os.Lstat(filepath.Join(dir, "state", "lease-signing.key")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("parsing wrote the signing key: %v", err)
	}
	cfg, err := ef.Config(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Credentials) != 1 || cfg.Credentials[0].Revision != 3 || cfg.Leases == nil || cfg.Nodes[0].Providers[0].Credential != "up" {
		t.Fatalf("credentials not carried: %+v %+v", cfg.Credentials, cfg.Leases)
	}
	st, err := os.Stat(filepath.Join(dir, "state", "lease-signing.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("signing key: %v", err)
	}
	again, _ := ef.Config(1)
	if again.Leases.KeyID != cfg.Leases.KeyID {
		t.Fatal("the signing key changed between loads")
	}
	// A key that is there is checked when parsing: a damaged one is
	// refused, never replaced.
	os.WriteFile(filepath.Join(dir, "state", "lease-signing.key"), []byte("short"), 0o600)
	if _, err := ParseEdge([]byte(doc), dir); !errors.Is(err, credentiallease.ErrKeyFile) {
		t.Fatalf("damaged signing key: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "state", "lease-signing.key")); string(b) != "short" {
		t.Fatal("the damaged signing key was replaced")
	}
	os.Remove(filepath.Join(dir, "state", "lease-signing.key"))
	for name, bad := range map[string]string{
		"unknown credential":   strings.Replace(doc, "credential: up}", "credential: nope}", 1),
		"hash as a secret":     strings.Replace(doc, "secret: {env: IOP_TEST_UPSTREAM}", "secret: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}", 1),
		"ttl above 2m":         strings.Replace(doc, "lease_ttl: 30s", "lease_ttl: 5m", 1),
		"managed without mTLS": doc + "managed: {trust_domain: iop.test}\n",
	} {
		if _, err := ParseEdge([]byte(bad), dir); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	_, pub := mustEd25519(t)
	node := `
edge: 127.0.0.1:9440
node_id: n1
token: {env: IOP_TEST_UPSTREAM}
plaintext: true
leases:
  key_file: state/lease.key
  replay_file: state/replay
  edge_keys: [{id: k1, public_key: "` + pub + `"}]
providers:
  - {id: p1, adapter: openai, category: api, base_url: "http://127.0.0.1:8000", models: [m]}
`
	nf, err := ParseNode([]byte(node), dir)
	if err != nil {
		t.Fatal(err)
	}
	// Checking writes nothing: no key, no replay file.
	if _, err := nf.Check(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lease.key", "replay"} {
		if _, err := os.Lstat(filepath.Join(dir, "state", name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Check wrote %s: %v", name, err)
		}
	}
	ncfg, err := nf.Config()
	if err != nil {
		t.Fatal(err)
	}
	if ncfg.Leases == nil || len(ncfg.Leases.PublicKey()) != 32 {
		t.Fatal("no lease opener")
	}
	if st, err := os.Stat(filepath.Join(dir, "state", "lease.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("node key: %v", err)
	}
	// A key that is there is checked: a damaged one is refused by Check
	// as by Config, and left as it is.
	os.WriteFile(filepath.Join(dir, "state", "lease.key"), []byte("short"), 0o600)
	if _, err := nf.Check(); !errors.Is(err, credentiallease.ErrKeyFile) {
		t.Fatalf("damaged node key: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "state", "lease.key")); string(b) != "short" {
		t.Fatal("Check replaced the damaged node key")
	}
	os.Remove(filepath.Join(dir, "state", "lease.key"))
	for name, bad := range map[string]string{
		"no pinned key":  strings.Replace(node, `  edge_keys: [{id: k1, public_key: "`+pub+`"}]`+"\n", "", 1),
		"bad public key": strings.Replace(node, pub, "bm90IGEga2V5", 1),
		"no replay file": strings.Replace(node, "  replay_file: state/replay\n", "", 1),
		"skew too large": strings.Replace(node, "  replay_file: state/replay\n", "  replay_file: state/replay\n  skew: 1h\n", 1),
	} {
		nf, err := ParseNode([]byte(bad), dir)
		if err != nil {
			continue
		}
		if _, err := nf.Check(); err == nil {
			t.Errorf("%s: Check accepted it", name)
		}
		if _, err := nf.Config(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func mustEd25519(t *testing.T) (ed25519.PrivateKey, string) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return priv, base64.StdEncoding.EncodeToString(pub)
}

func TestWorkspaceSections(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "repo"), 0o755)
	doc := minimalEdge + `workspaces:
  - ref: repo
    node: n1
    ops: [read, list, write, command]
    commands: [test]
    limits: {read_bytes: 1048576, list_entries: 1000, write_bytes: 1048576, command_timeout: 60s, output_bytes: 65536}
`
	ef, err := ParseEdge([]byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := ef.Config(1)
	if len(cfg.Workspaces) != 1 || cfg.Workspaces[0].Authority.Limits.CommandTimeout.Seconds() != 60 {
		t.Fatalf("workspaces %+v", cfg.Workspaces)
	}
	for name, bad := range map[string]string{
		"unknown node":  strings.Replace(doc, "node: n1", "node: n9", 1),
		"unknown op":    strings.Replace(doc, "ops: [read,", "ops: [exec,", 1),
		"missing limit": strings.Replace(doc, "output_bytes: 65536", "", 1),
		"unknown key":   strings.Replace(doc, "node: n1", "node: n1\n    shell: true", 1),
		// Above the ceilings every Node refuses (and, for list entries,
		// beyond the wire's 32 bits: 2^32+1 would have travelled as 1).
		"list entries above the ceiling": strings.Replace(doc, "list_entries: 1000", "list_entries: 4294967297", 1),
		"read bytes above the ceiling":   strings.Replace(doc, "read_bytes: 1048576", "read_bytes: 1073741824", 1),
		"command timeout above an hour":  strings.Replace(doc, "command_timeout: 60s", "command_timeout: 2h", 1),
	} {
		if _, err := ParseEdge([]byte(bad), dir); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	node := `
edge: 127.0.0.1:9440
node_id: n1
token: {env: IOP_TEST_NODE_TOKEN}
plaintext: true
workspaces:
  - ref: repo
    root: repo
    platform: ` + runtime.GOOS + `
    ops: [read, list, write, command]
    env: [LANG]
    commands:
      - {id: test, argv: [/bin/echo, "{word}"], args: {word: word}}
    limits: {read_bytes: 1048576, list_entries: 1000, write_bytes: 1048576, command_timeout: 60s, output_bytes: 65536}
`
	t.Setenv("IOP_TEST_NODE_TOKEN", "node-token-0123456789abcdef")
	nf, err := ParseNode([]byte(node), dir)
	if err != nil {
		t.Fatal(err)
	}
	ncfg, err := nf.Config()
	if err != nil {
		t.Fatal(err)
	}
	if ncfg.Workspaces == nil || len(ncfg.Workspaces.Refs()) != 1 {
		t.Fatal("no catalog")
	}
	for name, bad := range map[string]string{
		"other platform":   strings.Replace(node, "platform: "+runtime.GOOS, "platform: plan9", 1),
		"LD_PRELOAD":       strings.Replace(node, "env: [LANG]", "env: [LD_PRELOAD]", 1),
		"relative argv":    strings.Replace(node, "/bin/echo", "echo", 1),
		"missing root":     strings.Replace(node, "root: repo", "root: nope", 1),
		"untyped argument": strings.Replace(node, "args: {word: word}", "args: {word: shell}", 1),
	} {
		nf, err := ParseNode([]byte(bad), dir)
		if err == nil {
			_, err = nf.Config()
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestFilesAreBounded: a configuration naming a device, a FIFO or a huge
// file is refused instead of blocking or reading without end.
func TestFilesAreBounded(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 2<<20), 0o600)
	for _, p := range []string{"/dev/zero", fifo, big, dir} {
		doc := strings.Replace(minimalEdge, "key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}", "key: {file: "+p+"}", 1)
		if _, err := ParseEdge([]byte(doc), dir); err == nil {
			t.Errorf("secret file %s accepted", p)
		}
		hub := "edges_listen: a:1\nhttp: {listen: b:2}\nedge_tls: {cert_file: " + p + ", key_file: " + p + "}\noperators: [{name: o, token: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}}]\n"
		if _, err := ParseHub([]byte(hub), dir); err == nil {
			t.Errorf("certificate file %s accepted", p)
		}
	}
}

// TestUnknownKeys: every unknown key of a file is reported at once, each
// with its line, its section and the key it likely meant (or the keys the
// section has); a key where a secret's source belongs is never repeated,
// a long one is cut; keys under an alias are still refused, and an anchor
// that holds itself is refused, not walked forever.
func TestUnknownKeys(t *testing.T) {
	doc := strings.Replace(minimalEdge, "state_dir: state", "state_dir: state\nqueue_timeot: 5s", 1)
	doc = strings.Replace(doc, "capacity: 1}", "capacity: 1, capacty: 2}", 1)
	doc = strings.Replace(doc, "token: {sha256:", "token: {sk-live-0123456789abcdefghijklmnopqrstuvwxyz: x, sha256:", 1)
	doc += "x_" + strings.Repeat("z", 100) + ": 1\n"
	_, err := ParseEdge([]byte(doc), t.TempDir())
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var uk *UnknownKeyError
		if !errors.As(e, &uk) {
			t.Fatalf("%T %v, want *UnknownKeyError", e, e)
		}
		got = append(got, uk.Error())
	}
	want := []string{
		`line 5: unknown key "queue_timeot" at the top level (it has api, api_keys, control_plane, credentials, lease_ttl, limits, managed, node_tls, nodes, nodes_listen, routes, state_dir, workspaces)`,
		`line 12: unknown key in nodes[0].token (it has env, file, sha256)`,
		`line 14: unknown key "capacty" in nodes[0].providers[0]; did you mean "capacity"?`,
		`line 18: unknown key "x_zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz..." at the top level`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	if strings.Contains(err.Error(), "sk-live") {
		t.Fatalf("a secret typed as a key was repeated: %v", err)
	}

	alias := minimalEdge + "x: &bad {capacty: 2}\n"
	if _, err := ParseEdge([]byte(strings.Replace(minimalEdge, "state_dir: state", "state_dir: state\nlimits: &l {queue_timeout: 1s}", 1)+"routes2: *l\n"), t.TempDir()); err == nil {
		t.Fatal("an unknown key holding an alias was accepted")
	}
	if _, err := ParseEdge([]byte(alias), t.TempDir()); err == nil {
		t.Fatal("an unknown top-level key with an anchor was accepted")
	}
	merged := strings.Replace(minimalEdge, "state_dir: state", "state_dir: state\nlimits: {<<: &l {queue_timeot: 1s}}", 1)
	if _, err := ParseEdge([]byte(merged), t.TempDir()); err == nil || !strings.Contains(err.Error(), "queue_timeot") {
		t.Fatalf("an unknown key merged in from an anchor: %v", err)
	}
	loop := strings.Replace(minimalEdge, "state_dir: state", "state_dir: state\nlimits: &l {max_body_bytes: *l}", 1)
	if _, err := ParseEdge([]byte(loop), t.TempDir()); err == nil {
		t.Fatal("an anchor that holds itself was accepted")
	}
}

// TestAddresses: every listen and dial address is a host:port when the
// file is read (a bare port, a bare host, a URL are refused with the
// setting's name), not when the daemon first listens or dials.
func TestAddresses(t *testing.T) {
	t.Setenv("IOP_OPERATOR_TOKEN", "operator-token-0123456789abcdef")
	const hub = `
edges_listen: "127.0.0.1:0"
http: {listen: "127.0.0.1:0"}
edges: [{id: e1, token: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}}]
operators: [{name: alice, token: {env: IOP_OPERATOR_TOKEN}}]
`
	const node = `
edge: "127.0.0.1:9440"
node_id: n1
token: {env: IOP_OPERATOR_TOKEN}
plaintext: true
`
	parse := map[string]func(string) error{
		"edge": func(d string) error { _, err := ParseEdge([]byte(d), t.TempDir()); return err },
		"hub":  func(d string) error { _, err := ParseHub([]byte(d), t.TempDir()); return err },
		"node": func(d string) error { _, err := ParseNode([]byte(d), t.TempDir()); return err },
	}
	docs := map[string]string{"edge": minimalEdge, "hub": hub, "node": node}
	for _, tc := range []struct {
		file, old, new, want string // want "" means accepted
	}{
		{"edge", `listen: "127.0.0.1:0"`, `listen: ":8080"`, ""},
		{"edge", `listen: "127.0.0.1:0"`, `listen: "[::1]:https"`, ""},
		{"edge", `listen: "127.0.0.1:0"`, `listen: "8080"`, `api.listen "8080" is not a host:port (missing port in address)`},
		{"edge", `listen: "127.0.0.1:0"`, `listen: "127.0.0.1:"`, `api.listen "127.0.0.1:" is not a host:port (missing port)`},
		{"edge", `nodes_listen: "127.0.0.1:0"`, `nodes_listen: "http://0.0.0.0:9440"`, `nodes_listen "http://0.0.0.0:9440" is not a host:port (too many colons in address)`},
		{"edge", `nodes_listen: "127.0.0.1:0"`, `nodes_listen: ""`, "nodes_listen is required"},
		{"edge", "state_dir: state", "state_dir: state\ncontrol_plane: {addr: hub.example, edge_id: e1}", `control_plane.addr "hub.example" is not a host:port`},
		{"hub", `edges_listen: "127.0.0.1:0"`, `edges_listen: "9450"`, `edges_listen "9450" is not a host:port`},
		{"hub", `{listen: "127.0.0.1:0"}`, `{listen: "::1"}`, `http.listen "::1" is not a host:port`},
		{"node", `edge: "127.0.0.1:9440"`, `edge: "edge.example:9440"`, ""},
		{"node", `edge: "127.0.0.1:9440"`, `edge: "edge.example"`, `edge "edge.example" is not a host:port`},
		{"node", `edge: "127.0.0.1:9440"`, `edge: ""`, "edge is required"},
	} {
		doc := strings.Replace(docs[tc.file], tc.old, tc.new, 1)
		if doc == docs[tc.file] {
			t.Fatalf("%s %q: the edit did not apply", tc.file, tc.new)
		}
		err := parse[tc.file](doc)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s with %s: error %v, want %q", tc.file, tc.new, err, tc.want)
		}
	}
}

// TestStartOnly: a reload names, in a fixed order, each setting it cannot
// apply until a restart (what the reference daemons warn about), and none
// that it applies; paths compare as they resolve.
func TestStartOnly(t *testing.T) {
	t.Setenv("IOP_EDGE_TOKEN", "edge-token-0123456789abcdef0123")
	t.Setenv("IOP_OPERATOR_TOKEN", "op-token-0123456789abcdef0123")
	dir := t.TempDir()
	running := mustParse(t, ParseEdge, minimalEdge, dir)
	for name, c := range map[string]struct {
		edits [][2]string
		want  []string
	}{
		"unchanged":         {nil, nil},
		"reloadable only":   {[][2]string{{`models: ["*"]`, `models: [pub]`}, {"capacity: 1", "capacity: 4"}}, nil},
		"same state, spelt": {[][2]string{{"state_dir: state", "state_dir: ./state/"}}, nil},
		"api listen":        {[][2]string{{`api: {listen: "127.0.0.1:0"}`, `api: {listen: "127.0.0.1:8080"}`}}, []string{"api.listen"}},
		"every one": {[][2]string{
			{`api: {listen: "127.0.0.1:0"}`, `api: {listen: "127.0.0.1:8080"}`},
			{`nodes_listen: "127.0.0.1:0"`, `nodes_listen: "127.0.0.1:9443"`},
			{"state_dir: state", "state_dir: other"},
			{"routes:", "control_plane: {addr: \"127.0.0.1:9450\", edge_id: e1, token: {env: IOP_EDGE_TOKEN}}\nroutes:"},
		}, []string{"api.listen", "nodes_listen", "state_dir", "control_plane"}},
	} {
		doc := minimalEdge
		for _, e := range c.edits {
			if !strings.Contains(doc, e[0]) {
				t.Fatalf("%s: %q is not in the file", name, e[0])
			}
			doc = strings.Replace(doc, e[0], e[1], 1)
		}
		if got := running.StartOnly(mustParse(t, ParseEdge, doc, dir)); !slices.Equal(got, c.want) {
			t.Errorf("edge, %s: %q, want %q", name, got, c.want)
		}
	}

	runningHub := mustParse(t, ParseHub, minimalHub, dir)
	for name, c := range map[string]struct {
		old, new string
		want     []string
	}{
		"unchanged":       {"", "", nil},
		"reloadable only": {"id: e1", "id: e2", nil},
		"edges listen":    {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:9450", []string{"edges_listen"}},
		"http listen":     {"http: {listen: 127.0.0.1:0}", "http: {listen: 127.0.0.1:8080}", []string{"http.listen"}},
		"limits":          {"edges_listen: 127.0.0.1:0", "edges_listen: 127.0.0.1:0\nlimits: {command_timeout: 1m}", []string{"limits"}},
	} {
		if got := runningHub.StartOnly(mustParse(t, ParseHub, strings.Replace(minimalHub, c.old, c.new, 1), dir)); !slices.Equal(got, c.want) {
			t.Errorf("hub, %s: %q, want %q", name, got, c.want)
		}
	}
}
