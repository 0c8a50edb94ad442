package config

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/adapters/anthropic"
	"github.com/iop-dev/iop/execution/adapters/cli"
	"github.com/iop-dev/iop/execution/adapters/ollama"
	"github.com/iop-dev/iop/execution/adapters/openai"
	"github.com/iop-dev/iop/node"
	"github.com/iop-dev/iop/workspace"
)

// NodeFile is node.yaml.
type NodeFile struct {
	Edge   string    `yaml:"edge"`
	NodeID string    `yaml:"node_id"`
	Token  Secret    `yaml:"token"`
	TLS    *TLSFiles `yaml:"tls"`
	// EdgeIdentity, with tls, requires the Edge's certificate to carry
	// spiffe://<trust_domain>/edge/<edge_id> (managed mode).
	EdgeIdentity *struct {
		TrustDomain string `yaml:"trust_domain"`
		EdgeID      string `yaml:"edge_id"`
	} `yaml:"edge_identity"`
	Plaintext bool `yaml:"plaintext"`
	// HealthInterval and UnhealthyInterval are node.Config's: how often
	// every provider is checked (15s), and one found unhealthy (the lower
	// of health_interval and 5s).
	HealthInterval    time.Duration `yaml:"health_interval"`
	UnhealthyInterval time.Duration `yaml:"unhealthy_interval"`
	// Leases lets the Node take credential leases from its Edge.
	Leases *struct {
		// KeyFile holds the Node's lease encryption key (created, 0600,
		// when missing; it never leaves the Node).
		KeyFile string `yaml:"key_file"`
		// ReplayFile remembers used leases across restarts.
		ReplayFile string `yaml:"replay_file"`
		// EdgeKeys pins the Edge's lease-signing keys: id and base64
		// Ed25519 public key (`edge lease-key` prints them).
		EdgeKeys []struct {
			ID        string `yaml:"id"`
			PublicKey string `yaml:"public_key"`
		} `yaml:"edge_keys"`
		RetiredEdgeKeys []string      `yaml:"retired_edge_keys"`
		Skew            time.Duration `yaml:"skew"`
	} `yaml:"leases"`
	// Workspaces are the directories this Node lets requests work in: the
	// root, what may ever be done there, and the command templates.
	Workspaces []struct {
		Ref      string   `yaml:"ref"`
		Root     string   `yaml:"root"`
		Platform string   `yaml:"platform"`
		Ops      []string `yaml:"ops"`
		Env      []string `yaml:"env"`
		Commands []struct {
			ID   string            `yaml:"id"`
			Argv []string          `yaml:"argv"`
			Args map[string]string `yaml:"args"`
		} `yaml:"commands"`
		Limits WorkspaceLimits `yaml:"limits"`
	} `yaml:"workspaces"`
	Providers []struct {
		ID       string   `yaml:"id"`
		Adapter  string   `yaml:"adapter"`
		Category string   `yaml:"category"`
		BaseURL  string   `yaml:"base_url"`
		APIPath  string   `yaml:"api_path"` // openai only
		APIKey   *Secret  `yaml:"api_key"`
		Models   []string `yaml:"models"`
		// cli only
		Argv        []string `yaml:"argv"`
		Placeholder string   `yaml:"placeholder"`
		Env         []string `yaml:"env"`
		Dir         string   `yaml:"dir"`
		MaxOutput   int64    `yaml:"max_output_bytes"`
	} `yaml:"providers"`

	dir string
}

