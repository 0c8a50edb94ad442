package edge

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Edge's Prometheus series. Labels are bounded by
// configuration: route names, API names, outcomes, key names, node and
// provider ids. Request ids, prompts and secrets never become labels.
type metrics struct {
	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	ttft         *prometheus.HistogramVec
	queueWait    *prometheus.HistogramVec
	tokens       *prometheus.CounterVec
	tunnelBytes  *prometheus.CounterVec
	leasesIssued *prometheus.CounterVec

	// The series every request touches, by their label values (see
	// children).
	requestsBy  children[requestSeries, prometheus.Counter]
	durationBy  children[routeSeries, prometheus.Observer]
	ttftBy      children[routeSeries, prometheus.Observer]
	queueWaitBy children[string, prometheus.Observer]
	tokensBy    children[string, *[2]prometheus.Counter] // input, output
	// Tunnel bytes by direction, made on first use.
	upstreamBytes, downstreamBytes func() prometheus.Counter
}

type routeSeries struct {
	route string
	api   api
}

type requestSeries struct {
	routeSeries
	outcome string
}

// children caches a metric vector's children by their label values. A
// vector's own lookup checks the UTF-8 of every label value and hashes it
// byte by byte on every call; a request's seven lookups were 0.5% of
// BenchmarkGateway's CPU, and through this cache they cost half that. A
// child is still made on its first use, so a series appears only once it
// has something to say. The keys are the vectors' own bounded label
// values.
type children[K comparable, M any] struct {
	mu       sync.RWMutex
	m        map[K]M
	newChild func(K) M
}

func (c *children[K, M]) get(k K) M {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[k]; ok {
		return v
	}
	if c.m == nil {
		c.m = make(map[K]M)
	}
	v = c.newChild(k)
	c.m[k] = v
	return v
}

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func newMetrics(s *Server, reg *prometheus.Registry) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iop_edge_requests_total", Help: "API requests by route, API and outcome.",
		}, []string{"route", "api", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "iop_edge_request_duration_seconds", Help: "Time from request to its last byte, by route and API.", Buckets: latencyBuckets,
		}, []string{"route", "api"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "iop_edge_time_to_first_token_seconds", Help: "Time from request to the first streamed event, by route and API.", Buckets: latencyBuckets,
		}, []string{"route", "api"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "iop_edge_queue_wait_seconds", Help: "Time admitted requests waited for a slot, by route.", Buckets: latencyBuckets,
		}, []string{"route"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iop_edge_tokens_total", Help: "Tokens from reported usage, by API key and direction (input, output).",
		}, []string{"key", "direction"}),
		tunnelBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iop_edge_tunnel_bytes_total", Help: "Bytes relayed through raw provider tunnels, by direction (upstream: to the provider; downstream: to the client).",
		}, []string{"direction"}),
		leasesIssued: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "iop_edge_credential_leases_issued_total", Help: "Credential leases issued, by provider.",
		}, []string{"provider"}),
	}
	m.requestsBy.newChild = func(k requestSeries) prometheus.Counter {
		return m.requests.WithLabelValues(k.route, k.api.String(), k.outcome)
	}
	m.durationBy.newChild = func(k routeSeries) prometheus.Observer {
		return m.duration.WithLabelValues(k.route, k.api.String())
	}
	m.ttftBy.newChild = func(k routeSeries) prometheus.Observer {
		return m.ttft.WithLabelValues(k.route, k.api.String())
	}
	m.queueWaitBy.newChild = func(route string) prometheus.Observer { return m.queueWait.WithLabelValues(route) }
	m.tokensBy.newChild = func(key string) *[2]prometheus.Counter {
		return &[2]prometheus.Counter{m.tokens.WithLabelValues(key, "input"), m.tokens.WithLabelValues(key, "output")}
	}
	m.upstreamBytes = sync.OnceValue(func() prometheus.Counter { return m.tunnelBytes.WithLabelValues("upstream") })
	m.downstreamBytes = sync.OnceValue(func() prometheus.Counter { return m.tunnelBytes.WithLabelValues("downstream") })
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.ttft, m.queueWait, m.tokens, m.tunnelBytes, m.leasesIssued, &stateCollector{s: s})
	}
	return m
}

// stateCollector reports gauges read from the registry and the pool at
// scrape time.
type stateCollector struct{ s *Server }

