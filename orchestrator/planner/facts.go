package planner

import (
	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/roster"
)

// factsOf is what PlanFrom reads of node n under p with targets, kept in
// its roster: the same predicates Plan's walks apply, taken once per view.
func factsOf(n model.NodeView, p model.Policy, targets []model.TargetView) roster.Facts {
	pending := n.State == "" || n.State == v1alpha1.NodePending
	upToDate := n.UpToDate(targets)
	markDone := pending && upToDate && !n.Retried
	retry := false
	if n.State == v1alpha1.NodeDone {
		_, retry = behind(n, targets)
	}
	st := n.State // as the plan's first walk leaves it, but for a skip
	switch {
	case markDone:
		st = v1alpha1.NodeDone
	case retry:
		st = v1alpha1.NodePending
	}
	waits := notReadyWaits(n)
	wait := waitReason(n) != ""
	f := roster.Facts{
		Selected:    p.Selector == nil || p.Selector.Matches(model.LabelSet(n.Labels)),
		InFlight:    model.InFlight(n.State),
		PrepullDone: n.Prepull.Exists && !pending,
		Failed:      n.State == v1alpha1.NodeFailed,
		Others:      heldByOthers(n),
		Visit:       markDone || retry || (waits && !n.NotReadySince.IsZero()),
		Finished:    model.Terminal(st),
		Due:         pending && (!upToDate || n.Retried),
	}
	f.Active = !f.Finished && !waits
	f.Held = f.Due && wait
	f.Hoist = n.Drained && f.Due && !wait
	return f
}
