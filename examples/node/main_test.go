package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/iop-dev/iop/execution/upstreamtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCheck: `node check` accepts a valid node.yaml and prints what it
// configures, refuses an invalid one with the reason, and writes nothing
// either way (the lease key and replay file are the running Node's to
// create).
func TestCheck(t *testing.T) {
	t.Setenv("IOP_TEST_NODE_TOKEN", "node-token-0123456789abcdef0123")
	pub, _, _ := ed25519.GenerateKey(nil)
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "state"), 0o700)
	cfg := filepath.Join(dir, "node.yaml")
	valid := `
edge: 127.0.0.1:9440
node_id: n1
token: {env: IOP_TEST_NODE_TOKEN}
plaintext: true
leases:
  key_file: state/lease.key
  replay_file: state/replay
  edge_keys: [{id: k1, public_key: "` + base64.StdEncoding.EncodeToString(pub) + `"}]
providers:
  - {id: vllm, adapter: openai, category: local, base_url: "http://127.0.0.1:8000", models: [qwen, llama]}
  - {id: echo, adapter: cli, argv: [/bin/cat], models: [cat]}
`
	os.WriteFile(cfg, []byte(valid), 0o644)
	var out, stderr bytes.Buffer
	if err := check([]string{"-config", cfg}, &out, &stderr); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{cfg + " is valid.", "node       n1", "edge       127.0.0.1:9440 (plaintext)", "provider   vllm (openai): qwen, llama", "provider   echo (cli): cat", "leases     1 pinned Edge keys"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check printed:\n%s\nwant it to include %q", out.String(), want)
		}
	}
	for _, tc := range []struct{ old, new, want string }{
		{"127.0.0.1:9440", "9440", `edge "9440" is not a host:port`},
		{"IOP_TEST_NODE_TOKEN}", "IOP_TEST_UNSET}", "token: $IOP_TEST_UNSET is unset"},
		{"argv: [/bin/cat]", "argv: [cat]", "Argv[0] must be an absolute path"},
		{"adapter: openai", "adapter: gpt", `adapter "gpt" is not openai`},
		{"  replay_file: state/replay\n", "", "key_file and replay_file are required"},
	} {
		doc := strings.Replace(valid, tc.old, tc.new, 1)
		if doc == valid {
			t.Fatalf("the edit %q did not apply", tc.new)
		}
		os.WriteFile(cfg, []byte(doc), 0o644)
		if err := check([]string{"-config", cfg}, &out, &stderr); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check with %q: %v, want it to mention %q", tc.new, err, tc.want)
		}
	}
	if err := check([]string{"-config", cfg, "-probe", "-probe-timeout", "0s"}, &out, &stderr); err == nil || !strings.Contains(err.Error(), "-probe-timeout 0s is not positive") {
		t.Errorf("check -probe-timeout 0s: %v", err)
	}
	if err := check([]string{cfg}, &out, &stderr); err == nil || !strings.Contains(err.Error(), "unexpected argument") {
		t.Errorf("check with the path but no -config: %v", err)
	}
	if err := check([]string{"-h"}, &out, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-config") {
		t.Errorf("check -h: %v\n%s", err, stderr.String())
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "state")); len(ents) > 0 {
		t.Errorf("check wrote %v", ents)
	}
}

