package edge

import (
	"math"
	"testing"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/llmapi"
)

// TestUsageTotalsSaturate: a key's totals add up exactly, and a provider
// that claims the most believable usage on every answer pins them at
// math.MaxInt64 rather than wrapping them around to negative figures.
func TestUsageTotalsSaturate(t *testing.T) {
	var b usageBook
	b.init()
	b.tokens("k", &execution.Usage{InputTokens: 3, OutputTokens: 4})
	b.tokens("k", &execution.Usage{InputTokens: 5, OutputTokens: 6})
	b.estimated("k", 7)
	if u := *b.byID["k"]; u.InputTokens != 8 || u.OutputTokens != 10 || u.EstimatedTokens != 7 {
		t.Fatalf("totals = %+v, want 8 input, 10 output, 7 estimated", u)
	}

	// Start a step short of wrapping, as 8 million inflated answers would.
	e := b.byID["k"]
	e.InputTokens = math.MaxInt64 - llmapi.MaxTokens/2
	e.OutputTokens = math.MaxInt64 - 1
	e.EstimatedTokens = math.MaxInt64
	for range 3 {
		b.tokens("k", &execution.Usage{InputTokens: llmapi.MaxTokens, OutputTokens: llmapi.MaxTokens})
		b.estimated("k", llmapi.MaxTokens)
	}
	if u := *b.byID["k"]; u.InputTokens != math.MaxInt64 || u.OutputTokens != math.MaxInt64 || u.EstimatedTokens != math.MaxInt64 {
		t.Fatalf("totals = %+v, want each pinned at %d", u, int64(math.MaxInt64))
	}
}

// TestReadUsageCached: the cached part of an answer's input is read from
// each API's usage object: Anthropic's cache reads (which its input
// leaves out), Chat Completions' prompt_tokens_details and the Responses
// API's input_tokens_details (whose input holds them). A count the
// input cannot hold is booked as the input; one that is no count leaves
// the usage unread, as any other malformed count does.
func TestReadUsageCached(t *testing.T) {
	for _, c := range []struct {
		raw           string
		input, cached int64
		ok            bool
	}{
		{`{"input_tokens":7,"cache_read_input_tokens":2,"cache_creation_input_tokens":1,"output_tokens":3}`, 10, 2, true},
		{`{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2,"audio_tokens":0}}`, 7, 2, true},
		{`{"input_tokens":7,"output_tokens":3,"input_tokens_details":{"cached_tokens":5}}`, 7, 5, true},
		{`{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":null}`, 7, 0, true},
		{`{"prompt_tokens":7,"completion_tokens":3}`, 7, 0, true},
		{`{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":70}}`, 7, 7, true},
		{`{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":"2"}}`, 0, 0, false},
	} {
		u := readUsage([]byte(c.raw))
		if (u != nil) != c.ok || u != nil && (u.InputTokens != c.input || u.CachedInputTokens != c.cached) {
			t.Errorf("%s: %+v, want input %d, cached %d (read %v)", c.raw, u, c.input, c.cached, c.ok)
		}
	}
}
