package v1alpha1

// GatesSpec says how a node's soak is judged before the rollout moves on.
// The judge (package health) fills in its fields; the orchestrator only passes
// it through to the gate it builds.
type GatesSpec struct{}
