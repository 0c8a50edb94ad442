// Package iop is the root of IOP, an embeddable Go SDK for running LLM
// inference across machines you own. This package holds no code; it is the
// map.
//
// # Roles
//
// IOP has three roles, each a type you embed in your own program or run
// through the thin daemons in examples/:
//
//   - A Node (package node, node.Runtime) runs beside model providers:
//     Ollama, vLLM, llama.cpp server, hosted OpenAI, Anthropic and Gemini
//     APIs, command-line tools. It never listens. It dials its Edge,
//     registers, applies the configuration the Edge sends (intersected
//     with its own allow-lists), reports readiness, and executes what the
//     Edge sends: normalized runs, raw provider HTTP tunnels, closed
//     commands, workspace operations.
//   - An Edge (package edge, edge.Server) is the gateway and the owner of
//     truth for its Nodes. It serves OpenAI- and Anthropic-compatible HTTP
//     APIs to unmodified clients, keeps the node registry with connection
//     generations, admits requests against provider capacity, leases slots,
//     translates between API formats, issues credential leases, enrolls
//     Nodes, and runs the single-request agent pipeline (package
//     singlerequest).
//   - A Control Plane (package controlplane, controlplane.Hub) is an
//     operator view and command relay over many Edges. Edges dial it. It
//     never connects to Nodes and is never the source of truth for Edge
//     configuration, the node registry or runtime state.
//
// # Links
//
// Every link (Node to Edge, Edge to Control Plane) is one outbound TCP
// connection, TLS 1.3 in production, carrying a wire.Session: many
// flow-controlled streams with role messages defined in
// wire/proto/iop/v1. Package wire owns framing, flow control, heartbeat,
// goaway and typed close reasons; the roles own what the messages mean.
//
// # Packages
//
//   - wire: sessions, streams, framing, heartbeat, TLS helpers.
//   - wire/iopv1: the generated schema.
//   - execution: host-neutral provider primitives (Provider, runs, events,
//     failures, usage); execution/adapters/... hold the provider adapters.
//   - node, edge, controlplane: the three roles.
//   - credentiallease: sealed, signed, single-use credential leases.
//   - workspace: the Node's traversal-safe workspace executor.
//   - singlerequest: the Plan -> Work -> Review coordinator.
//   - internal/...: single-purpose helpers.
//   - examples/...: the reference daemons and the quickstart.
package iop
