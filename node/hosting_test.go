package node

import (
	"crypto/tls"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/iop-dev/iop/edge/identity"
	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/execution/executiontest"
	"github.com/iop-dev/iop/wire/iopv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestIntersect(t *testing.T) {
	ollama := executiontest.New("ollama", "llama3")
	ollama.Meta.Adapter = "ollama"
	ollama.Meta.Models = nil // discovers its models: any is allowed
	vllm := executiontest.New("vllm", "qwen")
	vllm.Meta.Models = []string{"qwen", "mistral"}
	cli := executiontest.New("claude-cli", "")
	cli.Meta.Adapter, cli.Meta.Category, cli.Meta.Models = "cli", execution.CategoryCLI, nil
	allow := map[string]Hosted{
		"ollama":     {Provider: ollama},
		"vllm":       {Provider: vllm},
		"claude-cli": {Provider: cli, AllowedModels: []string{"sonnet"}},
	}
	pc := func(id, adapter string, cat iopv1.ProviderCategory, models ...string) *iopv1.ProviderConfig {
		return &iopv1.ProviderConfig{Id: id, Adapter: adapter, Category: cat, Models: models, Capacity: 2}
	}
	local, cliCat := iopv1.ProviderCategory_PROVIDER_CATEGORY_LOCAL, iopv1.ProviderCategory_PROVIDER_CATEGORY_CLI
	plan := intersect(allow, &iopv1.NodeConfig{Revision: 9, Providers: []*iopv1.ProviderConfig{
		pc("ollama", "ollama", local, "anything"),
		pc("vllm", "openai", local, "qwen"),
		pc("vllm-extra", "openai", local, "qwen"),
		pc("claude-cli", "cli", cliCat, "opus"),
		pc("vllm", "openai", local, "qwen"), // duplicate entry
		pc("ollama2", "ollama", local),
	}}, false)
	if plan.revision != 9 {
		t.Errorf("revision %d", plan.revision)
	}
	if d := cmp.Diff([]string{"ollama", "vllm"}, plan.order); d != "" {
		t.Errorf("hosted (-want +got):\n%s", d)
	}
	got := map[string]iopv1.RefusalReason{}
	for _, r := range plan.refused {
		got[r.GetProviderId()] = r.GetReason()
	}
	want := map[string]iopv1.RefusalReason{
		"vllm-extra": iopv1.RefusalReason_REFUSAL_REASON_NOT_ALLOWED,
		"claude-cli": iopv1.RefusalReason_REFUSAL_REASON_MODEL_NOT_ALLOWED,
		"vllm":       iopv1.RefusalReason_REFUSAL_REASON_INVALID, // the duplicate
		"ollama2":    iopv1.RefusalReason_REFUSAL_REASON_NOT_ALLOWED,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("refused (-want +got):\n%s", d)
	}
	if h := plan.providers["vllm"]; !h.allows("qwen") || h.allows("mistral") {
		t.Errorf("vllm should serve exactly the configured model")
	}

	// A capacity of 0 is refused, never read as "no limit".
	none := pc("ollama", "ollama", local)
	none.Capacity = 0
	plan = intersect(allow, &iopv1.NodeConfig{Providers: []*iopv1.ProviderConfig{none}}, false)
	if len(plan.order) != 0 || len(plan.refused) != 1 || plan.refused[0].GetReason() != iopv1.RefusalReason_REFUSAL_REASON_INVALID {
		t.Fatalf("capacity 0: hosted %v, refused %v", plan.order, plan.refused)
	}

	// Adapter and category must both match.
	plan = intersect(allow, &iopv1.NodeConfig{Providers: []*iopv1.ProviderConfig{
		pc("vllm", "anthropic", local, "qwen"),
		pc("ollama", "ollama", iopv1.ProviderCategory_PROVIDER_CATEGORY_API),
	}}, false)
	if len(plan.order) != 0 || len(plan.refused) != 2 {
		t.Fatalf("mismatches hosted: %+v", plan)
	}
	for _, r := range plan.refused {
		if r.GetReason() != iopv1.RefusalReason_REFUSAL_REASON_ADAPTER_MISMATCH {
			t.Errorf("%s refused for %v", r.GetProviderId(), r.GetReason())
		}
	}
}

