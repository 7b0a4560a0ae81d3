package v1alpha1

import "k8s.io/apimachinery/pkg/api/meta"

// PhaseReason is why the rollout is in its phase, for a person: the halt
// reason of a Halted rollout, the Valid condition's message of a Failed one
// (the orchestrator records no halt reason for it), "" otherwise.
func (s *NodeRolloutStatus) PhaseReason() string {
	if s.Phase != PhaseFailed {
		return s.HaltReason
	}
	if c := meta.FindStatusCondition(s.Conditions, "Valid"); c != nil {
		return c.Message
	}
	return ""
}
