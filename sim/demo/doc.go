// Package demo runs nodewise's whole job on the built-in simulated cluster:
// it starts the cluster, installs Istio, rolls the ambient data plane to a
// new version node by node with a live progress view, then rolls to a faulty
// build that halts at the canary, prints a summary and cleans up. The CLI's
// `nodewise demo` command is a thin wrapper around Run.
package demo
