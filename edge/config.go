package edge

import (
	"cmp"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/iop-dev/iop/credentiallease"
	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/edge/nodes"
	"github.com/iop-dev/iop/edge/pool"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
	"github.com/iop-dev/iop/wire"
)

// Defaults applied when a Config field is zero.
const (
	DefaultMaxBodyBytes   = 16 << 20
	DefaultQueueTimeout   = 30 * time.Second
	DefaultRequestTimeout = 10 * time.Minute
	DefaultKeepAlive      = 15 * time.Second
	DefaultMaxQueued      = 1024
	DefaultMaxQueuedBytes = 256 << 20

	DefaultLongContextTokens = 32 << 10
)

// Config configures a Server: the Edge's side of edge.yaml as Go values.
// Reload takes a whole new Config; only the fields marked "reloadable"
// change on Reload, the rest are fixed at New.
type Config struct {
	// Nodes are the Nodes this Edge owns, with their providers
	// (reloadable).
	Nodes []nodes.Record
	// APIKeys are the keys clients present (reloadable).
	APIKeys []APIKey
	// Routes map public model names to provider targets (reloadable).
	Routes []Route
	// MaxBodyBytes bounds request bodies; larger ones get 413. It bounds
	// a body sent compressed (Content-Encoding gzip or deflate, which the
	// Edge decodes; another coding gets 415) both as it came and as it
	// decodes. Zero means DefaultMaxBodyBytes (reloadable).
	MaxBodyBytes int64
	// QueueTimeout bounds how long a request waits for a free slot before
	// 503. Zero means DefaultQueueTimeout (reloadable).
	QueueTimeout time.Duration
	// MaxQueued bounds how many requests may wait for a slot at once,
	// over every route. When that many wait, a newcomer is refused at
	// once (503, Anthropic 529, with Retry-After) unless it ranks above
	// the request that would be served last (a higher priority class
	// than that one's, aging counted), which is then refused in its
	// place. Zero means DefaultMaxQueued (reloadable).
	MaxQueued int
	// MaxQueuedBytes bounds the bodies the waiting requests hold
	// together, so that the queue's memory is bounded whatever the
	// bodies' sizes: MaxQueued requests of MaxBodyBytes each would be
	// 16 GiB with the defaults. A newcomer that would pass it is refused
	// as for MaxQueued, unless the last in line all rank below it, in
	// which case as many of them as it takes are refused in its place.
	// It must be at least MaxBodyBytes, so that every body the Edge
	// accepts can wait. Zero means DefaultMaxQueuedBytes (reloadable).
	MaxQueuedBytes int64
	// RequestTimeout is every request's hard deadline. Zero means
	// DefaultRequestTimeout (reloadable).
	RequestTimeout time.Duration
	// KeepAlive is how often a silent stream gets a keep-alive, so that
	// proxies and clients keep it open: an Anthropic client a ping event,
	// a Responses client a response.in_progress event (clients such as
	// Codex count events, not comments), a Chat Completions client an SSE
	// comment. Zero means DefaultKeepAlive (reloadable).
	KeepAlive time.Duration
	// LongContextTokens is the estimated prompt size from which a request
	// needs one of its provider's long-context slots. The estimate is
	// EstimateTokens: the request body's bytes divided by 4, rounded up,
	// an inline image counted as at most ImageTokens; no tokenizer runs
	// on the request path. Zero means DefaultLongContextTokens
	// (reloadable).
	LongContextTokens int
	// AgingStep is how long a queued request takes to climb one priority
	// class, so that a low class is never starved: a request that has
	// climbed to the highest class any key has is served before every
	// request that came after it. That must happen while it may still
	// wait (QueueTimeout, or RequestTimeout when shorter), or a steady
	// flow of higher-class requests would overtake it until it was
	// refused; Validate refuses an AgingStep that climbs the keys'
	// span of priorities too slowly for that. Zero derives a step that
	// climbs the span in half that wait, and is at most
	// pool.DefaultAgingStep (reloadable).
	AgingStep time.Duration
	// Metrics, when set, receives the Edge's Prometheus metrics and is
	// served on /metrics. Nil means no metrics.
	Metrics *prometheus.Registry
	// MetricsTokenHash, when set, is the SHA-256 (HashKey) of the bearer
	// token /metrics requires (Prometheus: authorization credentials);
	// without it a scrape gets 401. Zero leaves /metrics open to whoever
	// reaches the API listener. The metrics name API keys, Nodes and
	// providers and count each key's tokens, so set it wherever clients
	// you do not operate reach that listener. /healthz and /readyz stay
	// open either way (reloadable).
	MetricsTokenHash [32]byte
	// CORSOrigins are the browser origins whose pages may call the API
	// under /v1/ directly ("https://chat.example.com", exactly as a
	// browser sends its Origin header), or "*" alone for every origin.
	// Preflights from them are answered and answers carry
	// Access-Control-Allow-Origin; the API key is still required. Empty,
	// the default, sends no CORS header (reloadable).
	CORSOrigins []string
	// AccessLog logs one line per generation request as it ends, at Info
	// level on Logger's "access" sub-logger: the request id, API, model,
	// key name, provider, node and generation, status and outcome, queue
	// wait, time to first byte and duration, bytes written, the tokens
	// the provider reported and those charged by estimate (see APIKey).
	// Never a key, prompt or output (reloadable).
	AccessLog bool

	// Epoch is this Edge run's boot epoch (nodes.NextEpoch). Required.
	Epoch uint32
	// NodeTLS, when set, makes Node sessions TLS 1.3 (mutual with
	// ClientCAs). Nil means plaintext. Reload replaces it for sessions
	// accepted later (a renewed certificate, another client CA pool needs
	// no restart); a reload that would turn it on or off is refused.
	NodeTLS *tls.Config
	// APITLS, when set, is the HTTPS configuration ServeTLS uses when
	// given none. Unlike a configuration passed to ServeTLS, it follows
	// Reload as NodeTLS does: connections accepted later get the reloaded
	// certificates and client CAs. A reload that would turn it on or off
	// is refused.
	APITLS *tls.Config
	// NodeWire tunes Node sessions. Nil means wire defaults.
	NodeWire *wire.Config
	// Logger receives server events (ids and classes; never keys, prompts
	// or output). Nil means silent.
	Logger hclog.Logger
	// Credentials are the hosted-API credentials the Edge leases to Nodes
	// for providers that name one (nodes.ProviderSpec.Credential)
	// (reloadable: a new Revision, Revoked or a removed entry takes effect
	// for new requests and, through the lease policy, on the Nodes).
	Credentials []Credential
	// Leases signs credential leases. Required when a provider names a
	// credential. Its key is fixed at New (a reload that sets, removes or
	// changes it is refused); its TTL follows a reload, for leases issued
	// after it.
	Leases *LeaseSigner
	// Workspaces are the workspace refs requests may be admitted to, each
	// on one Node (reloadable).
	Workspaces []WorkspaceSpec
	// Managed turns on managed mode: Nodes register only with a
	// CA-verified workload certificate naming their node id (NodeTLS must
	// verify client certificates against the Edge CA), and every hosted-API
	// provider (category api) gets its credential only through leases.
	// Fixed at New: a reload that changes it is refused.
	Managed *Managed

	// ConfigSource, when set, is where the Control Plane's config.refresh
	// command reads the new configuration from (the examples/edge daemon
	// re-reads edge.yaml). Nil means the Edge refuses that command.
	ConfigSource func() (Config, error)
}

