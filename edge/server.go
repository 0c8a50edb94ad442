package edge

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/edge/pool"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/cors"
	"github.com/iop-dev/iop/internal/watch"
)

// ErrServerClosed is returned by Serve and ServeNodes after Shutdown or
// Close.
var ErrServerClosed = errors.New("edge: server closed")

// Server is an Edge: the OpenAI-compatible HTTP API (Handler, Serve), the
// listener for Node sessions (ServeNodes), admission and leases, and the
// one dispatch path every API goes through.
type Server struct {
	log hclog.Logger
	// access is the access log's logger (Config.AccessLog).
	access hclog.Logger
	reg    *nodes.Registry
	pool   *pool.Pool
	snap   atomic.Pointer[snapshot]
	mux    http.Handler

	mu        sync.Mutex
	closed    bool
	servers   map[*http.Server]struct{}
	watch     sync.WaitGroup
	sub       *nodes.Subscription
	usage     usageBook
	limits    limiter
	metrics   *metrics
	reg2      *prometheus.Registry
	closing   atomic.Bool
	responses responseIndex
	cool      cooldown                      // providers that said "not now", out of admission for a while
	watchers  watch.Set                     // WatchStatus's callers, told when a cooldown begins or ends
	configRev atomic.Uint64                 // configuration loads: 1 at New
	source    func() (Config, error)        // Config.ConfigSource
	reloadMu  sync.Mutex                    // one reload (Reload or config.refresh) at a time
	links     map[uint64]context.CancelFunc // ConnectControlPlane calls, ended by Close
	linkSeq   uint64
	issuer    atomic.Pointer[credentiallease.Issuer] // nil without Config.Leases; a reload may change its TTL
	managed   *Managed                               // Config.Managed at New
	apiTLS    atomic.Pointer[tls.Config]             // Config.APITLS as ServeTLS serves it; nil without

	// maxDecoded bounds a decoded answer: the constant maxDecoded, lowered
	// by tests (SetMaxDecoded).
	maxDecoded int
}

// snapshot is the immutable, reloadable part of the configuration. A
// request keeps the snapshot it was admitted under.
type snapshot struct {
	keys           []APIKey
	routes         map[string]*Route
	providers      map[string]providerInfo
	maxBody        int64
	queueTimeout   time.Duration
	maxQueued      int
	maxQueuedBytes int64
	requestTimeout time.Duration
	keepAlive      time.Duration
	longContext    int
	creds          map[string]Credential
	workspaces     map[string]WorkspaceSpec
	cors           *cors.Policy // nil: no CORS headers
	accessLog      bool
	metricsToken   [32]byte // zero: /metrics is open
}

type providerInfo struct {
	nodeID       string
	adapter      string
	apis         apiSet // the APIs its upstream serves natively
	category     execution.Category
	capacity     int
	longCapacity int
	credential   string // leased credential id, if any
	// dropBilling: Claude Code's billing line leaves a request relayed
	// untranslated (ProviderSpec.BillingHeader).
	dropBilling bool
}

// dropsBilling reports whether Claude Code's billing line leaves a request
// relayed untranslated to p: as p says, or, where it says nothing, unless
// p is a hosted API (which may be Anthropic's, the line's one reader).
func dropsBilling(p nodes.ProviderSpec) bool {
	if p.BillingHeader == "" {
		return p.Category != execution.CategoryAPI
	}
	return p.BillingHeader == "drop"
}

