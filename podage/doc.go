// Package podage is the PodAgePolicy controller: it enforces a maximum pod
// age and a proxy version target on sidecar workloads. Selection is the
// freshness report's (package istio/freshness): a workload misses the
// target when a pod is older than spec.maxAge or its proxy is more than
// spec.maxMinorsBehind minors behind the designated version. Each such
// workload's team is told first, through its own notification route, and
// is restarted only once spec.notice has passed since, only inside the
// policy's maintenance windows and outside its blackouts (read as a
// NodeRollout's are, by orchestrator/timewindow), through its own rollout
// restart (the sidecar wing's, package revisions) when its PDBs allow a
// disruption, else (a bare pod) through the Eviction API, within a restart
// budget cluster-wide and per namespace. Restarts go in waves that the
// sidecar wing's gate judges (the node agents' per-pod evidence, the
// policy's spec.gates) before the next wave starts; a failed wave halts the
// policy until `nodewise podage resume`. A workload annotated
// nodewise.io/max-age-opt-out-until with a time ahead is left alone until
// then, and recorded as such.
//
// Every decision is written to the policy's status before it is acted on:
// a workload's restart stamp is recorded first, so a restarted controller
// makes the same (idempotent) restart and never a second one.
package podage
