// Package controlplane is the Control Plane: [Hub], the operator view and
// command relay over many Edges, and [Connector], the side an Edge runs to
// report to it (edge.Server.ConnectControlPlane wires an Edge up).
//
// Edges dial the Hub over one framed protobuf session each (TLS 1.3 in
// production) and say hello with their edge id and an enrollment token or
// a client certificate. The Hub fences generations per edge id: a second
// hello for a live id probes the old link first and replaces it only when
// the old one is dead. Over the link the Hub
//   - asks for a full status now and then (each Node as its own message, so
//     ten thousand Nodes never make one frame);
//   - receives node lifecycle events the Edge relays after its own registry
//     made the transition, each with a sequence number so that a status and
//     the events around it merge without going back in time; a gap makes
//     the Hub take a fresh status;
//   - takes a fresh status at once when the Edge says its status changed
//     between lifecycle events (a [StatusWatcher] Backend: admission's
//     cooldowns), rather than at its next StatusInterval, and publishes an
//     [EventProviderCooling] for each provider whose cooldowns began or
//     ended;
//   - relays operator commands from a closed set ([Operations]): the Edge
//     resolves the selector, accepts or rejects with a typed [Rejection],
//     then reports ordered phases (accepted, running, progress, succeeded
//     or failed).
//
// Operators reach the Hub through [Hub.Handler]: a JSON API under /api/
// (bearer token, the status page's cookie session with a CSRF token, or a
// client certificate) and a status page at / that follows the event stream
// live.
//
// The Hub keeps a view only. It never connects to a Node, schedules work,
// or stores Edge configuration, the node registry or runtime state as a
// source of truth; no Node address, token or transport detail crosses its
// wire. Everything it shows was reported by an Edge, and an Edge that goes
// away keeps its last view, marked disconnected.
package controlplane
