package nodewire

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/wire/iopv1"
)

// TestEnumsRoundTrip: every failure class and category crosses the wire
// and comes back as itself, each on a wire value of its own; a wire value
// this side does not know is Internal (a class) or refused (a category),
// never taken for another.
func TestEnumsRoundTrip(t *testing.T) {
	seen := map[iopv1.FailureClass]execution.FailureClass{}
	for c := execution.FailureCanceled; c <= execution.FailureRateLimited; c++ {
		w := FailureClass(c)
		if prev, dup := seen[w]; dup {
			t.Errorf("%v and %v share the wire value %v", prev, c, w)
		}
		seen[w] = c
		if got := FailureClassFrom(w); got != c {
			t.Errorf("%v crossed the wire as %v and came back as %v", c, w, got)
		}
	}
	if got := FailureClassFrom(iopv1.FailureClass(999)); got != execution.FailureInternal {
		t.Errorf("an unknown wire class came back as %v", got)
	}
	for _, c := range []execution.Category{execution.CategoryCLI, execution.CategoryAPI, execution.CategoryLocal} {
		if got, ok := CategoryFrom(Category(c)); !ok || got != c {
			t.Errorf("%q came back as %q, %v", c, got, ok)
		}
	}
	if w := Category("gpu"); w != iopv1.ProviderCategory_PROVIDER_CATEGORY_UNSPECIFIED {
		t.Errorf("an unknown category went out as %v", w)
	}
	for _, w := range []iopv1.ProviderCategory{iopv1.ProviderCategory_PROVIDER_CATEGORY_UNSPECIFIED, 999} {
		if got, ok := CategoryFrom(w); ok {
			t.Errorf("wire category %v accepted as %q", w, got)
		}
	}
}

func TestRunRequestRoundTrip(t *testing.T) {
	temp := 0.7
	in := &execution.RunRequest{
		RunID: "r1", ProviderID: "p1", Adapter: "cli", Target: "m",
		Input: execution.Input{System: "sys", Messages: []execution.Message{
			{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}, {Role: "user", Content: "ünïcode"},
		}},
		Options:  execution.Options{MaxOutputTokens: 512, Temperature: &temp, Stream: true},
		Deadline: time.UnixMilli(1_800_000_000_123),
		Grant:    &execution.Grant{Lease: []byte{1, 2, 3}, Principal: "alice", Route: "pub"},
	}
	m := RunRequest(in, 7, 9)
	if m.GetGeneration() != 7 || m.GetConfigRevision() != 9 {
		t.Fatalf("generation %d revision %d", m.GetGeneration(), m.GetConfigRevision())
	}
	out := RunRequestFrom(m)
	if diff := cmp.Diff(in, out); diff != "" {
		t.Fatalf("round trip (-sent +received):\n%s", diff)
	}

	// No options, deadline or grant: they stay unset.
	bare := &execution.RunRequest{RunID: "r2", ProviderID: "p1", Target: "m"}
	if diff := cmp.Diff(bare, RunRequestFrom(RunRequest(bare, 1, 1))); diff != "" {
		t.Fatalf("bare round trip (-sent +received):\n%s", diff)
	}
}

// TestRunRequestSaturates: values beyond the wire fields' range arrive as
// the largest the field holds, never wrapped around into small ones.
func TestRunRequestSaturates(t *testing.T) {
	for _, c := range []struct {
		tokens    int
		temp      float64
		wantTok   uint32
		wantMilli uint32
	}{
		{math.MaxInt, 1e12, uint32(min(uint64(math.MaxInt), math.MaxUint32)), math.MaxUint32}, // beyond uint32 where int has 64 bits
		{math.MaxInt32, 4294967.295, math.MaxInt32, math.MaxUint32},
		{-1, -3, 0, 0},
		{0, 0, 0, 0},
		{1, 0.0004, 1, 0},
		{2, 0.0005, 2, 1},
	} {
		m := RunRequest(&execution.RunRequest{RunID: "r", ProviderID: "p", Target: "m",
			Options: execution.Options{MaxOutputTokens: c.tokens, Temperature: &c.temp}}, 1, 1)
		if got := m.GetOptions().GetMaxOutputTokens(); got != c.wantTok {
			t.Errorf("MaxOutputTokens %d went out as %d, want %d", c.tokens, got, c.wantTok)
		}
		if got := m.GetOptions().GetTemperatureMilli(); got != c.wantMilli {
			t.Errorf("Temperature %v went out as %d milli, want %d", c.temp, got, c.wantMilli)
		}
	}
}

