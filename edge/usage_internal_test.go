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
