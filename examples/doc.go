// Package examples is the parent of IOP's reference daemons, each a thin
// main that only wires configuration to the library: examples/edge (reads
// edge.yaml), examples/node (reads node.yaml), examples/controlplane (reads
// hub.yaml, and is also an operator client), and examples/quickstart (every
// role in one process, with a built-in model). All real behaviour lives in
// the library packages.
package examples