func TestEventRoundTrip(t *testing.T) {
	for _, e := range []execution.Event{
		{Kind: execution.EventStarted, Model: "m"},
		{Kind: execution.EventDelta, Text: "hello"},
		{Kind: execution.EventDelta, Text: "hmm", Reasoning: true},
		{Kind: execution.EventToolCall, ToolCall: &execution.ToolCall{ID: "c1", Name: "f", Arguments: `{"a":1}`}},
		{Kind: execution.EventUsage, Usage: &execution.Usage{InputTokens: 1, OutputTokens: 2, CachedInputTokens: 3, ReasoningTokens: 4}},
		{Kind: execution.EventCompleted, StopReason: "length"},
		{Kind: execution.EventFailed, Failure: &execution.Failure{Class: execution.FailureRateLimited, Message: "slow down"}},
	} {
		got, ok := EventFrom(Event("r1", e))
		if !ok {
			t.Fatalf("%v: refused on the way back", e.Kind)
		}
		if diff := cmp.Diff(e, got); diff != "" {
			t.Errorf("%v round trip (-sent +received):\n%s", e.Kind, diff)
		}
	}
	// Events missing their payload still cross as a valid event of their
	// kind.
	for _, e := range []execution.Event{
		{Kind: execution.EventToolCall},
		{Kind: execution.EventUsage},
		{Kind: execution.EventFailed},
	} {
		got, ok := EventFrom(Event("r1", e))
		if !ok || got.Kind != e.Kind {
			t.Errorf("%v without a payload came back as %+v, %v", e.Kind, got, ok)
		}
		if e.Kind == execution.EventFailed && got.Failure.Class != execution.FailureInternal {
			t.Errorf("a failure without a class came back as %v", got.Failure.Class)
		}
	}
	if _, ok := EventFrom(&iopv1.RunEvent{RunId: "r1"}); ok {
		t.Fatal("an event with no body was accepted")
	}
	// A failure's note is clipped to valid UTF-8 of at most maxNote bytes.
	long := strings.Repeat("é", maxNote) // two bytes each: the cut falls inside one
	got, _ := EventFrom(Event("r1", execution.Event{Kind: execution.EventFailed, Failure: &execution.Failure{Class: execution.FailureProvider, Message: long}}))
	if msg := got.Failure.Message; len(msg) > maxNote || !utf8.ValidString(msg) || !strings.HasPrefix(long, msg) || len(msg) < maxNote-1 {
		t.Fatalf("note of %d bytes, valid %v", len(msg), utf8.ValidString(msg))
	}
}

func TestUsageClamps(t *testing.T) {
	if got := Usage(execution.Usage{InputTokens: -5, OutputTokens: 3}); got.GetInputTokens() != 0 || got.GetOutputTokens() != 3 {
		t.Fatalf("negative usage went out as %v", got)
	}
	got := UsageFrom(&iopv1.Usage{InputTokens: math.MaxUint64, OutputTokens: 1 << 62, CachedInputTokens: 7})
	if want := (execution.Usage{InputTokens: 1 << 62, OutputTokens: 1 << 62, CachedInputTokens: 7}); got != want {
		t.Fatalf("UsageFrom = %+v, want %+v", got, want)
	}
	if got := UsageFrom(nil); got != (execution.Usage{}) {
		t.Fatalf("UsageFrom(nil) = %+v", got)
	}
}
