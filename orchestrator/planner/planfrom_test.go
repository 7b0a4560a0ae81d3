package planner

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// randomView is a random view of node i of a fleet: its zone, labels,
// state, readiness, holders, pods and pre-pull pod drawn so that every
// branch of Plan is taken somewhere (few failed nodes, so most fleets are
// not halted). A late fleet's nodes are nearly all finished, so that its
// plans complete too.
func randomView(rng *rand.Rand, i int, now time.Time, late bool) model.NodeView {
	zone := fmt.Sprintf("zone-%c", 'a'+rng.IntN(3))
	pick := func(p float64) bool { return rng.Float64() < p }
	states := []v1alpha1.NodeState{"", v1alpha1.NodePending, v1alpha1.NodePending, v1alpha1.NodePending, v1alpha1.NodeDone, v1alpha1.NodeDone,
		v1alpha1.NodeSkipped, v1alpha1.NodeSwapZtunnel, v1alpha1.NodeSoak, v1alpha1.NodeRolledBack}
	n := model.NodeView{
		Name: fmt.Sprintf("node-%03d", i), Zone: zone, Labels: map[string]string{model.LabelZone: zone},
		State: states[rng.IntN(len(states))], Ready: !pick(0.15), Unschedulable: pick(0.1), Drained: pick(0.1), Retried: pick(0.1),
		Pods: map[string]model.PodView{},
	}
	if pick(0.01) {
		n.State = v1alpha1.NodeFailed
	}
	if late {
		n.State = []v1alpha1.NodeState{v1alpha1.NodeDone, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodePending}[rng.IntN(4)]
	}
	if pick(0.8) {
		n.Labels["pool"] = "main"
	}
	if !n.Ready && pick(0.8) {
		n.NotReadySince = now.Add(-time.Duration(rng.IntN(20)) * time.Minute)
	}
	if pick(0.05) {
		n.HeldBy = "Kured's lock"
	}
	if pick(0.05) {
		n.Blocked = "default/batch-job"
	}
	n.Prepull = model.PrepullView{Exists: pick(0.1), Pulled: pick(0.7), Missing: pick(0.05)}
	if pick(0.01) {
		n.Prepull.Failed = "image pull failed"
	}
	for _, r := range model.DefaultTargets {
		if pick(0.05) {
			continue // no pod of this target yet
		}
		hash := fixture.OldHash
		if n.State == v1alpha1.NodeDone || late || pick(0.3) {
			hash = fixture.NewHash
		}
		if pick(0.05) {
			hash = "older000" // a Done node behind a newer template
		}
		n.Pods[r.Namespace+"/"+r.Name] = model.PodView{Name: r.Name + "-" + n.Name, Hash: hash, Ready: late || !pick(0.1), Terminating: !late && pick(0.05)}
	}
	return n
}

// randomPolicy is a valid policy with random limits, canaries, selector
// and coordination.
func randomPolicy(t *testing.T, rng *rand.Rand, size int) model.Policy {
	return fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(int32(1+rng.IntN(6))), intstr.FromInt32(int32(1+rng.IntN(8)))
		if rng.IntN(3) == 0 {
			s.MaxParallel = intstr.FromString("20%")
		}
		for range rng.IntN(3) {
			s.CanaryNodes = append(s.CanaryNodes, fmt.Sprintf("node-%03d", rng.IntN(size+2))) // sometimes one not in the fleet
		}
		if rng.IntN(3) == 0 {
			s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "main"}}
		}
		if rng.IntN(2) == 0 {
			s.NotReadyTimeout = &v1alpha1.Duration{Duration: 10 * time.Minute}
		}
		counts := rng.IntN(2) == 0
		s.Coordination = v1alpha1.CoordinationSpec{CountOthers: &counts, Opportunistic: rng.IntN(2) == 0}
		s.Prepull = rng.IntN(4) == 0
	})
}

// A plan from a kept roster, brought up to date one node's change at a
// time (roster.Update), decides exactly what a plan from the whole snapshot
// decides, and so does NextInLine, over randomized fleets, policies and
// changes: the incremental path is an optimisation, never a second
// semantics.
func TestPlanFromKeptRosterMatchesAFullPlan(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	tgts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	kinds := map[v1alpha1.RolloutPhase]int{}
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 47))
		size, late := 5+rng.IntN(40), seed%3 == 0
		var nodes []model.NodeView
		for i := range size {
			nodes = append(nodes, randomView(rng, i, now, late))
		}
		p := randomPolicy(t, rng, size)
		s := model.Snapshot{Nodes: nodes, Targets: tgts, Status: v1alpha1.NodeRolloutStatus{StartTime: &metav1.Time{Time: now}}}
		r := NewRoster(s, p)
		for change := range 30 {
			at := now.Add(time.Duration(change) * time.Minute)
			kept := s
			kept.Nodes = r.Nodes()
			full := s
			full.Nodes = slices.Clone(r.Nodes())
			got, want := PlanFrom(r, kept, p, at), Plan(full, p, at)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, change %d: the kept roster's plan differs from the full plan:\n got %+v\nwant %+v", seed, change, got, want)
			}
			if g, w := NextInLineFrom(r, got), NextInLine(full, p, want); !slices.Equal(g, w) {
				t.Fatalf("seed %d, change %d: next in line %v, the full plan's %v", seed, change, g, w)
			}
			kinds[want.Phase]++
			i := rng.IntN(size)
			nv := randomView(rng, i, at, late)
			if rng.IntN(2) == 0 { // mostly the same zone and labels: the order stays
				nv.Zone, nv.Labels = r.Nodes()[i].Zone, r.Nodes()[i].Labels
			}
			if !r.Update(nv) {
				t.Fatalf("the roster has no view of %s", nv.Name)
			}
		}
	}
	// The fleets reach the phases whose walks the roster stands in for.
	for _, ph := range []v1alpha1.RolloutPhase{v1alpha1.PhaseProgressing, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted} {
		if kinds[ph] == 0 {
			t.Errorf("no randomized plan was %s (%v): the comparison proves little", ph, kinds)
		}
	}
}
