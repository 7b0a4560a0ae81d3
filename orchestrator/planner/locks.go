package planner

import (
	"strings"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// heldByOthers is a node unavailable through someone else: held by another
// tool's lock, or cordoned while nodewise does not have it in flight (a
// failed node is counted as nodewise's own). A node the rollout finished
// that stays cordoned (prior-unschedulable, keep-cordoned) counts too: it is
// out of the fleet, whoever keeps it out.
func heldByOthers(n model.NodeView) bool {
	if model.InFlight(n.State) || n.State == v1alpha1.NodeFailed {
		return false
	}
	return n.HeldBy != "" || n.Unschedulable
}

// heldPrefix starts the status reason of a node another tool holds, so the
// reason is cleared (and only it) once the tool lets go.
const heldPrefix = "waiting: "

// HeldReason is a node's status reason given why another tool holds it now
// ("" when none does): only a Pending node shows it.
func HeldReason(ns v1alpha1.NodeStatus, why string) string {
	pending := ns.State == "" || ns.State == v1alpha1.NodePending
	switch {
	case pending && why != "":
		return heldPrefix + why
	case strings.HasPrefix(ns.Reason, heldPrefix):
		return ""
	}
	return ns.Reason
}

// notReadyWaits: a node NotReady before its turn is not started (its agent
// and kubelet cannot take a swap, and it would hold a slot); it goes when
// it is Ready again.
func notReadyWaits(n model.NodeView) bool {
	return !n.Ready && (n.State == "" || n.State == v1alpha1.NodePending)
}

// waitReason is why a node due to start waits ("" when it may start).
func waitReason(n model.NodeView) string {
	switch {
	case n.HeldBy != "":
		return n.HeldBy
	case blockedWaits(n):
		return n.Blocked
	case notReadyWaits(n):
		return "NotReady: swapped when it is Ready again"
	}
	return ""
}
