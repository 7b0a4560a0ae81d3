package health

import (
	"fmt"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// PlannedDuringSwap matches the planned resets against the resets that
// happened during the swap itself, between the last baseline snapshot and
// the soak's first. On a node swapped in place that is where they land: the
// old ztunnel resets its surviving connections at its drain deadline, before
// the new one is Ready, so neither window holds them. At most one reset per
// old connection is matched, per pod and side, as in the soak. It returns
// what is left of the plan for the soak window and what the swap used up.
func PlannedDuringSwap(beforeSwap, soakStart wire.Snapshot, planned map[PodKey]uint64) (left, seen map[PodKey]uint64) {
	if len(planned) == 0 {
		return planned, nil
	}
	w, err := NewWindow(beforeSwap, soakStart)
	if err != nil {
		return planned, nil // the windows the judge reads report the error
	}
	seen = subtractPlanned(&w, planned)
	left = make(map[PodKey]uint64, len(planned))
	for k, n := range planned {
		if r := n - seen[k]; r > 0 {
			left[k] = r
		}
	}
	return left, seen
}

// addSwapResets reports the planned resets seen during the swap with the
// assessment's own (those subtracted from the soak).
func addSwapResets(a *Assessment, seen map[PodKey]uint64, deadline time.Duration) {
	var n uint64
	for _, c := range seen {
		n += c
	}
	if n == 0 {
		return
	}
	a.PlannedResets += n
	a.PlannedPods = max(a.PlannedPods, len(seen))
	a.Reasons = append(a.Reasons, fmt.Sprintf(
		"planned resets during the swap: %d on %d pods (connections older than the %s drain deadline, reset by the old ztunnel at its deadline), not counted as a regression",
		n, len(seen), deadline))
}