func TestConfigValidate(t *testing.T) {
	p := executiontest.New("p", "m")
	good := Config{EdgeAddr: "127.0.0.1:1", NodeID: "n", Token: "t", Providers: []Hosted{{Provider: p}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	named := good
	named.TLS, named.EdgeIdentity = &tls.Config{}, &EdgeIdentity{TrustDomain: "iop.test", EdgeID: "Edge-1"}
	if err := named.Validate(); err != nil {
		t.Fatalf("an Edge identity the CA issues: %v", err)
	}
	named.EdgeIdentity = &EdgeIdentity{TrustDomain: "iop.test:8443", EdgeID: "Edge-1"}
	if err := named.Validate(); !errors.Is(err, identity.ErrName) {
		t.Fatalf("a trust domain no certificate carries: %v, want identity.ErrName", err)
	}
	for i, mut := range []func(*Config){
		func(c *Config) { c.EdgeAddr = "" },
		func(c *Config) { c.NodeID = "" },
		func(c *Config) { c.Token = "" },
		func(c *Config) { c.Providers = append(c.Providers, Hosted{Provider: p}) },
		func(c *Config) { c.Providers = []Hosted{{}} },
		func(c *Config) { c.HealthInterval = -1 },
		func(c *Config) { c.Backoff.Jitter = math.NaN() },
		func(c *Config) { c.Backoff.Max = 48 * time.Hour },
		func(c *Config) { c.EdgeIdentity = &EdgeIdentity{TrustDomain: "iop.test", EdgeID: "e1"} }, // no TLS
		func(c *Config) {
			c.TLS, c.EdgeIdentity = &tls.Config{}, &EdgeIdentity{TrustDomain: "IOP.test", EdgeID: "e1"}
		},
		func(c *Config) {
			c.TLS, c.EdgeIdentity = &tls.Config{}, &EdgeIdentity{TrustDomain: "iop.test", EdgeID: "e/1"}
		},
	} {
		c := good
		c.Providers = append([]Hosted(nil), good.Providers...)
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("mutation %d accepted", i)
		}
		if _, err := New(c); err == nil {
			t.Errorf("New accepted mutation %d", i)
		}
	}
}

// TestLeasedProviderNeedsLeases: a provider whose credential is leased is
// hosted only by a Node that takes leases, and never for a CLI adapter.
func TestLeasedProviderNeedsLeases(t *testing.T) {
	vllm := executiontest.New("vllm", "qwen")
	cli := executiontest.New("claude-cli", "opus")
	cli.Meta.Adapter, cli.Meta.Category = "cli", execution.CategoryCLI
	allow := map[string]Hosted{"vllm": {Provider: vllm}, "claude-cli": {Provider: cli}}
	cfg := &iopv1.NodeConfig{Providers: []*iopv1.ProviderConfig{
		{Id: "vllm", Adapter: vllm.Meta.Adapter, Category: iopv1.ProviderCategory_PROVIDER_CATEGORY_LOCAL, Models: []string{"qwen"}, Capacity: 1, CredentialId: "c1"},
		{Id: "claude-cli", Adapter: "cli", Category: iopv1.ProviderCategory_PROVIDER_CATEGORY_CLI, Models: []string{"opus"}, Capacity: 1, CredentialId: "c2"},
	}}
	for _, leases := range []bool{false, true} {
		plan := intersect(allow, cfg, leases)
		reasons := map[string]iopv1.RefusalReason{}
		for _, r := range plan.refused {
			reasons[r.GetProviderId()] = r.GetReason()
		}
		if reasons["claude-cli"] != iopv1.RefusalReason_REFUSAL_REASON_NO_LEASES {
			t.Errorf("leases=%v: a leased CLI provider: %v", leases, reasons)
		}
		if hosted := plan.providers["vllm"] != nil; hosted != leases {
			t.Errorf("leases=%v: leased vllm hosted %v", leases, hosted)
		}
		if leases && plan.providers["vllm"].credID != "c1" {
			t.Errorf("credential id not kept")
		}
	}
}
