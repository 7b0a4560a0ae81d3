package orchestrator

import "time"

// Estimate is the planned duration of a rollout: per wave, the slowest node's
// baseline + swaps + soak (nodes of a wave run in parallel), summed over waves.
// Drains and waits for maintenance windows are not included.
func Estimate(order []PlannedNode, p Policy, swapPerTarget time.Duration) time.Duration {
	perNode := p.Baseline + time.Duration(len(p.Targets))*swapPerTarget + p.Soak
	waves := map[int]bool{}
	for _, n := range order {
		waves[n.Wave] = true
	}
	return time.Duration(len(waves)) * perNode
}