func newSnapshot(c *Config) *snapshot {
	s := &snapshot{
		keys:           c.APIKeys,
		routes:         make(map[string]*Route, len(c.Routes)),
		providers:      map[string]providerInfo{},
		maxBody:        cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes),
		queueTimeout:   cmp.Or(c.QueueTimeout, DefaultQueueTimeout),
		maxQueued:      cmp.Or(c.MaxQueued, DefaultMaxQueued),
		maxQueuedBytes: cmp.Or(c.MaxQueuedBytes, DefaultMaxQueuedBytes),
		requestTimeout: cmp.Or(c.RequestTimeout, DefaultRequestTimeout),
		keepAlive:      cmp.Or(c.KeepAlive, DefaultKeepAlive),
		longContext:    c.LongContextTokens,
		creds:          map[string]Credential{},
		workspaces:     map[string]WorkspaceSpec{},
	}
	s.cors, _ = newCORSPolicy(c.CORSOrigins) // Validate checked it
	s.accessLog = c.AccessLog
	s.metricsToken = c.MetricsTokenHash
	for _, w := range c.Workspaces {
		s.workspaces[w.Ref] = w
	}
	for _, cr := range c.Credentials {
		s.creds[cr.ID] = cr
	}
	if s.longContext == 0 {
		s.longContext = DefaultLongContextTokens
	}
	for i := range c.Routes {
		r := c.Routes[i]
		if r.Strategy == "" {
			r.Strategy = Ordered
		}
		s.routes[r.Model] = &r
	}
	for _, n := range c.Nodes {
		for _, p := range n.Providers {
			s.providers[p.ID] = providerInfo{nodeID: n.ID, adapter: p.Adapter, apis: providerAPIs(p.Adapter, p.APIs), category: p.Category, capacity: p.Capacity, longCapacity: p.LongContextCapacity, credential: p.Credential, dropBilling: dropsBilling(p)}
		}
	}
	return s
}

// New validates cfg and returns a Server. It listens nowhere until Serve
// and ServeNodes.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	st, _ := nodes.NewStaticStore(withWorkspaces(cfg.Nodes, cfg.Workspaces))
	var reg *nodes.Registry
	var auth nodes.Authenticator // nil: the registry's token check
	if m := cfg.Managed; m != nil {
		// A CA-verified certificate naming the node id, and the token of
		// the records current at registration.
		auth = identity.NodeAuthenticator{TrustDomain: m.TrustDomain, Next: nodes.AuthenticatorFunc(func(ctx context.Context, h nodes.Hello) error {
			return nodes.TokenAuthenticator{Store: reg.Store()}.Authenticate(ctx, h)
		})}
	}
	reg, err := nodes.New(nodes.Config{Store: st, Epoch: cfg.Epoch, TLS: cfg.NodeTLS, Wire: cfg.NodeWire, Authenticator: auth, Logger: log.Named("nodes")})
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	s := &Server{log: log, access: log.Named("access"), reg: reg, pool: pool.New(), servers: map[*http.Server]struct{}{}, reg2: cfg.Metrics, maxDecoded: maxDecoded}
	s.cool.kick = s.pool.Kick
	s.cool.changed = s.watchers.Notify
	s.pool.AgingStep = cfg.EffectiveAgingStep()
	s.source = cfg.ConfigSource
	if l := cfg.Leases; l != nil {
		is, _ := credentiallease.NewIssuer(l.KeyID, l.Key, l.TTL) // Validate checked it
		s.issuer.Store(is)
	}
	if m := cfg.Managed; m != nil {
		s.managed = &Managed{TrustDomain: m.TrustDomain}
	}
	if cfg.APITLS != nil {
		s.apiTLS.Store(httpsConfig(cfg.APITLS))
	}
	reg.SetLeasePolicy(leasePolicy(&cfg))
	s.snap.Store(newSnapshot(&cfg))
	s.configRev.Store(1)
	s.usage.init()
	s.metrics = newMetrics(s, cfg.Metrics)
	s.mux = s.routes()
	// Capacity can change when a Node connects or reports health: queued
	// requests are re-evaluated then.
	s.sub = reg.Subscribe()
	s.watch.Go(func() {
		for {
			if _, err := s.sub.Next(context.Background()); errors.Is(err, nodes.ErrSubscriptionClosed) {
				return
			}
			s.pool.Kick()
		}
	})
	return s, nil
}