// APIKey is one client credential.
type APIKey struct {
	// Name is the principal the key authenticates, used in logs and
	// usage (never the key).
	Name string
	// Hash is the SHA-256 of the key (HashKey). The key itself, at least
	// 128 random bits, is never stored.
	Hash [32]byte
	// Models the key may use: public route names, or "*" for all.
	Models []string
	// Priority is the key's admission class: higher classes are served
	// first when providers are busy; zero is the lowest.
	Priority int
	// RequestsPerMinute, TokensPerMinute (input plus output, counted from
	// the usage providers report) and MaxConcurrent limit the key; beyond
	// them a request gets 429 with Retry-After. Zero means no limit.
	// MaxConcurrent counts the key's requests from admission to their
	// end, those waiting for a slot included, so it also bounds the
	// key's share of the queue (Config.MaxQueued, MaxQueuedBytes): a key
	// without it can fill the queue and turn away the newcomers of its
	// class and below. RequestsPerMinute counts the requests the Edge dispatched to a
	// provider, as Usage does: a malformed request (400) or one refused
	// for want of a slot (503) takes nothing from it. Token counts
	// (count_tokens) and reads of a stored response (GET
	// /v1/responses/{id}) are neither limited nor counted and take no
	// provider slot: they generate nothing, and Anthropic too limits
	// token counting apart from messages. An answer whose usage no one
	// reported (a command-line provider's, one cut short before its
	// usage, one from a provider that reports none) counts toward
	// TokensPerMinute by estimate: EstimateTokens of its request body for
	// the input, and for the output its text bytes / 4 where the Edge
	// decodes the answer, one token per streamed delta event or body
	// bytes / 4 where it passes the provider's answer through
	// (Usage.EstimatedTokens). A stream cut short after a usage snapshot
	// (Anthropic's message_start) counts what it reported and, by
	// estimate, the output beyond it. An answer refused with an error
	// status counts nothing. Each per-minute limit is a bucket that holds
	// a minute's worth and refills evenly; one that a reload adds to a key
	// starts full, one that it changes keeps what is left (within the new
	// limit), one that it removes is forgotten.
	RequestsPerMinute int
	TokensPerMinute   int
	MaxConcurrent     int
}

