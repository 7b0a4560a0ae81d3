package planner

import (
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestNextInLine: while the slots are full, the nodes next in line are the
// first pending ones in plan order, never more than maxParallel, never one
// started, in flight, finished or waiting (NotReady); and none once the
// rollout does not progress.
func TestNextInLine(t *testing.T) {
	for _, maxParallel := range []int{1, 2} {
		p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
			s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(int32(maxParallel)), intstr.FromInt32(int32(maxParallel))
		})
		ns := fixture.Fleet(1, 10)
		s := model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}
		order := Plan(s, p, time.Now()).Order
		// The first four are done, the next maxParallel soak, the one after
		// is NotReady: the next in line come after it.
		at := 0
		for ; at < 4; at++ {
			fixture.SetState(ns, order[at].Name, v1alpha1.NodeDone)
			fixture.Upgrade(ns, order[at].Name)
		}
		for end := at + maxParallel; at < end; at++ {
			fixture.SetState(ns, order[at].Name, v1alpha1.NodeSoak)
		}
		for i := range ns {
			if ns[i].Name == order[at].Name {
				ns[i].Ready = false
			}
		}
		at++
		d := Plan(s, p, time.Now())
		if got := starts(d); len(got) != 0 {
			t.Fatalf("maxParallel %d: starts %v with every slot taken", maxParallel, got)
		}
		var want []string
		for _, pn := range order[at : at+maxParallel] {
			want = append(want, pn.Name)
		}
		if got := NextInLine(s, p, d); !slices.Equal(got, want) {
			t.Errorf("maxParallel %d: next in line %v, want %v", maxParallel, got, want)
		}
		d.Phase = v1alpha1.PhaseHalted
		if got := NextInLine(s, p, d); got != nil {
			t.Errorf("maxParallel %d: next in line %v of a halted rollout", maxParallel, got)
		}
	}
}