// Reload swaps in a new configuration: keys, routes, limits, Node
// records, and the NodeTLS and APITLS configurations for connections
// accepted later (renewed certificates, other client CAs). Requests
// already admitted keep what they were admitted under; new requests see
// the change; connected Nodes receive config updates. A configuration
// that changes what is fixed at New (Managed, Leases, whether NodeTLS or
// APITLS is set) is refused with nothing applied.
func (s *Server) Reload(cfg Config) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	return s.reloadLocked(cfg)
}

// reloadLocked is Reload with reloadMu held: the configuration snapshot and
// the registry's records always come from the same load.
func (s *Server) reloadLocked(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Managed mode and the lease signer are fixed at New: a reload that
	// would turn them on, off or elsewhere is refused, never half-applied.
	switch {
	case (s.managed == nil) != (cfg.Managed == nil) || (s.managed != nil && s.managed.TrustDomain != cfg.Managed.TrustDomain):
		return errors.New("edge: config: Managed cannot change on reload; restart the Edge")
	case (s.issuer.Load() == nil) != (cfg.Leases == nil) || (cfg.Leases != nil && s.issuer.Load().KeyID() != cfg.Leases.KeyID):
		return errors.New("edge: config: the Leases signing key cannot change on reload; restart the Edge")
	case (s.apiTLS.Load() == nil) != (cfg.APITLS == nil):
		return errors.New("edge: config: APITLS cannot be turned on or off on reload; restart the Edge")
	}
	// Checked before anything changes; it cannot fail after.
	if err := s.reg.SetTLS(cfg.NodeTLS); err != nil {
		return errors.New("edge: config: NodeTLS cannot be turned on or off on reload; restart the Edge (Nodes reconnect)")
	}
	if cfg.APITLS != nil {
		s.apiTLS.Store(httpsConfig(cfg.APITLS))
	}
	if l := cfg.Leases; l != nil {
		// Same key (checked above); the lease lifetime may change.
		is, _ := credentiallease.NewIssuer(l.KeyID, l.Key, l.TTL) // Validate checked it
		s.issuer.Store(is)
	}
	st, _ := nodes.NewStaticStore(withWorkspaces(cfg.Nodes, cfg.Workspaces))
	s.snap.Store(newSnapshot(&cfg))
	s.configRev.Add(1)
	keep := make(map[string]bool, len(cfg.APIKeys))
	for _, k := range cfg.APIKeys {
		keep[k.Name] = true
	}
	s.limits.prune(func(name string) bool { return keep[name] })
	s.reg.SetLeasePolicy(leasePolicy(&cfg))
	s.reg.Refresh(st)
	s.pool.SetAgingStep(cfg.EffectiveAgingStep())
	s.pool.Kick()
	s.log.Info("configuration reloaded", "nodes", len(cfg.Nodes), "routes", len(cfg.Routes), "keys", len(cfg.APIKeys))
	return nil
}

// Handler returns the HTTP API, for mounting in the caller's own server.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve serves the HTTP API on ln (wrap ln with tls.NewListener, or use
// ServeTLS, for HTTPS) until Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.servers[hs] = struct{}{}
	s.mu.Unlock()
	err := hs.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return ErrServerClosed
	}
	return err
}

// ServeTLS serves the HTTP API over HTTPS: with cfg when it is given, or
// else with Config.APITLS, following Reload (ErrNoAPITLS when there is
// none).
func (s *Server) ServeTLS(ln net.Listener, cfg *tls.Config) error {
	if cfg != nil {
		return s.Serve(tls.NewListener(ln, httpsConfig(cfg)))
	}
	if s.apiTLS.Load() == nil {
		ln.Close()
		return ErrNoAPITLS
	}
	// Each handshake takes the configuration of the moment.
	current := &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return s.apiTLS.Load(), nil
	}}
	return s.Serve(tls.NewListener(ln, current))
}

// ErrNoAPITLS is returned by ServeTLS given no configuration when
// Config.APITLS is not set either.
var ErrNoAPITLS = errors.New("edge: ServeTLS without a TLS configuration, and Config.APITLS is not set")