// Credential is a hosted-API secret the Edge leases to Nodes, one call at
// a time.
type Credential struct {
	// ID names the credential in provider specs and leases.
	ID string
	// Revision increases when the secret is rotated; Nodes refuse leases
	// of a revision older than the current one.
	Revision uint64
	// Secret reads the value at lease time (a file or an environment
	// variable: execution.FileCredential, execution.EnvCredential).
	Secret execution.Credential
	// Revoked stops leasing it; Nodes refuse leases already issued. The
	// providers it serves are no candidates while it is revoked: a
	// request, waiting ones included, goes to the route's other
	// providers or is refused (503).
	Revoked bool
}

// LeaseSigner is the Edge's lease-signing key. Nodes pin KeyID and the
// public key.
type LeaseSigner struct {
	KeyID string
	Key   ed25519.PrivateKey
	// TTL is each lease's lifetime. Zero means credentiallease.DefaultTTL;
	// at most credentiallease.MaxTTL.
	TTL time.Duration
}

// Managed configures managed mode.
type Managed struct {
	// TrustDomain is the SPIFFE trust domain of the Edge CA's workload
	// certificates (spiffe://<trust-domain>/node/<id>): lowercase
	// letters, digits, '.', '_' and '-' (identity.CheckTrustDomain).
	TrustDomain string
}

// Strategy says how a route picks among its targets.
type Strategy string

// Route strategies.
const (
	// Ordered prefers the first target with a free slot.
	Ordered Strategy = "ordered"
	// Weighted chooses among targets with free slots by weight.
	Weighted Strategy = "weighted"
	// LeastLoaded takes the target with a free slot whose provider has
	// the smallest share of its capacity in flight (the first in order
	// among equals): requests spread over providers in proportion to
	// their capacity, and an idle one is used before a busy one.
	LeastLoaded Strategy = "least_loaded"
)

// choice is the pool's way to choose for strategy s.
func (s Strategy) choice() pool.Choice {
	switch s {
	case Weighted:
		return pool.ByWeight
	case LeastLoaded:
		return pool.LeastLoaded
	}
	return pool.First
}

// Route maps a public model name to provider targets.
type Route struct {
	Model    string
	Strategy Strategy
	Targets  []Target
}

