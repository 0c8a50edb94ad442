// Package node holds node.Runtime: the process that runs beside model
// providers.
//
// A Runtime dials its Edge (it never listens), registers with its node id
// and token, receives the Edge's config payload (which providers to host,
// with which models and capacity, from edge.yaml), intersects it with its
// own allow-list (Config.Providers, from node.yaml) and refuses every entry
// outside it, checks provider health, and reports ready. From then on it
// executes exactly what its current connection sends: runs on their own
// streams (Started, the provider's output, exactly one terminal; cancelled
// only by a CancelRun for that run id, a reset, the hard deadline or the
// end of the connection), raw provider tunnels (only on the adapter's
// allowed routes, and for a provider limited to some models only for one of
// them, named as the body's model), closed node commands, and config
// updates, which apply to new runs while runs in flight keep the config
// they started under. Health changes are reported as they happen: every
// provider that can report its health is checked each
// Config.HealthInterval, one found unhealthy each Config.UnhealthyInterval
// until it recovers, and one whose call just failed as unavailable (its
// upstream refused the connection, say) at once, so that the Edge stops
// sending it work after one failed request rather than at the next round.
// The check decides, not the failure: an upstream that answers it stays
// healthy. A panic in a provider's code (a run, a tunnel, a health check,
// a command) fails that one call, as an internal failure or an unhealthy
// check, and is logged with its stack; the Node and its other calls go on.
//
// When a connection ends, every run it owns is cancelled, and the runtime
// reconnects with gRPC's backoff (1 s, x1.6, jitter 0.2, at most 120 s),
// reset after each ready handshake. A registration the Edge refuses
// because this node id's previous connection is draining (the process
// this one replaces is still finishing its work) is retried every second
// or so instead, so that the Node is back as soon as that connection ends.
// A refusal because that connection is live and takes work (two processes
// with one node id) waits out the backoff.
//
// Shutdown stops a Runtime gracefully, for a restart or an upgrade: the
// Edge is told (GOAWAY) to admit nothing new to this Node and sends its
// queue elsewhere, while the runs and tunnels in flight finish within the
// caller's grace. Cancelling Run's context instead cuts them off.
//
// A Node must never accept inbound connections, never host anything the
// Edge asks for outside its allow-list, and never send a local credential
// to the Edge or log one.
package node
