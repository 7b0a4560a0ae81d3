package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PhaseReason is why the rollout is in its phase, for a person: the halt
// reason of a Halted rollout, the Valid condition's message of a Failed one
// (the orchestrator records no halt reason for it), and of a Pending one the
// Promoted condition's (what the upstream clusters lack) or the Valid one's;
// "" otherwise.
func (s *NodeRolloutStatus) PhaseReason() string {
	switch s.Phase {
	case PhaseFailed:
		return falseMessage(s.Conditions, "Valid")
	case PhasePending:
		if m := falseMessage(s.Conditions, "Promoted"); m != "" {
			return m
		}
		return falseMessage(s.Conditions, "Valid")
	}
	return s.HaltReason
}

// falseMessage is the message of condition t when it is False.
func falseMessage(cs []metav1.Condition, t string) string {
	if c := meta.FindStatusCondition(cs, t); c != nil && c.Status == metav1.ConditionFalse {
		return c.Message
	}
	return ""
}
