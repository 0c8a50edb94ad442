// Package controlplane will hold controlplane.Hub, the operator view and
// command relay over many Edges, and the types the Edge uses to connect to
// it. Edges dial the Hub and say hello; the Hub asks them for status, relays
// operator commands (which each Edge resolves and executes itself) and
// relays node lifecycle events after the Edge's authoritative transition.
//
// The Hub keeps a view only. It must never connect to a Node, schedule
// work, or store Edge configuration, the node registry or runtime state as
// a source of truth, and no Node address, token or transport detail may
// cross its wire. It is filled in by step [S7].
package controlplane
