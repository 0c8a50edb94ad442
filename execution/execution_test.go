package execution

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func TestInfoValidate(t *testing.T) {
	good := Info{ID: "p1", Adapter: "openai", Category: CategoryLocal, Models: []string{"m"}, Capacity: 2, LongContextCapacity: 1}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid info refused: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Info)
		want string
	}{
		{"empty id", func(i *Info) { i.ID = "" }, "empty ID"},
		{"empty adapter", func(i *Info) { i.Adapter = "" }, "empty Adapter"},
		{"empty category", func(i *Info) { i.Category = "" }, "invalid Category"},
		{"unknown category", func(i *Info) { i.Category = "gpu" }, `invalid Category "gpu"`},
		{"negative capacity", func(i *Info) { i.Capacity = -1 }, "negative capacity"},
		{"negative long-context capacity", func(i *Info) { i.LongContextCapacity = -1 }, "negative capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			info := good
			tt.mod(&info)
			err := info.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestCategoryValid(t *testing.T) {
	for _, c := range []Category{CategoryCLI, CategoryAPI, CategoryLocal} {
		if !c.Valid() {
			t.Errorf("%q not valid", c)
		}
	}
	for _, c := range []Category{"", "API", "remote"} {
		if c.Valid() {
			t.Errorf("%q valid", c)
		}
	}
}

func TestRunRequestValidate(t *testing.T) {
	good := RunRequest{RunID: "r1", ProviderID: "p1", Target: "m", Options: Options{Temperature: ptr(0.0)}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid request refused: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*RunRequest)
		want string
	}{
		{"empty run id", func(r *RunRequest) { r.RunID = "" }, "empty RunID"},
		{"empty provider id", func(r *RunRequest) { r.ProviderID = "" }, "empty ProviderID"},
		{"empty target", func(r *RunRequest) { r.Target = "" }, "empty Target"},
		{"negative output limit", func(r *RunRequest) { r.Options.MaxOutputTokens = -1 }, "negative MaxOutputTokens"},
		{"negative temperature", func(r *RunRequest) { r.Options.Temperature = ptr(-0.1) }, "Temperature negative or not finite"},
		{"NaN temperature", func(r *RunRequest) { r.Options.Temperature = ptr(math.NaN()) }, "Temperature negative or not finite"},
		{"infinite temperature", func(r *RunRequest) { r.Options.Temperature = ptr(math.Inf(1)) }, "Temperature negative or not finite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := good
			tt.mod(&req)
			err := req.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRunRequestContext(t *testing.T) {
	t.Run("no deadline", func(t *testing.T) {
		parent, cancelParent := context.WithCancel(context.Background())
		ctx, cancel := (&RunRequest{}).Context(parent)
		defer cancel()
		if _, ok := ctx.Deadline(); ok {
			t.Fatal("a request without a deadline has one")
		}
		if ctx.Err() != nil {
			t.Fatal("ended before anything ended it")
		}
		cancelParent()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("after the parent's cancel: %v", ctx.Err())
		}
	})
	t.Run("deadline", func(t *testing.T) {
		d := time.Now().Add(time.Hour)
		ctx, cancel := (&RunRequest{Deadline: d}).Context(context.Background())
		defer cancel()
		if got, ok := ctx.Deadline(); !ok || !got.Equal(d) {
			t.Fatalf("Deadline() = %v, %v; want %v", got, ok, d)
		}
	})
	t.Run("past deadline", func(t *testing.T) {
		ctx, cancel := (&RunRequest{Deadline: time.Now().Add(-time.Second)}).Context(context.Background())
		defer cancel()
		<-ctx.Done()
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("past deadline: %v", ctx.Err())
		}
		if f := Classify(ctx, ctx.Err()); f.Class != FailureDeadline {
			t.Fatalf("classified as %v", f.Class)
		}
	})
	t.Run("parent deadline is kept", func(t *testing.T) {
		parent, cancelParent := context.WithTimeout(context.Background(), time.Minute)
		defer cancelParent()
		ctx, cancel := (&RunRequest{Deadline: time.Now().Add(time.Hour)}).Context(parent)
		defer cancel()
		pd, _ := parent.Deadline()
		if got, _ := ctx.Deadline(); !got.Equal(pd) {
			t.Fatalf("Deadline() = %v, want the parent's earlier %v", got, pd)
		}
	})
}

func TestClassify(t *testing.T) {
	live := context.Background()
	canceled, cancel := context.WithCancel(live)
	cancel()
	expired, cancelExpired := context.WithDeadline(live, time.Now().Add(-time.Second))
	defer cancelExpired()
	<-expired.Done()
	causeCanceled, cancelCause := context.WithCancelCause(live)
	cancelCause(errors.New("node disconnected"))
	own := &Failure{Class: FailureRateLimited, Message: "quota"}

	tests := []struct {
		name  string
		ctx   context.Context
		err   error
		class FailureClass
		msg   string
	}{
		{"failure passes through", live, own, FailureRateLimited, "quota"},
		{"wrapped failure passes through", live, fmt.Errorf("call: %w", own), FailureRateLimited, "quota"},
		{"failure wins over an ended context", canceled, own, FailureRateLimited, "quota"},
		{"deadline error", live, context.DeadlineExceeded, FailureDeadline, "hard deadline exceeded"},
		{"expired context", expired, errors.New("read: i/o timeout"), FailureDeadline, "hard deadline exceeded"},
		{"canceled error", live, fmt.Errorf("do: %w", context.Canceled), FailureCanceled, "canceled"},
		{"canceled context", canceled, errors.New("connection reset"), FailureCanceled, "canceled"},
		{"canceled with a cause", causeCanceled, errors.New("eof"), FailureCanceled, "canceled"},
		{"other error", live, errors.New(`upstream said: {"secret":"sk-live-123"}`), FailureProvider, "provider error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Classify(tt.ctx, tt.err)
			if f.Class != tt.class || f.Message != tt.msg {
				t.Fatalf("Classify() = %v/%q, want %v/%q", f.Class, f.Message, tt.class, tt.msg)
			}
			if strings.Contains(f.Error(), "sk-live") {
				t.Fatalf("a raw upstream error leaks into the failure: %q", f.Error())
			}
		})
	}
}

func TestFailureError(t *testing.T) {
	if got, want := (&Failure{Class: FailureProvider}).Error(), "execution: run failed: provider"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := Failf(FailureUnavailable, "provider %q down", "p1").Error(), `execution: run failed: unavailable: provider "p1" down`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestStringsOfUnknownValues(t *testing.T) {
	seen := map[string]bool{}
	for c := FailureCanceled; c <= FailureRateLimited; c++ {
		s := c.String()
		if strings.HasPrefix(s, "FailureClass(") || seen[s] {
			t.Errorf("class %d: %q", c, s)
		}
		seen[s] = true
	}
	if got := FailureClass(0).String(); got != "FailureClass(0)" {
		t.Errorf("FailureClass(0).String() = %q", got)
	}
	for k := EventStarted; k <= EventFailed; k++ {
		s := k.String()
		if strings.HasPrefix(s, "EventKind(") || seen[s] {
			t.Errorf("kind %d: %q", k, s)
		}
		seen[s] = true
		if k.Terminal() != (k == EventCompleted || k == EventFailed) {
			t.Errorf("%v.Terminal() = %v", k, k.Terminal())
		}
	}
	if got := EventKind(200).String(); got != "EventKind(200)" {
		t.Errorf("EventKind(200).String() = %q", got)
	}
}

func TestUsageAdd(t *testing.T) {
	u := Usage{InputTokens: 1, OutputTokens: 2, CachedInputTokens: 3, ReasoningTokens: 4}
	u.Add(Usage{InputTokens: 10, OutputTokens: 20, CachedInputTokens: 30, ReasoningTokens: 40})
	if want := (Usage{InputTokens: 11, OutputTokens: 22, CachedInputTokens: 33, ReasoningTokens: 44}); u != want {
		t.Fatalf("Add: %+v, want %+v", u, want)
	}
}

func TestEnvCredential(t *testing.T) {
	t.Setenv("IOP_TEST_KEY", "  sk-env-0123456789 \n")
	t.Setenv("IOP_TEST_BLANK", " \t")
	if s, err := EnvCredential("IOP_TEST_KEY").Secret(context.Background()); err != nil || s != "sk-env-0123456789" {
		t.Fatalf("Secret() = %q, %v", s, err)
	}
	for _, name := range []string{"IOP_TEST_BLANK", "IOP_TEST_UNSET_VARIABLE"} {
		s, err := EnvCredential(name).Secret(context.Background())
		if !errors.Is(err, ErrNoCredential) || s != "" || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %q, %v", name, s, err)
		}
	}
	if got := EnvCredential("IOP_TEST_KEY").String(); got != "env:IOP_TEST_KEY" {
		t.Fatalf("String() = %q", got)
	}
}

func TestLeasedSecret(t *testing.T) {
	ctx := context.Background()
	if _, ok := LeasedSecret(ctx); ok {
		t.Fatal("a bare context carries a secret")
	}
	if _, ok := LeasedSecret(WithLeasedSecret(ctx, nil)); ok {
		t.Fatal("an empty lease counts as a secret")
	}
	secret := []byte("sk-leased")
	got, ok := LeasedSecret(WithLeasedSecret(ctx, secret))
	if !ok || string(got) != "sk-leased" {
		t.Fatalf("LeasedSecret() = %q, %v", got, ok)
	}
	// The caller clears the secret after the call; the context holds the
	// same bytes, not a copy that would outlive the clearing.
	clear(secret)
	if got[0] != 0 {
		t.Fatal("the context kept a copy of the secret")
	}
}