// Target is one provider and the upstream model name to send it.
type Target struct {
	ProviderID string
	Model      string
	// Weight is the target's share of a weighted route's choices, 0 to
	// pool.MaxWeight (0 counts as 1).
	Weight int
	// ModelClass says, for a request translated into Chat Completions or
	// Responses, how Model takes an output limit and a reasoning effort,
	// and whether it is given its reasoning back, where its name does not
	// tell (an Azure deployment is named by its operator):
	// ModelOpenAIReasoning, ModelOpenAIChat, ModelReasoningContent or
	// ModelOther. Empty reads it from the name: "o3", "gpt-5.1" and
	// "openai/gpt-5-mini" are reasoning models, "gpt-4o" and "gpt-4.1"
	// chat models, a name with "deepseek" in it reasoning-content,
	// anything else other.
	ModelClass string
	// MaxTokens is the output limit sent to Model when a request
	// translated for it sets none, where the provider's API requires
	// one (Anthropic Messages). Zero reads it from the model's name: the
	// most the model writes for a Claude model the Edge knows (64,000 for
	// the Claude 4 models after Opus 4.1 and for 3.7 Sonnet, 32,000 for
	// Opus 4 and 4.1, 8,192 for 3.5 Haiku and Sonnet), 4096 for any other,
	// so that an answer its client left unbounded (Codex and most OpenAI
	// clients send no limit) is not cut short. Give it for a model the
	// name does not tell, or one that writes more.
	MaxTokens int
	// Thinking says how a Claude Model is asked to think when a request
	// translated for it asks for reasoning: ThinkingAdaptive (thinking
	// type adaptive with an effort, which Opus and Sonnet 4.6 and later
	// take, and the newest of them alone) or ThinkingBudget (a thinking
	// budget, which older models alone take). Empty reads it from the
	// name; give it for a deployment named otherwise (a Bedrock
	// application inference profile's ARN).
	Thinking string
	// NoPromptCache sends a request translated for Model in Anthropic
	// Messages without prompt-cache marks. By default such a request
	// marks its prefix (the last tool, the system prompt, the last
	// message and the user message before it) so that Anthropic caches
	// it, as OpenAI caches a repeated prefix unasked: an OpenAI client's
	// next turn (Codex's, in a tool loop) then reads most of its input
	// from the cache, at a tenth of the input price, where a prefix
	// written costs a quarter more once. Set it for an Anthropic-
	// compatible server that refuses cache_control, or where requests
	// are seldom repeated within the cache's five minutes.
	NoPromptCache bool
}

// Ways a Claude model is asked to think (Target.Thinking).
const (
	// ThinkingAdaptive asks with thinking {"type": "adaptive"} and
	// output_config.effort.
	ThinkingAdaptive = "adaptive"
	// ThinkingBudget asks with thinking {"type": "enabled"} and a
	// budget_tokens.
	ThinkingBudget = "budget"
)

// adaptive reports whether t's model is asked to think adaptively.
func (t Target) adaptive() bool {
	if t.Thinking != "" {
		return t.Thinking == ThinkingAdaptive
	}
	return llmapi.AdaptiveThinkingModel(t.Model)
}

// maxTokens is the output limit t is sent where a request sets none.
func (t Target) maxTokens() int {
	if t.MaxTokens > 0 {
		return t.MaxTokens
	}
	return llmapi.AnthropicMaxTokens(t.Model)
}

// Model classes (Target.ModelClass).
const (
	// ModelOpenAIReasoning is one of OpenAI's reasoning models (the
	// o-series, GPT-5 and later): the output limit goes as
	// max_completion_tokens, which they require, an effort is sent, and a
	// temperature or top_p is not, which they refuse but at its default.
	ModelOpenAIReasoning = "openai-reasoning"
	// ModelOpenAIChat is one of OpenAI's models without reasoning (GPT-4o,
	// GPT-4.1 and older): max_tokens, and no effort, which they refuse.
	ModelOpenAIChat = "openai-chat"
	// ModelReasoningContent is a model that must be given its reasoning
	// back, in reasoning_content on each assistant message of a Chat
	// Completions request (DeepSeek's thinking mode refuses a tool loop
	// without it); otherwise as ModelOther. Servers that do not know the
	// field may refuse it (Groq, Cerebras), so no other class is sent it.
	ModelReasoningContent = "reasoning-content"
	// ModelOther is any other model: max_tokens, which every
	// OpenAI-compatible server reads, and an effort, which servers that
	// have no use for it ignore.
	ModelOther = "other"
)

// modelClassOf maps Target.ModelClass to the encoders' class.
var modelClassOf = map[string]llmapi.ModelClass{
	"":                    llmapi.ClassByName,
	ModelOpenAIReasoning:  llmapi.ClassOpenAIReasoning,
	ModelOpenAIChat:       llmapi.ClassOpenAIChat,
	ModelReasoningContent: llmapi.ClassReasoningContent,
	ModelOther:            llmapi.ClassOther,
}

// class is the encoders' class of the target's model.
func (t Target) class() llmapi.ModelClass {
	return modelClassOf[t.ModelClass].Of(t.Model)
}

// Validate reports the first invalid field, naming it.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return fmt.Errorf("edge: config: %w", err)
	}
	return nil
}

