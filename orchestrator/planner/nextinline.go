package planner

import (
	"slices"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/roster"
)

// NextInLine is the nodes the decision leaves due but not started, in plan
// order, at most maxParallel: those whose slots come next while the
// current ones soak, for the executor to pre-check (worker.Precheck). A
// node that waits (held by another tool, NotReady) is not among them, nor
// any node unless the rollout progresses. It is pure.
func NextInLine(s model.Snapshot, p model.Policy, d Decision) []string {
	return NextInLineFrom(NewRoster(s, p), d)
}

// NextInLineFrom is NextInLine with the snapshot's nodes as r keeps them
// (PlanFrom): it reads the views of the nodes it walks only.
func NextInLineFrom(r *roster.Roster, d Decision) []string {
	if d.Phase != v1alpha1.PhaseProgressing || d.MaxParallel <= 0 {
		return nil
	}
	order, _ := r.Order()
	var next []string
	for pos, pn := range d.Order {
		if len(next) == d.MaxParallel {
			break
		}
		var f roster.Facts
		if len(order) == len(d.Order) && &order[0] == &d.Order[0] { // r's own order: read by position
			_, f = r.At(pos)
		} else if i, ok := r.Index(pn.Name); ok {
			f = r.Facts(i)
		}
		if !f.Due || f.Held || slices.ContainsFunc(d.Actions, func(a Action) bool { return a.Node == pn.Name }) {
			continue
		}
		next = append(next, pn.Name)
	}
	return next
}
