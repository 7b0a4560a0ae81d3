package planner

import (
	"sort"

	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/roster"
)

// PlannedNode is one node's place in the plan. Its Window groups the nodes
// that may overlap, from 1: a node starts only once every node of a lower
// window is finished, and within a window a node starts as soon as a slot
// frees (at most maxParallel at once, and maxUnavailable). Each canary wave
// and each ramp wave is a window of its own (a barrier: the next, larger
// wave waits until all its nodes passed their gate); once the ramp reaches
// maxParallel, the rest of the zone is one window, a sliding window like
// the DaemonSet controller's RollingUpdate. A zone boundary is always a
// barrier.
type PlannedNode = roster.Slot

// Order puts the selected nodes in rollout order and assigns waves and
// windows: each canary is a wave of its own; then zone by zone (zones sorted
// by name, nodes by name), waves ramp 1, 2, 4 … up to maxParallel, and a wave
// never spans two zones. Canaries missing from nodes are returned in missing.
func Order(nodes []model.NodeView, canaries []string, maxParallel int) (plan []PlannedNode, missing []string) {
	byName := map[string]model.NodeView{}
	for _, n := range nodes {
		byName[n.Name] = n
	}
	isCanary := map[string]bool{}
	wave := 0
	for _, c := range canaries {
		n, ok := byName[c]
		if !ok {
			missing = append(missing, c)
			continue
		}
		if isCanary[c] {
			continue
		}
		isCanary[c] = true
		wave++
		plan = append(plan, PlannedNode{Name: c, Zone: n.Zone, Canary: true, Wave: wave, Window: wave})
	}
	zones := map[string][]string{}
	for _, n := range nodes {
		if !isCanary[n.Name] {
			zones[n.Zone] = append(zones[n.Zone], n.Name)
		}
	}
	zoneNames := make([]string, 0, len(zones))
	for z := range zones {
		zoneNames = append(zoneNames, z)
	}
	sort.Strings(zoneNames)
	if maxParallel < 1 {
		maxParallel = 1
	}
	size, window := 1, wave
	for _, z := range zoneNames {
		names := zones[z]
		sort.Strings(names)
		full := 0 // this zone's sliding window, once the ramp reached maxParallel
		for i := 0; i < len(names); {
			wave++
			w := full
			if size < maxParallel || full == 0 {
				window++
				w = window
			}
			if size >= maxParallel {
				full = w
			}
			end := min(i+size, len(names))
			for _, name := range names[i:end] {
				plan = append(plan, PlannedNode{Name: name, Zone: z, Wave: wave, Window: w})
			}
			i = end
			size = min(size*2, maxParallel)
		}
	}
	return plan, missing
}