func (c *Config) validate() error {
	if c.Epoch == 0 {
		return errors.New("Epoch is required (see nodes.NextEpoch)")
	}
	if _, err := newCORSPolicy(c.CORSOrigins); err != nil {
		return err
	}
	if _, err := nodes.NewStaticStore(c.Nodes); err != nil {
		return fmt.Errorf("Nodes: %w", err)
	}
	providers := map[string]string{} // provider id -> node id
	for _, n := range c.Nodes {
		for _, p := range n.Providers {
			if other, dup := providers[p.ID]; dup {
				return fmt.Errorf("Nodes: provider id %q is on both %q and %q; provider ids are unique per Edge", p.ID, other, n.ID)
			}
			providers[p.ID] = n.ID
			allowed := adapterAllows(p.Adapter)
			seen := map[string]bool{}
			for _, name := range p.APIs {
				a, ok := apiNames[name]
				switch {
				case !ok:
					return fmt.Errorf("Nodes: provider %q: APIs: unknown API %q (chat, responses, messages, embeddings)", p.ID, name)
				case !allowed.has(a):
					return fmt.Errorf("Nodes: provider %q: APIs: the %s adapter cannot serve %q", p.ID, p.Adapter, name)
				case seen[name]:
					return fmt.Errorf("Nodes: provider %q: APIs: %q twice", p.ID, name)
				}
				seen[name] = true
			}
			if len(p.APIs) > 0 && !seen["chat"] && !seen["responses"] && !seen["messages"] {
				return fmt.Errorf("Nodes: provider %q: APIs: names no generation API (chat, responses or messages)", p.ID)
			}
			switch p.BillingHeader {
			case "", "keep", "drop":
			default:
				return fmt.Errorf("Nodes: provider %q: BillingHeader %q is not keep or drop", p.ID, p.BillingHeader)
			}
		}
	}
	names := map[string]bool{}
	hashes := map[[32]byte]int{} // hash -> index of the key holding it
	for i, k := range c.APIKeys {
		switch {
		case k.Name == "":
			return fmt.Errorf("APIKeys[%d].Name is empty", i)
		case k.Hash == [32]byte{}:
			return fmt.Errorf("APIKeys[%d] (%s): Hash is empty", i, k.Name)
		case len(k.Models) == 0:
			return fmt.Errorf("APIKeys[%d] (%s): Models is empty (use [\"*\"] for every model)", i, k.Name)
		case k.Priority < 0 || k.Priority > 100:
			return fmt.Errorf("APIKeys[%d] (%s): Priority %d outside 0..100", i, k.Name, k.Priority)
		case k.RequestsPerMinute < 0 || k.TokensPerMinute < 0 || k.MaxConcurrent < 0:
			return fmt.Errorf("APIKeys[%d] (%s): negative limit", i, k.Name)
		}
		if names[k.Name] {
			return fmt.Errorf("APIKeys[%d]: duplicate name %q", i, k.Name)
		}
		names[k.Name] = true
		// One secret under two names would authenticate as whichever
		// the comparison met last: the other's limits, priority and
		// models would never apply, and usage would go to the wrong name.
		if j, dup := hashes[k.Hash]; dup {
			return fmt.Errorf("APIKeys[%d] (%s): same secret as APIKeys[%d] (%s); each key needs its own", i, k.Name, j, c.APIKeys[j].Name)
		}
		hashes[k.Hash] = i
	}
	routes := map[string]bool{}
	for i, r := range c.Routes {
		switch {
		case r.Model == "":
			return fmt.Errorf("Routes[%d].Model is empty", i)
		case routes[r.Model]:
			return fmt.Errorf("Routes[%d]: duplicate model %q", i, r.Model)
		case r.Strategy != "" && r.Strategy != Ordered && r.Strategy != Weighted && r.Strategy != LeastLoaded:
			return fmt.Errorf("Routes[%d] (%s): Strategy %q is not ordered, weighted or least_loaded", i, r.Model, r.Strategy)
		case len(r.Targets) == 0:
			return fmt.Errorf("Routes[%d] (%s): no Targets", i, r.Model)
		}
		routes[r.Model] = true
		for j, t := range r.Targets {
			node, ok := providers[t.ProviderID]
			switch {
			case !ok:
				return fmt.Errorf("Routes[%d] (%s).Targets[%d]: unknown provider %q", i, r.Model, j, t.ProviderID)
			case t.Model == "":
				return fmt.Errorf("Routes[%d] (%s).Targets[%d]: Model is empty", i, r.Model, j)
			case t.Weight < 0 || t.Weight > pool.MaxWeight:
				return fmt.Errorf("Routes[%d] (%s).Targets[%d]: Weight %d outside 0..%d", i, r.Model, j, t.Weight, pool.MaxWeight)
			case !validModelClass(t.ModelClass):
				return fmt.Errorf("Routes[%d] (%s).Targets[%d]: ModelClass %q is not %s, %s, %s or %s", i, r.Model, j, t.ModelClass, ModelOpenAIReasoning, ModelOpenAIChat, ModelReasoningContent, ModelOther)
			case t.MaxTokens < 0:
				return fmt.Errorf("Routes[%d] (%s).Targets[%d]: MaxTokens %d is negative", i, r.Model, j, t.MaxTokens)
			case t.Thinking != "" && t.Thinking != ThinkingAdaptive && t.Thinking != ThinkingBudget:
				return fmt.Errorf("Routes[%d] (%s).Targets[%d]: Thinking %q is not %s or %s", i, r.Model, j, t.Thinking, ThinkingAdaptive, ThinkingBudget)
			}
			for _, n := range c.Nodes {
				if n.ID != node {
					continue
				}
				for _, p := range n.Providers {
					if p.ID == t.ProviderID && len(p.Models) > 0 && !slices.Contains(p.Models, t.Model) {
						return fmt.Errorf("Routes[%d] (%s).Targets[%d]: provider %q does not list model %q", i, r.Model, j, t.ProviderID, t.Model)
					}
				}
			}
		}
	}
	for i, k := range c.APIKeys {
		for _, m := range k.Models {
			if m != "*" && !routes[m] {
				return fmt.Errorf("APIKeys[%d] (%s): unknown model %q", i, k.Name, m)
			}
		}
	}
	if c.MaxBodyBytes < 0 || c.QueueTimeout < 0 || c.MaxQueued < 0 || c.MaxQueuedBytes < 0 || c.RequestTimeout < 0 || c.KeepAlive < 0 || c.LongContextTokens < 0 || c.AgingStep < 0 {
		return errors.New("MaxBodyBytes, QueueTimeout, MaxQueued, MaxQueuedBytes, RequestTimeout, KeepAlive, LongContextTokens and AgingStep must not be negative")
	}
	if body, queued := cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes), cmp.Or(c.MaxQueuedBytes, DefaultMaxQueuedBytes); queued < body {
		return fmt.Errorf("MaxQueuedBytes (%d) is below MaxBodyBytes (%d): an accepted body that large could never wait for a slot", queued, body)
	}
	if lo, hi := c.prioritySpan(); c.AgingStep > 0 && hi >= 0 {
		span, wait := time.Duration(c.APIKeys[hi].Priority-c.APIKeys[lo].Priority), c.queueWait()
		// span*AgingStep >= wait, without the product overflowing.
		if most := (wait - 1) / span; c.AgingStep > most {
			if r := most.Truncate(time.Millisecond); r > 0 {
				most = r
			}
			return fmt.Errorf("AgingStep %v: a request of key %q (priority %d) would climb to the priority of key %q (%d) only after %d steps, "+
				"but may wait at most %v (QueueTimeout, or RequestTimeout when shorter), so every later request of %q could overtake it until it was refused; "+
				"set AgingStep to at most %v, or to zero to derive one",
				c.AgingStep, c.APIKeys[lo].Name, c.APIKeys[lo].Priority, c.APIKeys[hi].Name, c.APIKeys[hi].Priority, span, wait, c.APIKeys[hi].Name, most)
		}
	}
	if err := c.NodeWire.Validate(); err != nil {
		return fmt.Errorf("NodeWire: %w", err)
	}
	if err := c.validateWorkspaces(); err != nil {
		return err
	}
	return c.validateLeases()
}