var (
	descQueued     = prometheus.NewDesc("iop_edge_queue_depth", "Requests waiting for a slot.", nil, nil)
	descMaxQueued  = prometheus.NewDesc("iop_edge_queue_max", "The most requests that may wait for a slot (Config.MaxQueued); beyond, a newcomer is refused (outcome queue_full).", nil, nil)
	descQueueBytes = prometheus.NewDesc("iop_edge_queue_bytes", "Bytes of request bodies the requests waiting for a slot hold.", nil, nil)
	descMaxBytes   = prometheus.NewDesc("iop_edge_queue_max_bytes", "The most body bytes the waiting requests may hold together (Config.MaxQueuedBytes); beyond, a newcomer is refused (outcome queue_full).", nil, nil)
	descInFlight   = prometheus.NewDesc("iop_edge_in_flight", "Admitted requests in flight, by node and provider.", []string{"node", "provider"}, nil)
	descProvQueued = prometheus.NewDesc("iop_edge_provider_queued", "Queued requests that could run on a provider.", []string{"node", "provider"}, nil)
	descConnected  = prometheus.NewDesc("iop_edge_node_connected", "1 when the node is dispatch-ready.", []string{"node"}, nil)
	descGeneration = prometheus.NewDesc("iop_edge_node_generation", "The node's current connection generation (0 when none).", []string{"node"}, nil)
	descTLSExpiry  = prometheus.NewDesc("iop_edge_tls_certificate_expiry_timestamp_seconds", "When the certificate a listener serves expires (Unix seconds), by listener (api: Config.APITLS, nodes: Config.NodeTLS); absent for one chosen per handshake.", []string{"listener"}, nil)
	descNodeCert   = prometheus.NewDesc("iop_edge_node_certificate_expiry_timestamp_seconds", "When the client certificate a connected node presented expires (Unix seconds).", []string{"node"}, nil)
	descDraining   = prometheus.NewDesc("iop_edge_node_draining", "1 when nothing new is admitted to the node: an operator drains it, or it is shutting down and finishing its work.", []string{"node"}, nil)
	descCooling    = prometheus.NewDesc("iop_edge_provider_cooling", "1 while a provider that answered 429, 503 or 529, or one of its models (429), is kept out of admission for its Retry-After.", []string{"node", "provider"}, nil)
	descKeyReqs    = prometheus.NewDesc("iop_edge_key_requests_total", "Requests admitted per API key.", []string{"key"}, nil)
	descKeyLimited = prometheus.NewDesc("iop_edge_key_limited_total", "Requests refused (429) by an API key's own limits, by key and limit (concurrent, requests, tokens).", []string{"key", "limit"}, nil)
	descKeyEst     = prometheus.NewDesc("iop_edge_key_estimated_tokens_total", "Tokens charged to API keys' token budgets by estimate, for answers that ended without reported usage.", []string{"key"}, nil)
	descKeyCached  = prometheus.NewDesc("iop_edge_key_cached_input_tokens_total", "Input tokens providers read from their prompt caches, per API key (part of iop_edge_tokens_total's input).", []string{"key"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descQueued, descMaxQueued, descQueueBytes, descMaxBytes, descInFlight, descProvQueued, descConnected, descGeneration, descDraining, descTLSExpiry, descNodeCert, descCooling, descKeyReqs, descKeyLimited, descKeyEst, descKeyCached} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ps, snap := c.s.pool.Stats(), c.s.snap.Load()
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(ps.Queued))
	ch <- prometheus.MustNewConstMetric(descMaxQueued, prometheus.GaugeValue, float64(snap.maxQueued))
	ch <- prometheus.MustNewConstMetric(descQueueBytes, prometheus.GaugeValue, float64(ps.QueuedBytes))
	ch <- prometheus.MustNewConstMetric(descMaxBytes, prometheus.GaugeValue, float64(snap.maxQueuedBytes))
	for listener, tc := range map[string]*tls.Config{"api": c.s.apiTLS.Load(), "nodes": c.s.reg.TLS()} {
		if end, ok := certExpiry(tc); ok {
			ch <- prometheus.MustNewConstMetric(descTLSExpiry, prometheus.GaugeValue, float64(end.Unix()), listener)
		}
	}
	for _, n := range c.s.Nodes() {
		conn := 0.0
		if n.Connected {
			conn = 1
		}
		ch <- prometheus.MustNewConstMetric(descConnected, prometheus.GaugeValue, conn, n.ID)
		ch <- prometheus.MustNewConstMetric(descGeneration, prometheus.GaugeValue, float64(n.Generation), n.ID)
		draining := 0.0
		if n.Draining {
			draining = 1
		}
		ch <- prometheus.MustNewConstMetric(descDraining, prometheus.GaugeValue, draining, n.ID)
		if !n.CertificateExpiry.IsZero() {
			ch <- prometheus.MustNewConstMetric(descNodeCert, prometheus.GaugeValue, float64(n.CertificateExpiry.Unix()), n.ID)
		}
		for _, p := range n.Providers {
			ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(p.InFlight), n.ID, p.ID)
			ch <- prometheus.MustNewConstMetric(descProvQueued, prometheus.GaugeValue, float64(p.Queued), n.ID, p.ID)
			cooling := 0.0
			if c.s.cool.any(p.ID) {
				cooling = 1
			}
			ch <- prometheus.MustNewConstMetric(descCooling, prometheus.GaugeValue, cooling, n.ID, p.ID)
		}
	}
	for _, u := range c.s.Usage() {
		ch <- prometheus.MustNewConstMetric(descKeyReqs, prometheus.CounterValue, float64(u.Requests), u.Key)
		ch <- prometheus.MustNewConstMetric(descKeyEst, prometheus.CounterValue, float64(u.EstimatedTokens), u.Key)
		ch <- prometheus.MustNewConstMetric(descKeyCached, prometheus.CounterValue, float64(u.CachedInputTokens), u.Key)
		ch <- prometheus.MustNewConstMetric(descKeyLimited, prometheus.CounterValue, float64(u.Limited.Concurrent), u.Key, limitConcurrent)
		ch <- prometheus.MustNewConstMetric(descKeyLimited, prometheus.CounterValue, float64(u.Limited.Requests), u.Key, limitRequests)
		ch <- prometheus.MustNewConstMetric(descKeyLimited, prometheus.CounterValue, float64(u.Limited.Tokens), u.Key, limitTokens)
	}
}

