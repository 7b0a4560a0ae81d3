package planner

import (
	"slices"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// NextInLine is the nodes the decision leaves due but not started, in plan
// order, at most maxParallel: those whose slots come next while the
// current ones soak, for the executor to pre-check (worker.Precheck). A
// node that waits (held by another tool, NotReady) is not among them, nor
// any node unless the rollout progresses. It is pure.
func NextInLine(s model.Snapshot, p model.Policy, d Decision) []string {
	if d.Phase != v1alpha1.PhaseProgressing || d.MaxParallel <= 0 {
		return nil
	}
	byName := make(map[string]model.NodeView, len(s.Nodes))
	for _, n := range s.Nodes {
		byName[n.Name] = n
	}
	var next []string
	for _, pn := range d.Order {
		if len(next) == d.MaxParallel {
			break
		}
		n := byName[pn.Name]
		if !dueToStart(n, s.Targets) || waitReason(n) != "" || slices.ContainsFunc(d.Actions, func(a Action) bool { return a.Node == pn.Name }) {
			continue
		}
		next = append(next, pn.Name)
	}
	return next
}

// dueToStart says whether a node waits to start: pending, and behind the targets
// (or retried).
func dueToStart(n model.NodeView, targets []model.TargetView) bool {
	return (n.State == "" || n.State == v1alpha1.NodePending) && (!n.UpToDate(targets) || n.Retried)
}
