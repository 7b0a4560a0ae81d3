// Package wire holds the shapes a node agent serves and the orchestrator
// reads: the counters snapshot (/v1/snapshot), its history (/v1/history),
// istio-cni's health (/v1/cni) and the pods' enrollment in the mesh. The
// agent builds them, the judge reads them; neither imports the other.
package wire
