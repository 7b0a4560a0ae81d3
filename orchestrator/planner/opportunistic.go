package planner

import (
	"slices"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// opportunistic puts the nodes someone else has already cordoned and
// drained (spec.coordination.opportunistic) first in the order the start
// loop walks, in the window now current: swapping such a node disrupts
// nothing, and its slot is the cheapest the rollout gets. The canaries still
// go first (a new revision is judged on them before any other node), so a
// drained node moves up only once every canary window is finished. It also
// returns the names moved, for the phase reason. The order itself, and the
// waves in status, are unchanged.
func opportunistic(order []PlannedNode, byName map[string]model.NodeView, p model.Policy, current int, targets []model.TargetView) ([]PlannedNode, []string) {
	if !p.Opportunistic || current <= 0 {
		return order, nil
	}
	for _, pn := range order {
		if pn.Canary && pn.Window >= current {
			return order, nil // a canary is not finished yet
		}
	}
	var first, rest []PlannedNode
	var moved []string
	for _, pn := range order {
		n := byName[pn.Name]
		if n.Drained && dueToStart(n, targets) && waitReason(n) == "" {
			pn.Window = current
			first = append(first, pn)
			moved = append(moved, pn.Name)
			continue
		}
		rest = append(rest, pn)
	}
	if len(first) == 0 {
		return order, nil
	}
	return slices.Concat(first, rest), moved
}
