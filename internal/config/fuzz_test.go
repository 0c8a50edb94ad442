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
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		defer nothingWritten(t, dir)
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
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if strings.Contains(string(b), "key_file") || strings.Contains(string(b), "replay_file") {
			return // those create files; covered by the unit tests
		}
		defer nothingWritten(t, dir)
		nf, err := ParseNode(b, dir)
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
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		defer nothingWritten(t, dir)
		hf, err := ParseHub(b, dir)
		if err != nil {
			return
		}
		if _, err := hf.Config(); err != nil {
			t.Fatalf("ParseHub accepted what Config refuses: %v", err)
		}
	})
}

// nothingWritten fails t if parsing or loading a configuration left
// anything in dir (the one directory every input shares, which parsing
// must only read: relative paths resolve against it).
func nothingWritten(t *testing.T, dir string) {
	t.Helper()
	if es, err := os.ReadDir(dir); err != nil || len(es) != 0 {
		t.Fatalf("the configuration's directory after parsing: %v, %d entries", err, len(es))
	}
}
