// Package nodes is the Edge's registry of Nodes and its dispatch seam to
// them.
//
// A Registry accepts Node sessions (Serve), authenticates each
// registration through an Authenticator (a per-node token by default) against
// Node records held in a Store, and gives each accepted connection a
// generation: the Edge's boot epoch (persisted with NextEpoch) shifted left
// 32 bits, or'ed with a counter, so no generation repeats across Edge
// restarts. The Node then applies the config payload the Edge sent and
// reports ready; only then is it Connected, which always means
// dispatch-ready.
//
// Rules the registry keeps:
//   - Configured Nodes appear in Snapshot before they ever connect and
//     after they disconnect, with Connected false and their providers
//     unavailable and offline.
//   - A registration for a node id whose connection still answers a ping is
//     rejected and the live connection is left alone (as DRAINING when
//     that connection's Node is shutting down, which its replacement
//     retries within a second, DUPLICATE otherwise); if the old
//     connection stays silent for ProbeTimeout it is fenced at once, so a
//     rebooted Node does not wait out the heartbeat.
//   - Closing a rejected or already fenced connection never produces an
//     event for the live one: every transition is checked against the
//     current connection, and published once, after it happened.
//   - Subscribers have bounded buffers and never slow a transition; one
//     that falls behind gets ErrResync and reads a fresh Snapshot.
//   - StartRun and Command dispatch to an exact (node, generation). A run
//     whose generation is fenced ends with a transport failure and can
//     never complete afterwards.
//
// It must never trust a Node's report beyond the Edge's own configuration
// (a Node cannot add providers or capacity), log a credential, or let a
// stale connection's frames reach a live run.
package nodes
