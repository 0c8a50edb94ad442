// Package edge will hold edge.Server, the gateway and composition root of an
// Edge: OpenAI- and Anthropic-compatible HTTP APIs (also mountable as an
// http.Handler), API keys and principals, model routes, provider admission
// and leases, cancellation, API-format translation, credential leases, Node
// enrollment, the Control Plane connector, and the single-request
// pipeline's dispatch. Its sub-packages make the parts visible:
// edge/nodes is the node registry (connection generations, readiness,
// lifecycle events) and the dispatch seam to Nodes.
//
// The Edge is the source of truth for its Nodes and their providers. It
// must never replay a request or move it to another provider once
// dispatched, never let a lease be released twice or not at all, and never
// let work bound to an ended connection generation complete.
package edge