// httpsConfig is a copy of c for serving the API: TLS 1.2 at least,
// HTTP/2 and HTTP/1.1 offered unless c names its protocols.
func httpsConfig(c *tls.Config) *tls.Config {
	c = c.Clone()
	if c.MinVersion < tls.VersionTLS12 {
		c.MinVersion = tls.VersionTLS12
	}
	if len(c.NextProtos) == 0 {
		c.NextProtos = []string{"h2", "http/1.1"}
	}
	return c
}

// ServeNodes accepts Node sessions on ln until Shutdown or Close.
func (s *Server) ServeNodes(ln net.Listener) error {
	err := s.reg.Serve(ln)
	if errors.Is(err, nodes.ErrClosed) {
		return ErrServerClosed
	}
	return err
}

// Registry returns the node registry, for status and lifecycle events.
func (s *Server) Registry() *nodes.Registry { return s.reg }

// Shutdown stops accepting requests, lets in-flight ones finish until ctx
// ends, then closes Node sessions gracefully. Requests still running when
// ctx ends get their API's error terminal (a stream's error event, or an
// error status) before Shutdown returns, within a few seconds more.
func (s *Server) Shutdown(ctx context.Context) error {
	servers := s.stop()
	var errs []error
	for _, hs := range servers {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.reg.Shutdown(ctx))
	if ctx.Err() != nil {
		// The grace ended with requests in flight. Their Node sessions are
		// closed now, so each ends with its API's error terminal: the
		// handlers get a moment to write it before the connections go
		// (a process that exits after Shutdown would otherwise cut them
		// off without one).
		tctx, cancel := context.WithTimeout(context.Background(), terminalGrace)
		for _, hs := range servers {
			hs.Shutdown(tctx) // its listeners are closed already; only the wait matters
		}
		cancel()
		for _, hs := range servers {
			hs.Close()
		}
	}
	s.finish()
	return errors.Join(errs...)
}

// terminalGrace bounds how long Shutdown, past its own deadline, waits
// for the requests it cut off to write their error terminals.
const terminalGrace = 2 * time.Second

// Close stops everything at once: requests in flight end with an error.
func (s *Server) Close() error {
	for _, hs := range s.stop() {
		hs.Close()
	}
	s.reg.Close()
	s.finish()
	return nil
}

func (s *Server) stop() []*http.Server {
	s.closing.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, cancel := range s.links {
		cancel()
	}
	var out []*http.Server
	for hs := range s.servers {
		out = append(out, hs)
	}
	return out
}

func (s *Server) finish() {
	s.cool.close()
	s.pool.Close()
	s.sub.Close()
	s.watch.Wait()
}

// Nodes returns every configured Node with its providers, the pressure
// figures (in flight, queued) and cooldowns coming from admission.
func (s *Server) Nodes() []nodes.NodeSnapshot {
	snaps := s.reg.Snapshot()
	s.addPressure(snaps)
	return snaps
}

// PoolStats returns the admission counters (leases granted and released).
func (s *Server) PoolStats() pool.Stats { return s.pool.Stats() }

// HashKey returns the value to store in APIKey.Hash for a key.
func HashKey(key string) [32]byte { return sha256.Sum256([]byte(key)) }

// GenerateKey returns a new API key with 256 random bits.
func GenerateKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "sk-iop-" + base64.RawURLEncoding.EncodeToString(b), nil
}

// authenticate returns the key matching a presented secret. Every
// configured key is compared, in constant time, whether or not an earlier
// one matched.
func (snap *snapshot) authenticate(presented string) *APIKey {
	if presented == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(presented))
	var found *APIKey
	for i := range snap.keys {
		if subtle.ConstantTimeCompare(sum[:], snap.keys[i].Hash[:]) == 1 {
			found = &snap.keys[i]
		}
	}
	return found
}

func (k *APIKey) allows(model string) bool {
	for _, m := range k.Models {
		if m == "*" || m == model {
			return true
		}
	}
	return false
}

func (s *Server) newRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}
