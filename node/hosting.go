package node

import (
	"slices"

	"github.com/iop-dev/iop/execution"
	"github.com/iop-dev/iop/internal/nodewire"
	"github.com/iop-dev/iop/wire/iopv1"
	"github.com/iop-dev/iop/workspace"
)

// hosted is one provider the Node hosts under the current config: the
// local adapter and the Edge's entry for it.
type hosted struct {
	p      execution.Provider
	info   execution.Info
	models []string // models the Edge configured; empty means any allowed
	cap    int
	// credID, when set, is the leased credential: calls need a lease and
	// never use the adapter's own credential.
	credID string
}

// hostingPlan is the result of intersecting a config payload with the
// allow-list. It is immutable once built; a config update builds a new one
// and runs in flight keep the one they started under.
type hostingPlan struct {
	revision  uint64
	providers map[string]*hosted
	order     []string
	refused   []*iopv1.ProviderRefusal
	// workspaces are the configured refs this Node accepted, with the
	// most authority the Edge may grant on each.
	workspaces map[string]workspace.Authority
}

// intersect builds the hosting plan for a payload. An entry outside the
// allow-list (unknown id, other adapter or category, a model not allowed)
// is refused whole; nothing is guessed.
func intersect(allow map[string]Hosted, cfg *iopv1.NodeConfig, leases bool) *hostingPlan {
	plan := &hostingPlan{revision: cfg.GetRevision(), providers: map[string]*hosted{}}
	refuse := func(id string, why iopv1.RefusalReason) {
		plan.refused = append(plan.refused, &iopv1.ProviderRefusal{ProviderId: id, Reason: why})
	}
	for _, pc := range cfg.GetProviders() {
		id := pc.GetId()
		// A capacity of 0 is no Edge's configuration (edge.yaml needs 1
		// at least): it is refused, never read as "no limit".
		if id == "" || plan.providers[id] != nil || pc.GetCapacity() == 0 {
			refuse(id, iopv1.RefusalReason_REFUSAL_REASON_INVALID)
			continue
		}
		local, ok := allow[id]
		if !ok {
			refuse(id, iopv1.RefusalReason_REFUSAL_REASON_NOT_ALLOWED)
			continue
		}
		info := local.Provider.Info()
		cat, ok := nodewire.CategoryFrom(pc.GetCategory())
		if info.Adapter != pc.GetAdapter() || !ok || cat != info.Category {
			refuse(id, iopv1.RefusalReason_REFUSAL_REASON_ADAPTER_MISMATCH)
			continue
		}
		if pc.GetCredentialId() != "" && (!leases || info.Category == execution.CategoryCLI) {
			refuse(id, iopv1.RefusalReason_REFUSAL_REASON_NO_LEASES)
			continue
		}
		allowed := local.AllowedModels
		if allowed == nil {
			allowed = info.Models
		}
		if len(allowed) > 0 && !allSubset(pc.GetModels(), allowed) {
			refuse(id, iopv1.RefusalReason_REFUSAL_REASON_MODEL_NOT_ALLOWED)
			continue
		}
		models := slices.Clone(pc.GetModels())
		if len(models) == 0 {
			// The Edge offers no model list: the Node's own allow-list is
			// the limit.
			models = slices.Clone(allowed)
		}
		plan.providers[id] = &hosted{p: local.Provider, info: info, models: models, cap: int(pc.GetCapacity()), credID: pc.GetCredentialId()}
		plan.order = append(plan.order, id)
	}
	return plan
}

func allSubset(models, allowed []string) bool {
	for _, m := range models {
		if !slices.Contains(allowed, m) {
			return false
		}
	}
	return true
}

// allows reports whether the plan lets h serve model.
func (h *hosted) allows(model string) bool {
	return len(h.models) == 0 || slices.Contains(h.models, model)
}
