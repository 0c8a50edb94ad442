package edge

import (
	"math"
	"sync"
	"time"
)

// keyLimits enforces one API key's limits at admission: concurrent
// requests, requests per minute, and tokens per minute counted from the
// usage providers report (a request may overdraw the token budget; the
// next ones wait until it refills).
type keyLimits struct {
	mu       sync.Mutex
	active   int
	reqLevel float64 // request tokens available
	reqAt    time.Time
	tokLevel float64 // token budget available (may go negative)
	tokAt    time.Time
	// reqRate and tokRate are the per-minute limits the levels were
	// last counted under (0: none). A limit the key did not have starts
	// whole, at its first request as at a reload that adds it.
	reqRate, tokRate int
}

// limitRefusal says which limit refused and when to retry.
type limitRefusal struct {
	kind  string // limitConcurrent, limitRequests or limitTokens
	retry time.Duration
}

// The limits a key's request may be refused by. Each is also the error
// type of the 429 (as OpenAI's own rate-limit errors are typed) and the
// limit label of iop_edge_key_limited_total.
const (
	limitConcurrent = "concurrent"
	limitRequests   = "requests"
	limitTokens     = "tokens"
)

type limiter struct {
	mu   sync.Mutex
	keys map[string]*keyLimits
}

func (l *limiter) get(name string) *keyLimits {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys == nil {
		l.keys = map[string]*keyLimits{}
	}
	k := l.keys[name]
	if k == nil {
		k = &keyLimits{}
		l.keys[name] = k
	}
	return k
}

// admit checks and takes the key's limits for one request. On success the
// caller gives the concurrency slot back with the returned limits'
// release, exactly once.
func (l *limiter) admit(k *APIKey, now time.Time) (kl *keyLimits, refusal *limitRefusal) {
	kl = l.get(k.Name)
	kl.mu.Lock()
	defer kl.mu.Unlock()
	refill := func(level *float64, at *time.Time, rate *int, perMinute int) {
		switch {
		case perMinute <= 0:
			*rate = 0
		case *rate <= 0:
			*level, *at, *rate = float64(perMinute), now, perMinute
		default:
			// A changed limit keeps what is left, refilled at the new
			// rate and within it. Requests racing to admit may come a
			// little out of order: time never runs back.
			if now.After(*at) {
				*level += now.Sub(*at).Minutes() * float64(perMinute)
				*at = now
			}
			*level, *rate = math.Min(float64(perMinute), *level), perMinute
		}
	}
	refill(&kl.reqLevel, &kl.reqAt, &kl.reqRate, k.RequestsPerMinute)
	refill(&kl.tokLevel, &kl.tokAt, &kl.tokRate, k.TokensPerMinute)
	switch {
	case k.MaxConcurrent > 0 && kl.active >= k.MaxConcurrent:
		return nil, &limitRefusal{kind: limitConcurrent, retry: time.Second}
	case k.RequestsPerMinute > 0 && kl.reqLevel < 1:
		return nil, &limitRefusal{kind: limitRequests, retry: perMinuteWait(1-kl.reqLevel, k.RequestsPerMinute)}
	case k.TokensPerMinute > 0 && kl.tokLevel <= 0:
		return nil, &limitRefusal{kind: limitTokens, retry: perMinuteWait(1-kl.tokLevel, k.TokensPerMinute)}
	}
	if k.RequestsPerMinute > 0 {
		kl.reqLevel--
	}
	kl.active++
	return kl, nil
}

// refund gives back the request an admit took from the per-minute rate:
// the request never reached a provider (no slot, the queue timeout, a
// Node that refused it). A key's rate counts what it had served, as its
// usage does, so a 503 from the Edge's own capacity does not turn into a
// 429 on the retry it invites.
func (kl *keyLimits) refund(k *APIKey) {
	if k.RequestsPerMinute <= 0 {
		return
	}
	kl.mu.Lock()
	kl.reqLevel = math.Min(float64(k.RequestsPerMinute), kl.reqLevel+1)
	kl.mu.Unlock()
}

// release gives back the concurrency slot an admit took.
func (kl *keyLimits) release() {
	kl.mu.Lock()
	kl.active--
	kl.mu.Unlock()
}

// maxLimitWait bounds the wait a refusal announces: a budget overdrawn
// far beyond its rate (a huge answer against a small per-minute budget)
// would otherwise overflow a Duration into a negative one.
const maxLimitWait = 24 * time.Hour

func perMinuteWait(deficit float64, perMinute int) time.Duration {
	return time.Duration(min(deficit/float64(perMinute)*float64(time.Minute), float64(maxLimitWait)))
}

// prune forgets the limits of keys the configuration no longer holds, so
// a long-lived Edge whose keys rotate keeps no state for retired ones. A
// key with requests still in flight keeps its entry: were it configured
// again, its new requests must count against the same concurrency.
func (l *limiter) prune(keep func(name string) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, kl := range l.keys {
		if keep(name) {
			continue
		}
		kl.mu.Lock()
		idle := kl.active == 0
		kl.mu.Unlock()
		if idle {
			delete(l.keys, name)
		}
	}
}

// spend debits reported tokens from the key's budget.
func (l *limiter) spend(k *APIKey, tokens int64) {
	if k.TokensPerMinute <= 0 || tokens <= 0 {
		return
	}
	kl := l.get(k.Name)
	kl.mu.Lock()
	kl.tokLevel -= float64(tokens)
	kl.mu.Unlock()
}
