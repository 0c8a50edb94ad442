package config

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/iop-dev/iop/controlplane"
	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/workspace"
)

// EdgeFile is edge.yaml.
type EdgeFile struct {
	API struct {
		Listen      string    `yaml:"listen"`
		TLS         *TLSFiles `yaml:"tls"`
		CORSOrigins []string  `yaml:"cors_origins"`
		AccessLog   bool      `yaml:"access_log"`
		// MetricsToken, when set, is the bearer token /metrics requires.
		MetricsToken *Secret `yaml:"metrics_token"`
	} `yaml:"api"`
	NodesListen string    `yaml:"nodes_listen"`
	NodeTLS     *TLSFiles `yaml:"node_tls"`
	StateDir    string    `yaml:"state_dir"`
	Limits      struct {
		MaxBodyBytes      int64         `yaml:"max_body_bytes"`
		QueueTimeout      time.Duration `yaml:"queue_timeout"`
		MaxQueued         int           `yaml:"max_queued"`
		MaxQueuedBytes    int64         `yaml:"max_queued_bytes"`
		RequestTimeout    time.Duration `yaml:"request_timeout"`
		KeepAlive         time.Duration `yaml:"keep_alive"`
		LongContextTokens int           `yaml:"long_context_tokens"`
		AgingStep         time.Duration `yaml:"aging_step"`
	} `yaml:"limits"`
	APIKeys []struct {
		Name              string   `yaml:"name"`
		Key               Secret   `yaml:"key"`
		Models            []string `yaml:"models"`
		Priority          int      `yaml:"priority"`
		RequestsPerMinute int      `yaml:"requests_per_minute"`
		TokensPerMinute   int      `yaml:"tokens_per_minute"`
		MaxConcurrent     int      `yaml:"max_concurrent"`
	} `yaml:"api_keys"`
	Nodes []struct {
		ID        string `yaml:"id"`
		Token     Secret `yaml:"token"`
		Providers []struct {
			ID                  string   `yaml:"id"`
			Adapter             string   `yaml:"adapter"`
			Category            string   `yaml:"category"`
			Models              []string `yaml:"models"`
			Capacity            int      `yaml:"capacity"`
			LongContextCapacity int      `yaml:"long_context_capacity"`
			APIs                []string `yaml:"apis"`
			Credential          string   `yaml:"credential"`
			BillingHeader       string   `yaml:"billing_header"`
		} `yaml:"providers"`
	} `yaml:"nodes"`
	Routes []struct {
		Model    string `yaml:"model"`
		Strategy string `yaml:"strategy"`
		Targets  []struct {
			Provider   string `yaml:"provider"`
			Model      string `yaml:"model"`
			Weight     int    `yaml:"weight"`
			ModelClass string `yaml:"model_class"`
			MaxTokens  int    `yaml:"max_tokens"`
			Thinking   string `yaml:"thinking"`
			// PromptCache false sends no prompt-cache marks
			// (edge.Target.NoPromptCache); unset or true marks.
			PromptCache *bool `yaml:"prompt_cache"`
		} `yaml:"targets"`
	} `yaml:"routes"`
	// Credentials are hosted-API keys leased to Nodes one call at a time.
	Credentials []struct {
		ID       string `yaml:"id"`
		Revision uint64 `yaml:"revision"`
		Secret   Secret `yaml:"secret"`
		Revoked  bool   `yaml:"revoked"`
	} `yaml:"credentials"`
	// LeaseTTL is each credential lease's lifetime (at most 2m). The
	// signing key lives in state_dir/lease-signing.key.
	LeaseTTL time.Duration `yaml:"lease_ttl"`
	// Workspaces are the workspace refs requests may be admitted to: the
	// owning node and the most authority a request may get (the node's
	// own node.yaml may allow less).
	Workspaces []struct {
		Ref      string          `yaml:"ref"`
		Node     string          `yaml:"node"`
		Ops      []string        `yaml:"ops"`
		Commands []string        `yaml:"commands"`
		Limits   WorkspaceLimits `yaml:"limits"`
	} `yaml:"workspaces"`
	// Managed turns on managed mode (see edge.Managed).
	Managed *struct {
		TrustDomain string `yaml:"trust_domain"`
	} `yaml:"managed"`
	// ControlPlane, when present, links this Edge to a Hub.
	ControlPlane *struct {
		Addr   string `yaml:"addr"`
		EdgeID string `yaml:"edge_id"`
		// Token is the Edge's own enrollment token (a file or an
		// environment variable; a hash cannot be presented). Without it
		// the Edge proves itself with tls.cert_file.
		Token *Secret   `yaml:"token"`
		TLS   *TLSFiles `yaml:"tls"`
	} `yaml:"control_plane"`

	dir string
}

