package config

import (
	"os"
	"strings"
	"testing"
)

// The YAML loaders take operator files, which may be anything: they must
// answer with an error or a valid configuration, never panic.

func FuzzParseEdge(f *testing.F) {
	f.Add([]byte(minimalEdge))
	if b, err := os.ReadFile(examples(nil, "edge/edge.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("api: {listen: x}\nnodes_listen: y\nstate_dir: z\nnodes: [{id: a, token: {sha256: zz}}]"))
	f.Add([]byte("{{{"))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir() // no state directory inside: nothing is written
		ef, err := ParseEdge(b, dir)
		if err != nil {
			return
		}
		if _, err := ef.Config(1); err != nil {
			t.Fatalf("ParseEdge accepted what Config refuses: %v", err)
		}
	})
}

func FuzzParseNode(f *testing.F) {
	f.Add([]byte("edge: a:1\nnode_id: n\ntoken: {env: X}\nplaintext: true\nproviders: [{id: p, adapter: openai, base_url: 'http://h', models: [m]}]"))
	if b, err := os.ReadFile(examples(nil, "node/node.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("workspaces: [{ref: r, root: /, platform: linux}]\nplaintext: true"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if strings.Contains(string(b), "key_file") || strings.Contains(string(b), "replay_file") {
			return // those create files; covered by the unit tests
		}
		nf, err := ParseNode(b, t.TempDir())
		if err != nil {
			return
		}
		nf.Config() // may refuse (secrets, roots); must not panic
	})
}

func FuzzParseHub(f *testing.F) {
	f.Add([]byte("edges_listen: a:1\nhttp: {listen: b:2}\noperators: [{name: o, token: {sha256: 0000000000000000000000000000000000000000000000000000000000000001}}]"))
	if b, err := os.ReadFile(examples(nil, "controlplane/hub.yaml")); err == nil {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		hf, err := ParseHub(b, t.TempDir())
		if err != nil {
			return
		}
		if _, err := hf.Config(); err != nil {
			t.Fatalf("ParseHub accepted what Config refuses: %v", err)
		}
	})
}
