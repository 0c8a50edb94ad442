package config

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func examples(t *testing.T, rel string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "examples", rel)
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

func TestEdgeStrictness(t *testing.T) {
	if _, err := ParseEdge([]byte(minimalEdge), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, edit, want string }{
		{"unknown key names its line", "state_dir: state\nstatedir: oops", "line 5: field statedir not found"},
		{"unknown nested key", "capacity: 1}", ""},
		{"inline secret refused", "key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}", ""},
		{"route to unknown provider", "provider: p1, model: m}", "Routes[0] (pub).Targets[0]: unknown provider"},
		{"zero capacity", "capacity: 1}", "Capacity must be at least 1"},
		{"short secret", "key: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}", "at least 128 random bits"},
		{"unknown api", "capacity: 1}", `unknown API "completions"`},
		{"api the adapter cannot serve", "capacity: 1}", `the openai adapter cannot serve "messages"`},
		{"no generation api", "capacity: 1}", "names no generation API"},
	}
	replacements := []string{
		"state_dir: state\nstatedir: oops",
		"capacity: 1, gpus: 8}",
		"key: {value: sk-inline-secret-0123456789abcdef}",
		"provider: p2, model: m}",
		"capacity: 0}",
		"key: {env: IOP_TEST_SHORT_KEY}",
		"capacity: 1, apis: [completions]}",
		"capacity: 1, apis: [chat, messages]}",
		"capacity: 1, apis: [embeddings]}",
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
`
	nf, err := ParseNode([]byte(doc), dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := nf.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Token != "node-token-0123456789abcdef" || len(cfg.Providers) != 2 {
		t.Fatalf("node config %+v", cfg)
	}
	bad := map[string]string{
		"no tls nor plaintext": strings.Replace(doc, "plaintext: true\n", "", 1),
		"cli field on openai":  strings.Replace(doc, `models: [m]}`, `models: [m], argv: [/bin/sh]}`, 1),
		"unknown adapter":      strings.Replace(doc, "adapter: openai", "adapter: gpt", 1),
		"relative argv":        strings.Replace(doc, "argv: [/bin/cat]", "argv: [cat]", 1),
		"unknown key":          doc + "gpu: true\n",
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