// TLSFiles names PEM files. For a server: cert and key (and client_ca for
// mutual TLS). For a client: ca (the server's), server_name, and cert and
// key for mutual TLS.
type TLSFiles struct {
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
	CAFile     string `yaml:"ca_file"`
	ClientCA   string `yaml:"client_ca_file"`
	ServerName string `yaml:"server_name"`
}

// LoadEdge reads and validates edge.yaml.
func LoadEdge(path string) (*EdgeFile, error) {
	b, dir, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("edge config: %w", err)
	}
	f, err := ParseEdge(b, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// ParseEdge parses edge.yaml from bytes; relative paths resolve against dir.
func ParseEdge(b []byte, dir string) (*EdgeFile, error) {
	var f EdgeFile
	if err := decodeStrict(b, &f); err != nil {
		return nil, err
	}
	f.dir = dir
	if err := checkAddr("api.listen", f.API.Listen); err != nil {
		return nil, err
	}
	if err := checkAddr("nodes_listen", f.NodesListen); err != nil {
		return nil, err
	}
	if f.StateDir == "" {
		return nil, fmt.Errorf("state_dir is required (the boot epoch lives there)")
	}
	// Build once to validate everything that can be checked now, writing
	// nothing.
	if _, err := f.build(1, false); err != nil {
		return nil, err
	}
	if _, err := f.Connector(); err != nil {
		return nil, err
	}
	return &f, nil
}

// StatePath returns a path inside the state directory (the directory
// itself for an empty name).
func (f *EdgeFile) StatePath(name string) string {
	dir := resolve(f.dir, f.StateDir)
	if name == "" {
		return dir
	}
	return filepath.Join(dir, name)
}

// Config builds the library configuration for a boot epoch. With
// credentials, it creates the lease-signing key if the state directory
// holds none yet.
func (f *EdgeFile) Config(epoch uint32) (edge.Config, error) { return f.build(epoch, true) }

// Preview builds the library configuration as Config does, but writes
// nothing: where the lease-signing key is still to be created, a
// throwaway key stands in. It is for reports (edge check), never to run
// an Edge with.
func (f *EdgeFile) Preview() (edge.Config, error) { return f.build(1, false) }

// build is Config; without create, a missing lease-signing key is not
// created (a throwaway key stands in), so that parsing writes nothing.
func (f *EdgeFile) build(epoch uint32, create bool) (edge.Config, error) {
	cfg := edge.Config{
		Epoch:             epoch,
		MaxBodyBytes:      f.Limits.MaxBodyBytes,
		QueueTimeout:      f.Limits.QueueTimeout,
		MaxQueued:         f.Limits.MaxQueued,
		MaxQueuedBytes:    f.Limits.MaxQueuedBytes,
		RequestTimeout:    f.Limits.RequestTimeout,
		KeepAlive:         f.Limits.KeepAlive,
		LongContextTokens: f.Limits.LongContextTokens,
		AgingStep:         f.Limits.AgingStep,
		CORSOrigins:       f.API.CORSOrigins,
		AccessLog:         f.API.AccessLog,
	}
	if t := f.API.MetricsToken; t != nil {
		h, err := t.hash(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("api.metrics_token: %w", err)
		}
		cfg.MetricsTokenHash = h
	}
	for i, k := range f.APIKeys {
		h, err := k.Key.hash(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("api_keys[%d].key: %w", i, err)
		}
		cfg.APIKeys = append(cfg.APIKeys, edge.APIKey{Name: k.Name, Hash: h, Models: k.Models, Priority: k.Priority,
			RequestsPerMinute: k.RequestsPerMinute, TokensPerMinute: k.TokensPerMinute, MaxConcurrent: k.MaxConcurrent})
	}
	for i, n := range f.Nodes {
		h, err := n.Token.hash(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("nodes[%d].token: %w", i, err)
		}
		rec := nodes.Record{ID: n.ID, TokenHash: h}
		for j, p := range n.Providers {
			cat := execution.Category(p.Category)
			if p.Category == "" {
				return cfg, fmt.Errorf("nodes[%d].providers[%d].category is required (cli, api or local)", i, j)
			}
			rec.Providers = append(rec.Providers, nodes.ProviderSpec{ID: p.ID, Adapter: p.Adapter, Category: cat, Models: p.Models, Capacity: p.Capacity, LongContextCapacity: p.LongContextCapacity, APIs: p.APIs, Credential: p.Credential, BillingHeader: p.BillingHeader})
		}
		cfg.Nodes = append(cfg.Nodes, rec)
	}
	for _, r := range f.Routes {
		rt := edge.Route{Model: r.Model, Strategy: edge.Strategy(r.Strategy)}
		for _, t := range r.Targets {
			rt.Targets = append(rt.Targets, edge.Target{ProviderID: t.Provider, Model: t.Model, Weight: t.Weight, ModelClass: t.ModelClass, MaxTokens: t.MaxTokens, Thinking: t.Thinking,
				NoPromptCache: t.PromptCache != nil && !*t.PromptCache})
		}
		cfg.Routes = append(cfg.Routes, rt)
	}
	if f.NodeTLS != nil {
		tc, err := f.NodeTLS.server(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("node_tls: %w", err)
		}
		cfg.NodeTLS = tc
	}
	apiTLS, err := f.APITLS()
	if err != nil {
		return cfg, err
	}
	cfg.APITLS = apiTLS
	for i, c := range f.Credentials {
		src, err := c.Secret.source(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("credentials[%d].secret: %w", i, err)
		}
		cfg.Credentials = append(cfg.Credentials, edge.Credential{ID: c.ID, Revision: c.Revision, Secret: src, Revoked: c.Revoked})
	}
	if len(f.Credentials) > 0 {
		key, err := f.leaseKey(create)
		if err != nil {
			return cfg, err
		}
		cfg.Leases = &edge.LeaseSigner{KeyID: credentiallease.KeyID(key.Public().(ed25519.PublicKey)), Key: key, TTL: f.LeaseTTL}
	}
	if f.Managed != nil {
		cfg.Managed = &edge.Managed{TrustDomain: f.Managed.TrustDomain}
	}
	for _, w := range f.Workspaces {
		cfg.Workspaces = append(cfg.Workspaces, edge.WorkspaceSpec{Ref: w.Ref, NodeID: w.Node,
			Authority: workspace.Authority{Ops: ops(w.Ops), Commands: w.Commands, Limits: w.Limits.limits()}})
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Connector returns the link to the Hub, or nil when edge.yaml has no
// control_plane section.
func (f *EdgeFile) Connector() (*controlplane.ConnectorConfig, error) {
	cp := f.ControlPlane
	if cp == nil {
		return nil, nil
	}
	if err := checkAddr("control_plane.addr", cp.Addr); err != nil {
		return nil, err
	}
	if cp.EdgeID == "" {
		return nil, fmt.Errorf("control_plane.edge_id is required")
	}
	cc := &controlplane.ConnectorConfig{HubAddr: cp.Addr, EdgeID: cp.EdgeID}
	if cp.Token != nil {
		if cp.Token.SHA256 != "" {
			return nil, fmt.Errorf("control_plane.token: the edge presents its token, so it needs file or env, not sha256")
		}
		v, err := cp.Token.read(f.dir)
		if err != nil {
			return nil, fmt.Errorf("control_plane.token: %w", err)
		}
		if len(v) < minSecretLen {
			return nil, fmt.Errorf("control_plane.token: secret shorter than %d characters", minSecretLen)
		}
		cc.Token = v
	}
	if cp.TLS != nil {
		tc, err := cp.TLS.client(f.dir)
		if err != nil {
			return nil, fmt.Errorf("control_plane.tls: %w", err)
		}
		cc.TLS = tc
	}
	if cc.Token == "" && (cc.TLS == nil || cc.TLS.GetClientCertificate == nil) {
		return nil, fmt.Errorf("control_plane: a token or a tls client certificate is required")
	}
	return cc, nil
}

// LeaseKeyPath is where the Edge's lease-signing key lives.
func (f *EdgeFile) LeaseKeyPath() string { return f.StatePath("lease-signing.key") }

// leaseKey loads the lease-signing key, creating it on first use when
// create is set. A key that is not there and may not be created (ParseEdge
// only checks the file), or whose state directory is not there yet, is
// stood in for by a throwaway key; one that is there is checked whole.
func (f *EdgeFile) leaseKey(create bool) (ed25519.PrivateKey, error) {
	if _, err := os.Stat(f.StatePath("")); err != nil {
		_, k, err := ed25519.GenerateKey(nil)
		return k, err
	}
	if _, err := os.Lstat(f.LeaseKeyPath()); !create && errors.Is(err, fs.ErrNotExist) {
		_, k, err := ed25519.GenerateKey(nil)
		return k, err
	}
	k, err := credentiallease.LoadOrCreateSigningKey(f.LeaseKeyPath())
	if err != nil {
		return nil, fmt.Errorf("lease signing key: %w", err)
	}
	return k, nil
}

// StartOnly lists the settings of next that differ from f's among those
// a running Edge reads only when it starts (the listen addresses, the
// state directory, the control_plane link): a reload keeps the running
// ones, so an operator must be told that these wait for a restart.
// (Turning api.tls or node_tls on or off is refused by the reload
// itself; their certificates do reload.)
func (f *EdgeFile) StartOnly(next *EdgeFile) []string {
	var changed []string
	for _, c := range []struct {
		name string
		same bool
	}{
		{"api.listen", f.API.Listen == next.API.Listen},
		{"nodes_listen", f.NodesListen == next.NodesListen},
		{"state_dir", f.StatePath("") == next.StatePath("")},
		{"control_plane", reflect.DeepEqual(f.ControlPlane, next.ControlPlane)},
	} {
		if !c.same {
			changed = append(changed, c.name)
		}
	}
	return changed
}

// APITLS returns the HTTPS configuration, or nil for plain HTTP.
func (f *EdgeFile) APITLS() (*tls.Config, error) {
	if f.API.TLS == nil {
		return nil, nil
	}
	tc, err := f.API.TLS.server(f.dir)
	if err != nil {
		return nil, fmt.Errorf("api.tls: %w", err)
	}
	return tc, nil
}

func (t *TLSFiles) server(dir string) (*tls.Config, error) {
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, fmt.Errorf("cert_file and key_file are required")
	}
	cert, err := loadKeyPair(resolve(dir, t.CertFile), resolve(dir, t.KeyFile))
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}}
	if t.ClientCA != "" {
		pool, err := loadPool(resolve(dir, t.ClientCA))
		if err != nil {
			return nil, fmt.Errorf("client_ca_file: %w", err)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

func (t *TLSFiles) client(dir string) (*tls.Config, error) {
	tc := &tls.Config{ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := loadPool(resolve(dir, t.CAFile))
		if err != nil {
			return nil, fmt.Errorf("ca_file: %w", err)
		}
		tc.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("cert_file and key_file go together")
	}
	if t.CertFile != "" {
		certFile, keyFile := resolve(dir, t.CertFile), resolve(dir, t.KeyFile)
		if _, err := loadKeyPair(certFile, keyFile); err != nil {
			return nil, err
		}
		// Read at each handshake: a renewed certificate (a workload
		// certificate lives 90 days by default) is presented from the
		// next connection on, with no restart. Files that do not load
		// then (a wrong pair) fail that handshake with the reason, never
		// fall back to another certificate.
		tc.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := loadKeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("client certificate: %w", err)
			}
			if cri.SupportsCertificate(&c) != nil {
				// As with tls.Config.Certificates: a certificate the
				// server would not accept (another CA) is not sent.
				return &tls.Certificate{}, nil
			}
			return &c, nil
		}
	}
	return tc, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	b, err := readSmall(path, maxPEMFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// loadKeyPair is tls.LoadX509KeyPair with bounded reads of regular files.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	c, err := readSmall(certFile, maxPEMFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	k, err := readSmall(keyFile, maxPEMFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c, k)
}
