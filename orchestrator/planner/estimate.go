package planner

import (
	"time"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// Estimate is the planned duration of a rollout: per wave, the slowest node's
// swaps + soak (nodes of a wave run in parallel), summed over waves. The
// baseline costs no wall time: the judge reads it from the agents' history
// when a node's slot starts (it is waited for only where the history does
// not cover it: an agent newer than the baseline, or a baseline longer than
// the agents' --history-keep). Drains and waits for maintenance windows are
// not included.
func Estimate(order []PlannedNode, p model.Policy, swapPerTarget time.Duration) time.Duration {
	perNode := time.Duration(len(p.Targets))*swapPerTarget + p.Soak
	waves := map[int]bool{}
	for _, n := range order {
		waves[n.Wave] = true
	}
	return time.Duration(len(waves)) * perNode
}
