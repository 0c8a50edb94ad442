// Package execution holds the host-neutral primitives every provider adapter
// and both ends of a run share: the Provider interface and its optional
// capability interfaces (raw HTTP tunnel, closed commands), provider
// descriptions (id, adapter kind, category, models, capacity), a Node's
// provider registry, run requests, the ordered run event stream (started,
// output delta, tool call, usage, completed, failed), typed failure classes
// and usage.
//
// It owns the cancellation rule: a run ends only on caller cancel, its hard
// deadline, a provider terminal, or a transport disconnect. Output silence
// is never a terminal.
//
// It must never import a role package (node, edge, controlplane), never
// perform network I/O of its own, and never hold a credential beyond the
// call that uses it. Its types are filled in by step [S2].
package execution
