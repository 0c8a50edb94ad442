// Package node will hold node.Runtime: the process that runs beside model
// providers. A Node dials its Edge (it never listens), registers with its
// node id and credential, applies the Edge's configuration payload
// intersected with its own allow-lists from node.yaml (refusing anything
// outside them), reports readiness with provider snapshots, and executes
// exactly what its current connection sends: runs, provider tunnels, closed
// commands and workspace operations. When a connection ends, every run it
// owns is cancelled, and a reconnect supervisor dials again with backoff.
//
// A Node must never accept inbound connections, never widen what the Edge
// may ask of it beyond node.yaml, and never send a local credential to the
// Edge. It is filled in by step [S2].
package node