// TestCheckProbe: with -probe, check asks each provider whether it
// answers (a real fake upstream, a closed port, a real and a missing
// executable, an upstream that refuses the key), notes a model the
// upstream does not list, fails when any provider does, and never prints
// the key it sent.
func TestCheckProbe(t *testing.T) {
	const upstreamKey = "sk-upstream-secret-0123456789abcdef"
	up := upstreamtest.New(upstreamtest.Config{Models: []string{"qwen"}, APIKey: upstreamKey})
	url := up.Start()
	t.Cleanup(up.Close)
	// An Ollama server lists its models with their tags.
	ollama := upstreamtest.New(upstreamtest.Config{Models: []string{"llama3:latest", "mistral:7b"}})
	ollamaURL := ollama.Start()
	t.Cleanup(ollama.Close)
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedURL := "http://" + closed.Addr().String()
	closed.Close()
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat")
	}
	t.Setenv("IOP_TEST_NODE_TOKEN", "node-token-0123456789abcdef0123")
	t.Setenv("IOP_TEST_UPSTREAM_KEY", upstreamKey)
	t.Setenv("IOP_TEST_WRONG_KEY", "sk-wrong-secret-0123456789abcdef")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "node.yaml")
	doc := `
edge: 127.0.0.1:9440
node_id: n1
token: {env: IOP_TEST_NODE_TOKEN}
plaintext: true
providers:
  - {id: vllm, adapter: openai, category: local, base_url: "` + url + `", api_key: {env: IOP_TEST_UPSTREAM_KEY}, models: [qwen, llama]}
  - {id: down, adapter: openai, category: local, base_url: "` + closedURL + `", models: [qwen]}
  - {id: echo, adapter: cli, argv: [` + cat + `], models: [cat]}
  - {id: gone, adapter: cli, argv: [` + filepath.Join(dir, "missing") + `], models: [cat]}
  - {id: wrongkey, adapter: openai, category: api, base_url: "` + url + `", api_key: {env: IOP_TEST_WRONG_KEY}, models: [qwen]}
  - {id: local, adapter: ollama, base_url: "` + ollamaURL + `", models: [llama3, qwen]}
`
	os.WriteFile(cfg, []byte(doc), 0o644)
	var out, stderr bytes.Buffer
	err = check([]string{"-config", cfg, "-probe", "-probe-timeout", "5s"}, &out, &stderr)
	if err == nil || err.Error() != "3 of 6 providers failed the probe" {
		t.Errorf("check -probe: %v", err)
	}
	for _, want := range []string{
		"probe      vllm: ok; the upstream does not list llama\n",
		"probe      down: FAILED: upstream unreachable\n",
		"probe      echo: ok\n",
		"probe      gone: FAILED: cli: command not executable\n",
		"probe      wrongkey: FAILED: upstream answered 401\n",
		"probe      local: ok; the upstream does not list qwen\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("check -probe printed:\n%s\nwant it to include %q", out.String(), want)
		}
	}
	if strings.Contains(out.String(), "secret") {
		t.Errorf("check -probe printed a key:\n%s", out.String())
	}
	// With leases, a provider without a key of its own is skipped: the
	// Edge may lease it one per call, and this Node has none to probe with.
	pub, _, _ := ed25519.GenerateKey(nil)
	leasedDoc := strings.Replace(doc, "providers:\n", `leases:
  key_file: lease.key
  replay_file: replay
  edge_keys: [{id: k1, public_key: "`+base64.StdEncoding.EncodeToString(pub)+`"}]
providers:
  - {id: hosted, adapter: openai, category: api, base_url: "`+url+`", models: [qwen]}
`, 1)
	os.WriteFile(cfg, []byte(leasedDoc), 0o644)
	out.Reset()
	err = check([]string{"-config", cfg, "-probe"}, &out, &stderr)
	if err == nil || err.Error() != "3 of 7 providers failed the probe" || !strings.Contains(out.String(), "probe      hosted: skipped (no key of its own") {
		t.Errorf("check -probe with leases: %v\n%s", err, out.String())
	}
	os.WriteFile(cfg, []byte(doc), 0o644)
	// Without -probe nothing is asked.
	before := len(up.Requests())
	out.Reset()
	if err := check([]string{"-config", cfg}, &out, &stderr); err != nil || strings.Contains(out.String(), "probe") || len(up.Requests()) != before {
		t.Errorf("check without -probe: %v, %d upstream requests\n%s", err, len(up.Requests())-before, out.String())
	}
}