// queueWait is the longest a request may wait for a slot: QueueTimeout,
// or RequestTimeout when that is shorter.
func (c *Config) queueWait() time.Duration {
	return min(cmp.Or(c.QueueTimeout, DefaultQueueTimeout), cmp.Or(c.RequestTimeout, DefaultRequestTimeout))
}

// prioritySpan returns the indexes in APIKeys of a key of the lowest
// priority and one of the highest, the first of each; hi is -1 when all
// keys have one priority (or there are none).
func (c *Config) prioritySpan() (lo, hi int) {
	lo, hi = -1, -1
	for i, k := range c.APIKeys {
		if lo < 0 || k.Priority < c.APIKeys[lo].Priority {
			lo = i
		}
		if hi < 0 || k.Priority > c.APIKeys[hi].Priority {
			hi = i
		}
	}
	if lo < 0 || c.APIKeys[lo].Priority == c.APIKeys[hi].Priority {
		return lo, -1
	}
	return lo, hi
}

// EffectiveAgingStep is the aging step the Edge uses for c: AgingStep
// when set, else one that climbs the keys' span of priorities in half of
// the longest a request may wait (QueueTimeout, or RequestTimeout when
// shorter), at most pool.DefaultAgingStep.
func (c *Config) EffectiveAgingStep() time.Duration {
	if c.AgingStep > 0 {
		return c.AgingStep
	}
	lo, hi := c.prioritySpan()
	if hi < 0 {
		return pool.DefaultAgingStep
	}
	span := time.Duration(c.APIKeys[hi].Priority - c.APIKeys[lo].Priority)
	return min(pool.DefaultAgingStep, max(c.queueWait()/(2*span), 1))
}