// LoadNode reads and validates node.yaml.
func LoadNode(path string) (*NodeFile, error) {
	b, dir, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	f, err := ParseNode(b, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// ParseNode parses node.yaml from bytes; relative paths resolve against dir.
func ParseNode(b []byte, dir string) (*NodeFile, error) {
	var f NodeFile
	if err := decodeStrict(b, &f); err != nil {
		return nil, err
	}
	f.dir = dir
	if err := checkAddr("edge", f.Edge); err != nil {
		return nil, err
	}
	if f.TLS == nil && !f.Plaintext {
		return nil, fmt.Errorf("tls is required; set plaintext: true to connect without it (loopback and development only)")
	}
	if f.TLS != nil && f.Plaintext {
		return nil, fmt.Errorf("tls and plaintext: true exclude each other")
	}
	return &f, nil
}

// Config builds the node runtime configuration, constructing each provider
// adapter. Secrets are read at call time by the adapters, never here.
// With a leases section it creates the Node's lease key if it is not
// there and opens the replay file (rewriting it compacted).
func (f *NodeFile) Config() (node.Config, error) { return f.build(true) }

// Check builds the configuration as Config does, writing nothing: a lease
// key that is not there is not created (a throwaway key stands in), and
// the replay file is left alone (it is read when the Node starts). It is
// what `node check` runs; the configuration it returns is for looking at
// (its providers may be probed), not for running a Node.
func (f *NodeFile) Check() (node.Config, error) { return f.build(false) }

// build is Config; open says whether the lease key and replay file are
// opened (and so may be written).
func (f *NodeFile) build(open bool) (node.Config, error) {
	cfg := node.Config{EdgeAddr: f.Edge, NodeID: f.NodeID, HealthInterval: f.HealthInterval, UnhealthyInterval: f.UnhealthyInterval}
	tok, err := f.Token.read(f.dir)
	if err != nil {
		return cfg, fmt.Errorf("token: %w", err)
	}
	cfg.Token = tok
	if f.TLS != nil {
		tc, err := f.TLS.client(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("tls: %w", err)
		}
		cfg.TLS = tc
	}
	if e := f.EdgeIdentity; e != nil {
		cfg.EdgeIdentity = &node.EdgeIdentity{TrustDomain: e.TrustDomain, EdgeID: e.EdgeID}
	}
	if l := f.Leases; l != nil {
		op, err := f.opener(open)
		if err != nil {
			return cfg, fmt.Errorf("leases: %w", err)
		}
		cfg.Leases = op
	}
	if len(f.Workspaces) > 0 {
		var entries []workspace.Entry
		for _, w := range f.Workspaces {
			e := workspace.Entry{Ref: w.Ref, Root: resolve(f.dir, w.Root), Platform: w.Platform, Ops: ops(w.Ops), Env: w.Env, Limits: w.Limits.limits()}
			for _, c := range w.Commands {
				t := workspace.Template{ID: c.ID, Argv: c.Argv, Args: map[string]workspace.ArgKind{}}
				for k, v := range c.Args {
					t.Args[k] = workspace.ArgKind(v)
				}
				e.Commands = append(e.Commands, t)
			}
			entries = append(entries, e)
		}
		cat, err := workspace.NewCatalog(entries)
		if err != nil {
			return cfg, fmt.Errorf("workspaces: %w", err)
		}
		cfg.Workspaces = cat
	}
	for i, p := range f.Providers {
		var cred execution.Credential
		if p.APIKey != nil {
			switch {
			case p.APIKey.File != "" && p.APIKey.Env == "" && p.APIKey.SHA256 == "":
				cred = execution.FileCredential(resolve(f.dir, p.APIKey.File))
			case p.APIKey.Env != "" && p.APIKey.File == "" && p.APIKey.SHA256 == "":
				cred = execution.EnvCredential(p.APIKey.Env)
			default:
				return cfg, fmt.Errorf("providers[%d].api_key: exactly one of file or env is required", i)
			}
		}
		var prov execution.Provider
		var err error
		cliOnly := len(p.Argv) > 0 || p.Placeholder != "" || len(p.Env) > 0 || p.Dir != "" || p.MaxOutput != 0
		if p.Adapter != cli.Kind && cliOnly {
			return cfg, fmt.Errorf("providers[%d]: argv, placeholder, env, dir and max_output_bytes are for adapter cli only", i)
		}
		if p.Adapter != openai.Kind && p.APIPath != "" {
			return cfg, fmt.Errorf("providers[%d]: api_path is for adapter openai only", i)
		}
		switch p.Adapter {
		case openai.Kind:
			prov, err = openai.New(openai.Config{ID: p.ID, BaseURL: p.BaseURL, APIPath: p.APIPath, Credential: cred, Category: execution.Category(p.Category), Models: p.Models})
		case ollama.Kind:
			prov, err = ollama.New(ollama.Config{ID: p.ID, BaseURL: p.BaseURL, Credential: cred, Models: p.Models})
		case anthropic.Kind:
			prov, err = anthropic.New(anthropic.Config{ID: p.ID, BaseURL: p.BaseURL, Credential: cred, Category: execution.Category(p.Category), Models: p.Models})
		case cli.Kind:
			if p.BaseURL != "" || cred != nil {
				return cfg, fmt.Errorf("providers[%d]: base_url and api_key are not for adapter cli", i)
			}
			prov, err = cli.New(cli.Config{ID: p.ID, Argv: p.Argv, Placeholder: p.Placeholder, Env: p.Env, Dir: resolve(f.dir, p.Dir), Models: p.Models, MaxOutput: p.MaxOutput})
		default:
			return cfg, fmt.Errorf("providers[%d].adapter %q is not openai, ollama, anthropic or cli", i, p.Adapter)
		}
		if err != nil {
			return cfg, fmt.Errorf("providers[%d]: %w", i, err)
		}
		cfg.Providers = append(cfg.Providers, node.Hosted{Provider: prov, AllowedModels: p.Models})
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// opener builds the lease opener from the leases section: the Node's key
// (created on first use) and replay file, and the pinned Edge keys.
// Without open it writes nothing: a key that is not there is stood in for
// by a throwaway one, and the replay file is not read.
func (f *NodeFile) opener(open bool) (*credentiallease.Opener, error) {
	l := f.Leases
	if l.KeyFile == "" || l.ReplayFile == "" {
		return nil, fmt.Errorf("key_file and replay_file are required")
	}
	if len(l.EdgeKeys) == 0 {
		return nil, fmt.Errorf("edge_keys: pin at least one Edge lease-signing key")
	}
	pinned := map[string]ed25519.PublicKey{}
	for i, k := range l.EdgeKeys {
		b, err := base64.StdEncoding.DecodeString(k.PublicKey)
		if err != nil || len(b) != ed25519.PublicKeySize || k.ID == "" {
			return nil, fmt.Errorf("edge_keys[%d]: an id and a base64 Ed25519 public key are required", i)
		}
		pinned[k.ID] = ed25519.PublicKey(b)
	}
	keyPath := resolve(f.dir, l.KeyFile)
	var key *credentiallease.NodeKey
	var err error
	if _, serr := os.Lstat(keyPath); !open && errors.Is(serr, fs.ErrNotExist) {
		key, err = credentiallease.GenerateNodeKey() // a stand-in: the Node creates its key when it starts
	} else {
		key, err = credentiallease.LoadOrCreateNodeKey(keyPath)
	}
	if err != nil {
		return nil, err
	}
	rc := credentiallease.NewReplayCache() // in memory: the file is the Node's to open
	if open {
		if rc, err = credentiallease.OpenReplayFile(resolve(f.dir, l.ReplayFile)); err != nil {
			return nil, err
		}
	}
	op, err := credentiallease.NewOpener(credentiallease.OpenerConfig{NodeID: f.NodeID, Key: key, EdgeKeys: pinned,
		RetiredEdgeKeyIDs: l.RetiredEdgeKeys, Skew: l.Skew, Replay: rc})
	if err != nil {
		rc.Close()
		return nil, err
	}
	return op, nil
}
