// Package examples is the parent of IOP's reference daemons, each a thin
// main that only wires configuration to the library: examples/edge (reads
// edge.yaml), examples/node (reads node.yaml), examples/controlplane, and
// examples/quickstart (every role in one process, with a built-in model).
// They arrive with the steps that give them something to run; all real
// behaviour lives in the library packages.
package examples
