package orchestrator

import (
	"sort"
)

// PlannedNode is one node's place in the plan.
type PlannedNode struct {
	Name   string
	Zone   string
	Canary bool
	Wave   int // from 1
}

// Order puts the selected nodes in rollout order and assigns waves: each canary
// is a wave of its own; then zone by zone (zones sorted by name, nodes by name),
// waves ramp 1, 2, 4 … up to maxParallel, and a wave never spans two zones.
// Canaries missing from nodes are returned in missing.
func Order(nodes []NodeView, canaries []string, maxParallel int) (plan []PlannedNode, missing []string) {
	byName := map[string]NodeView{}
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
		plan = append(plan, PlannedNode{Name: c, Zone: n.Zone, Canary: true, Wave: wave})
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
	size := 1
	for _, z := range zoneNames {
		names := zones[z]
		sort.Strings(names)
		for i := 0; i < len(names); {
			wave++
			end := min(i+size, len(names))
			for _, name := range names[i:end] {
				plan = append(plan, PlannedNode{Name: name, Zone: z, Wave: wave})
			}
			i = end
			size = min(size*2, maxParallel)
		}
	}
	return plan, missing
}
