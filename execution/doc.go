// Package execution holds the host-neutral primitives every provider adapter
// and both ends of a run share: the Provider interface and its optional
// capability interfaces (HealthChecker, Tunneler, Commander), provider
// descriptions (Info: id, adapter kind, category, models, capacity), run
// requests, the ordered run event stream (started, output delta, tool call,
// usage, completed, failed), typed failure classes and usage. A Node hosts
// providers given in node.Config.Providers.
//
// # Terminals
//
// A run ends in exactly one terminal event, Completed or Failed, and only
// for one of four reasons: the caller cancelled, the hard deadline passed,
// the provider finished (or failed), or the transport to the Node ended.
// Output silence is never a terminal: a long prefill is a normal run. The
// host (the Node runtime) emits Started and the terminal; a Provider only
// emits what lies between, which makes the single terminal structural.
//
// It must never import a role package (node, edge, controlplane), never
// perform network I/O of its own, and never hold a credential beyond the
// call that uses it.
package execution