// certExpiry is when the first certificate of tc expires; false when tc
// has none in place (nil, or one chosen per handshake).
func certExpiry(tc *tls.Config) (time.Time, bool) {
	if tc == nil || len(tc.Certificates) == 0 || len(tc.Certificates[0].Certificate) == 0 {
		return time.Time{}, false
	}
	leaf := tc.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(tc.Certificates[0].Certificate[0]); err != nil {
			return time.Time{}, false
		}
	}
	return leaf.NotAfter, true
}

// recorder wraps a ResponseWriter to see the status, the first streamed
// event and the bytes written, for metrics and outcomes.
type recorder struct {
	http.ResponseWriter
	rid     string // the request's id, for error bodies that carry it
	status  int
	first   time.Time
	written int64
	outcome string
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.first.IsZero() && len(p) > 0 && p[0] != ':' {
		r.first = time.Now()
	}
	n, err := r.ResponseWriter.Write(p)
	r.written += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
		return
	}
	// A middleware of the caller's own may wrap the writer and expose
	// its Flush only through Unwrap; without one, streams would sit in
	// the server's buffer.
	http.NewResponseController(r.ResponseWriter).Flush()
}

func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(r.ResponseWriter).Hijack()
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// outcomeOf names a finished request's outcome.
func (r *recorder) outcomeOf() string {
	if r.outcome != "" {
		return r.outcome
	}
	return statusOutcome(r.status)
}

// statusOutcome names the outcome of a request answered with status s.
// A stream that began before its provider's head came and then failed
// is named as its failure's status would be (failHead).
func statusOutcome(s int) string {
	switch {
	case s == 0:
		return "canceled"
	case s < 300:
		return "ok"
	case s == http.StatusUnauthorized:
		return "unauthenticated"
	case s == http.StatusTooManyRequests:
		return "rate_limited"
	case s == http.StatusGatewayTimeout:
		return "timeout"
	case s < 500:
		return "client_error"
	}
	return "upstream_error"
}

func (a api) String() string {
	switch a {
	case apiChat:
		return "chat"
	case apiResponses:
		return "responses"
	case apiEmbeddings:
		return "embeddings"
	case apiMessages:
		return "messages"
	case apiCompact:
		return "responses_compact"
	}
	return strconv.Itoa(int(a))
}

// logAccess writes a finished generation request's access-log line
// (Config.AccessLog). key, req and x are nil for a request that ended
// before it was authenticated, read or dispatched.
func (s *Server) logAccess(w *recorder, a api, route string, key *APIKey, req *request, x *exchange, streamed bool, start time.Time, took time.Duration) {
	kv := make([]any, 0, 34)
	kv = append(kv, "request_id", w.rid)
	// The provider's own id too, which a tunnelled answer gives the client
	// in place of the Edge's: a request can be followed from either end,
	// and taken to the provider.
	if req != nil && req.providerRID != "" {
		kv = append(kv, "provider_request_id", req.providerRID)
	}
	kv = append(kv, "api", a.String(), "model", route)
	if key != nil {
		kv = append(kv, "key", key.Name)
	}
	kv = append(kv, "status", w.status, "outcome", w.outcomeOf(), "stream", streamed)
	if x != nil {
		kv = append(kv, "provider", x.lease.ProviderID, "node", x.lease.NodeID, "generation", x.lease.Generation, "queued_ms", ms(x.lease.Waited))
	}
	if !w.first.IsZero() {
		kv = append(kv, "first_byte_ms", ms(w.first.Sub(start)))
	}
	kv = append(kv, "duration_ms", ms(took), "bytes", w.written)
	if req != nil && req.usage != nil {
		kv = append(kv, "input_tokens", req.usage.InputTokens, "output_tokens", req.usage.OutputTokens)
		if req.usage.CachedInputTokens > 0 {
			kv = append(kv, "cached_input_tokens", req.usage.CachedInputTokens)
		}
	}
	if req != nil && req.estimated > 0 {
		kv = append(kv, "estimated_tokens", req.estimated)
	}
	s.access.Info("request", kv...)
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
