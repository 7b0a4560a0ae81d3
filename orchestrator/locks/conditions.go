package locks

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// LifecycleConditions are the node lifecycle conditions (KEP-5683,
// Kubernetes 1.37, feature gate NodeLifecycleConditions) nodewise writes on
// the nodes it has out and reads as other maintenance when another writer
// set them: a node in planned maintenance, a node being drained.
var LifecycleConditions = []corev1.NodeConditionType{corev1.NodeMaintenanceInProgress, corev1.NodeDrainInProgress}

// Reasons of the lifecycle conditions nodewise writes. Every one starts
// with ReasonPrefix: a condition whose reason does not is another writer's.
const (
	ReasonPrefix = "Nodewise"
	// ReasonInFlight: a NodeRollout has the node in flight (its slot taken,
	// through the gate).
	ReasonInFlight = "NodewiseRollout"
	// ReasonDraining: a NodeRollout's Drain step is evicting the node's pods.
	ReasonDraining = "NodewiseDrain"
	// ReasonHalted: the rollout halted on the node and left it cordoned
	// for a person (a swap that failed): it stays out until handed back.
	ReasonHalted = "NodewiseHalted"
)

// Nodewise says c is a condition nodewise wrote (its reason is one of
// nodewise's).
func Nodewise(c corev1.NodeCondition) bool { return strings.HasPrefix(c.Reason, ReasonPrefix) }

// ConditionHolder is why another writer's lifecycle condition holds the
// node ("" when none does): MaintenanceInProgress or DrainInProgress with
// status True and a reason that is not nodewise's. It counts as other
// maintenance, as Kured's lock does.
func ConditionHolder(n *corev1.Node) string {
	for _, t := range LifecycleConditions {
		for _, c := range n.Status.Conditions {
			if c.Type != t || c.Status != corev1.ConditionTrue || Nodewise(c) {
				continue
			}
			why := fmt.Sprintf("in maintenance by another tool (node condition %s=True", c.Type)
			if c.Reason != "" {
				why += ", reason " + c.Reason
			}
			if c.Message != "" {
				why += ": " + oneLine(c.Message)
			}
			return why + ")"
		}
	}
	return ""
}

// oneLine is s on one line, cut to a length a status reason can carry.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 120 {
		s = string(r[:119]) + "…"
	}
	return s
}
