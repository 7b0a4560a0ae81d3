package planner

import (
	"maps"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// Unmoved says a node's view changing from was to is cannot change what
// Plan decides (nor NextInLine, HeldReason, DecideRequest, Overlapping, the
// Kured lock's nodes), whatever the rest of the snapshot: the reconcile
// loop then skips the pass an event about that node starts (the loop's
// full pass on resync plans from everything). It is pure.
//
// Two cases:
//   - Nothing the planner reads of the node changed (a heartbeat, an app
//     pod starting, a target pod's name).
//   - The node is in flight before and after, with the same labels (the
//     selector, the zone: the order) and pre-pull pods: a node's worker
//     drives its steps, and the plan reads of an in-flight node only that
//     it is in flight (it resumes, holds a slot and the budget, is not
//     due, waits for nothing, holds no window back). Its target pods
//     becoming Ready, its cordon, its next step's record are the bulk of a
//     rollout's events.
func Unmoved(was, is model.NodeView) bool {
	if was.Name != is.Name || was.Zone != is.Zone || !maps.Equal(was.Labels, is.Labels) || was.Prepull != is.Prepull {
		return false
	}
	if model.InFlight(was.State) && model.InFlight(is.State) {
		return true
	}
	return was.State == is.State && was.Retried == is.Retried && was.Unschedulable == is.Unschedulable &&
		was.Ready == is.Ready && was.NotReadySince.Equal(is.NotReadySince) && was.Drained == is.Drained &&
		was.HeldBy == is.HeldBy && was.Blocked == is.Blocked && samePods(was.Pods, is.Pods)
}

// samePods compares what the planner reads of target pods (UpToDate,
// behind): the revision, readiness and termination of each target's pod.
func samePods(a, b map[string]model.PodView) bool {
	if len(a) != len(b) {
		return false
	}
	for k, p := range a {
		q, ok := b[k]
		if !ok || p.Hash != q.Hash || p.Ready != q.Ready || p.Terminating != q.Terminating {
			return false
		}
	}
	return true
}
