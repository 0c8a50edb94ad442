package edge

import (
	"math"
	"sort"
	"sync"

	"github.com/iop-dev/iop/execution"
)

// Usage is one API key's consumption since the Edge started.
type Usage struct {
	Key string
	// Requests counts the requests dispatched to a provider.
	Requests int64
	// InputTokens and OutputTokens total the usage providers reported.
	// Each token total stops at math.MaxInt64 rather than wrapping.
	InputTokens  int64
	OutputTokens int64
	// CachedInputTokens is the part of InputTokens the providers read
	// from their prompt caches (OpenAI's cached_tokens, Anthropic's
	// cache_read_input_tokens): how well a key's repeated prefixes hit.
	CachedInputTokens int64
	// EstimatedTokens totals what answers without reported usage were
	// charged to the key's TokensPerMinute by estimate (input and output
	// together; see APIKey).
	EstimatedTokens int64
	// Limited counts the requests the key's own limits refused (429), by
	// the limit that refused them. They are not in Requests.
	Limited LimitCounts
}

// LimitCounts counts refusals by the APIKey limit that refused.
type LimitCounts struct {
	Concurrent int64 // MaxConcurrent
	Requests   int64 // RequestsPerMinute
	Tokens     int64 // TokensPerMinute
}

type usageBook struct {
	mu   sync.Mutex
	byID map[string]*Usage
}

func (b *usageBook) init() { b.byID = map[string]*Usage{} }

func (b *usageBook) entry(key string) *Usage {
	u := b.byID[key]
	if u == nil {
		u = &Usage{Key: key}
		b.byID[key] = u
	}
	return u
}

func (b *usageBook) request(key string) {
	b.mu.Lock()
	b.entry(key).Requests++
	b.mu.Unlock()
}

func (b *usageBook) tokens(key string, u *execution.Usage) {
	if u == nil {
		return
	}
	b.mu.Lock()
	e := b.entry(key)
	e.InputTokens = addSat(e.InputTokens, u.InputTokens)
	e.OutputTokens = addSat(e.OutputTokens, u.OutputTokens)
	e.CachedInputTokens = addSat(e.CachedInputTokens, u.CachedInputTokens)
	b.mu.Unlock()
}

// limited counts a request that key's limit refused; kind is the
// limitRefusal's.
func (b *usageBook) limited(key, kind string) {
	b.mu.Lock()
	l := &b.entry(key).Limited
	switch kind {
	case limitConcurrent:
		l.Concurrent++
	case limitRequests:
		l.Requests++
	case limitTokens:
		l.Tokens++
	}
	b.mu.Unlock()
}

func (b *usageBook) estimated(key string, n int64) {
	b.mu.Lock()
	e := b.entry(key)
	e.EstimatedTokens = addSat(e.EstimatedTokens, n)
	b.mu.Unlock()
}

// addSat adds a count n (never negative) to a total, stopping at
// math.MaxInt64: a total a provider inflated (every answer claiming the
// most usage that is still believed) stays pinned at its largest value
// instead of wrapping around to a negative one.
func addSat(total, n int64) int64 {
	if total > math.MaxInt64-n {
		return math.MaxInt64
	}
	return total + n
}

// Usage returns per-key usage (requests admitted, tokens from the usage
// providers reported, and tokens charged by estimate where none was),
// sorted by key name.
func (s *Server) Usage() []Usage {
	s.usage.mu.Lock()
	defer s.usage.mu.Unlock()
	out := make([]Usage, 0, len(s.usage.byID))
	for _, u := range s.usage.byID {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
