package planner

import (
	"testing"
	"time"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestEstimateCostsTheBaselineNothing: the plan's estimate is the waves'
// swaps and soaks, the same whatever the baseline (it is read from the
// agents' history when a node's slot starts, not waited out in it): six
// nodes one at a time, two targets swapped in 10s each, a 25s soak.
func TestEstimateCostsTheBaselineNothing(t *testing.T) {
	var views []model.NodeView
	for _, n := range []string{"a1", "a2", "a3", "b1", "b2", "b3"} {
		views = append(views, model.NodeView{Name: n, Zone: n[:1]})
	}
	order, _ := Order(views, nil, 1)
	want := 6 * (2*10*time.Second + 25*time.Second)
	for _, baseline := range []time.Duration{0, 15 * time.Second, model.DefaultBaseline, time.Hour} {
		p := model.Policy{Targets: model.DefaultTargets, Baseline: baseline, Soak: 25 * time.Second}
		if got := Estimate(order, p, 10*time.Second); got != want {
			t.Errorf("baseline %s: estimate %s, want %s (6 waves of 2 swaps and the soak, no baseline)", baseline, got, want)
		}
	}
}
