package planner

import (
	"slices"

	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/roster"
)

// opportunistic puts the nodes someone else has already cordoned and
// drained (spec.coordination.opportunistic) first in the order the start
// loop walks, in the window now current: swapping such a node disrupts
// nothing, and its slot is the cheapest the rollout gets. The canaries still
// go first (a new revision is judged on them before any other node), so a
// drained node moves up only once every canary window is finished. It
// returns the positions lifted (r's Hoist) and their names, for the phase
// reason. The order itself, and the waves in status, are unchanged.
func opportunistic(r *roster.Roster, order []PlannedNode, p model.Policy, current int) (lifted []int, moved []string) {
	if !p.Opportunistic || current <= 0 {
		return nil, nil
	}
	for _, pn := range order {
		if !pn.Canary {
			break // the canaries come first
		}
		if pn.Window >= current {
			return nil, nil // a canary is not finished yet
		}
	}
	for _, pos := range r.Hoist() {
		lifted = append(lifted, pos)
		moved = append(moved, order[pos].Name)
	}
	return lifted, moved
}

// walkOrder are the positions the start loop walks after the lifted ones:
// the waiting nodes before and after the current window [lo, hi) and the
// window itself, in plan order.
func walkOrder(held []int, lo, hi int, lifted []int) []int {
	out := make([]int, 0, len(held)+hi-lo)
	for _, p := range held {
		if p < lo {
			out = append(out, p)
		}
	}
	for p := lo; p < hi; p++ {
		if _, found := slices.BinarySearch(lifted, p); !found {
			out = append(out, p)
		}
	}
	for _, p := range held {
		if p >= hi {
			out = append(out, p)
		}
	}
	return out
}