// validateLeases checks credentials, the lease signer and managed mode.
func (c *Config) validateLeases() error {
	creds := map[string]bool{}
	for i, cr := range c.Credentials {
		switch {
		case cr.ID == "" || len(cr.ID) > 128:
			return fmt.Errorf("Credentials[%d].ID must be 1 to 128 bytes", i)
		case creds[cr.ID]:
			return fmt.Errorf("Credentials[%d]: duplicate id %q", i, cr.ID)
		case cr.Secret == nil:
			return fmt.Errorf("Credentials[%d] (%s): no Secret source", i, cr.ID)
		}
		creds[cr.ID] = true
	}
	leased := false
	for _, n := range c.Nodes {
		for _, p := range n.Providers {
			switch {
			case p.Credential != "" && !creds[p.Credential]:
				return fmt.Errorf("Nodes: provider %q: unknown credential %q", p.ID, p.Credential)
			case p.Credential != "" && p.Category == execution.CategoryCLI:
				return fmt.Errorf("Nodes: provider %q: a CLI provider cannot take a leased credential", p.ID)
			case c.Managed != nil && p.Category == execution.CategoryAPI && p.Credential == "":
				return fmt.Errorf("Nodes: provider %q: managed mode gives hosted-API providers their credential only by lease; name one in Credential", p.ID)
			}
			leased = leased || p.Credential != ""
		}
	}
	if l := c.Leases; l != nil {
		if _, err := credentiallease.NewIssuer(l.KeyID, l.Key, l.TTL); err != nil {
			return fmt.Errorf("Leases: %w", err)
		}
	} else if leased {
		return errors.New("Leases is required: a provider takes a leased credential")
	}
	for name, tc := range map[string]*tls.Config{"NodeTLS": c.NodeTLS, "APITLS": c.APITLS} {
		if tc != nil && len(tc.Certificates) == 0 && tc.GetCertificate == nil && tc.GetConfigForClient == nil {
			// Every handshake would fail, one client at a time.
			return fmt.Errorf("%s has no certificate (Certificates, GetCertificate or GetConfigForClient)", name)
		}
	}
	if m := c.Managed; m != nil {
		if m.TrustDomain == "" {
			return errors.New("Managed.TrustDomain is required")
		}
		if err := identity.CheckTrustDomain(m.TrustDomain); err != nil {
			return fmt.Errorf("Managed.TrustDomain: %w", err)
		}
		if c.NodeTLS == nil || c.NodeTLS.ClientCAs == nil {
			return errors.New("Managed needs NodeTLS with ClientCAs: Nodes prove their identity with a CA-verified certificate")
		}
	}
	return nil
}

// hasProvider reports whether a target of r is on provider id.
func (r *Route) hasProvider(id string) bool {
	for _, t := range r.Targets {
		if t.ProviderID == id {
			return true
		}
	}
	return false
}

func validModelClass(c string) bool {
	_, ok := modelClassOf[c]
	return ok
}
