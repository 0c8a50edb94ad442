package config

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/iop-dev/iop/controlplane"
)

// HubFile is hub.yaml, the Control Plane's file: which Edges it enrolls
// and who may operate it. It holds no Edge or Node configuration: each
// Edge owns its own.
type HubFile struct {
	EdgesListen string    `yaml:"edges_listen"`
	EdgeTLS     *TLSFiles `yaml:"edge_tls"`
	HTTP        struct {
		Listen string    `yaml:"listen"`
		TLS    *TLSFiles `yaml:"tls"`
	} `yaml:"http"`
	// AllowUnknownEdges enrolls an Edge not listed below when its verified
	// client certificate names it; it needs edge_tls.client_ca_file.
	AllowUnknownEdges bool `yaml:"allow_unknown_edges"`
	// TrustDomain turns on managed mode for Edges: each must present an
	// Edge-CA certificate with spiffe://<trust_domain>/edge/<id> (needs
	// edge_tls.client_ca_file).
	TrustDomain string `yaml:"trust_domain"`
	Edges       []struct {
		ID    string  `yaml:"id"`
		Token *Secret `yaml:"token"`
	} `yaml:"edges"`
	Operators []struct {
		Name  string `yaml:"name"`
		Token Secret `yaml:"token"`
	} `yaml:"operators"`
	// OperatorMTLS accepts a verified client certificate on the HTTPS
	// server (http.tls.client_ca_file) as an operator, named by its
	// common name; a workload's certificate (with a SPIFFE ID) never is.
	OperatorMTLS bool `yaml:"operator_mtls"`
	Limits       struct {
		StatusInterval time.Duration `yaml:"status_interval"`
		StatusTimeout  time.Duration `yaml:"status_timeout"`
		CommandTimeout time.Duration `yaml:"command_timeout"`
		ProbeTimeout   time.Duration `yaml:"probe_timeout"`
		HelloTimeout   time.Duration `yaml:"hello_timeout"`
		MaxPending     int           `yaml:"max_pending"`
		KeepAlive      time.Duration `yaml:"keep_alive"`
	} `yaml:"limits"`

	dir string
}

// LoadHub reads and validates hub.yaml.
func LoadHub(path string) (*HubFile, error) {
	b, dir, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("hub config: %w", err)
	}
	f, err := ParseHub(b, dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// ParseHub parses hub.yaml from bytes; relative paths resolve against dir.
func ParseHub(b []byte, dir string) (*HubFile, error) {
	var f HubFile
	if err := decodeStrict(b, &f); err != nil {
		return nil, err
	}
	f.dir = dir
	if err := checkAddr("edges_listen", f.EdgesListen); err != nil {
		return nil, err
	}
	if err := checkAddr("http.listen", f.HTTP.Listen); err != nil {
		return nil, err
	}
	if len(f.Operators) == 0 && !f.OperatorMTLS {
		return nil, fmt.Errorf("operators: at least one operator is required (or operator_mtls)")
	}
	if f.OperatorMTLS && (f.HTTP.TLS == nil || f.HTTP.TLS.ClientCA == "") {
		return nil, fmt.Errorf("operator_mtls needs http.tls.client_ca_file")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"limits.status_interval", f.Limits.StatusInterval}, {"limits.status_timeout", f.Limits.StatusTimeout},
		{"limits.command_timeout", f.Limits.CommandTimeout}, {"limits.probe_timeout", f.Limits.ProbeTimeout},
		{"limits.hello_timeout", f.Limits.HelloTimeout}, {"limits.keep_alive", f.Limits.KeepAlive},
	} {
		if d.v < 0 {
			return nil, fmt.Errorf("%s is negative", d.name)
		}
	}
	if f.Limits.MaxPending < 0 {
		return nil, fmt.Errorf("limits.max_pending is negative")
	}
	if _, err := f.Config(); err != nil {
		return nil, err
	}
	return &f, nil
}

// Config builds the library configuration.
func (f *HubFile) Config() (controlplane.Config, error) {
	cfg := controlplane.Config{
		AllowUnknownEdges: f.AllowUnknownEdges,
		TrustDomain:       f.TrustDomain,
		OperatorMTLS:      f.OperatorMTLS,
		StatusInterval:    f.Limits.StatusInterval,
		StatusTimeout:     f.Limits.StatusTimeout,
		CommandTimeout:    f.Limits.CommandTimeout,
		ProbeTimeout:      f.Limits.ProbeTimeout,
		HelloTimeout:      f.Limits.HelloTimeout,
		MaxPending:        f.Limits.MaxPending,
		KeepAlive:         f.Limits.KeepAlive,
	}
	if f.EdgeTLS != nil {
		tc, err := f.EdgeTLS.server(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("edge_tls: %w", err)
		}
		cfg.TLS = tc
	}
	for i, e := range f.Edges {
		rec := controlplane.EdgeRecord{ID: e.ID}
		if e.Token != nil {
			h, err := e.Token.hash(f.dir)
			if err != nil {
				return cfg, fmt.Errorf("edges[%d].token: %w", i, err)
			}
			rec.TokenHash = h
		}
		cfg.Edges = append(cfg.Edges, rec)
	}
	for i, o := range f.Operators {
		if o.Name == "" {
			return cfg, fmt.Errorf("operators[%d].name is required", i)
		}
		h, err := o.Token.hash(f.dir)
		if err != nil {
			return cfg, fmt.Errorf("operators[%d].token: %w", i, err)
		}
		cfg.Operators = append(cfg.Operators, controlplane.Operator{Name: o.Name, TokenHash: h})
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// HTTPTLS returns the operator server's HTTPS configuration, or nil for
// plain HTTP (keep that on loopback).
// StartOnly lists the settings of next that differ from f's among those
// a running Hub reads only when it starts (the listen addresses and the
// limits): a reload keeps the running ones, so an operator must be told
// that these wait for a restart.
func (f *HubFile) StartOnly(next *HubFile) []string {
	var changed []string
	if f.EdgesListen != next.EdgesListen {
		changed = append(changed, "edges_listen")
	}
	if f.HTTP.Listen != next.HTTP.Listen {
		changed = append(changed, "http.listen")
	}
	if f.Limits != next.Limits {
		changed = append(changed, "limits")
	}
	return changed
}

func (f *HubFile) HTTPTLS() (*tls.Config, error) {
	if f.HTTP.TLS == nil {
		return nil, nil
	}
	tc, err := f.HTTP.TLS.server(f.dir)
	if err != nil {
		return nil, fmt.Errorf("http.tls: %w", err)
	}
	if f.OperatorMTLS {
		// A browser without a certificate may still sign in with a token.
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return tc, nil
}
