package planner

import (
	"maps"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestUnmovedNodesCannotChangeThePlan is Unmoved's promise, checked on
// random fleets: whenever one node's change is Unmoved, Plan, NextInLine
// and the in-flight nodes (the Kured lock's) come out the same, whatever
// the other nodes, the policy and the change. It also checks that the
// changes Unmoved refuses are real ones: some of them change the plan.
func TestUnmovedNodesCannotChangeThePlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 5000))
	states := []v1alpha1.NodeState{"", v1alpha1.NodePending, nodestep.Claimed, v1alpha1.NodePreflight, v1alpha1.NodeCordon,
		v1alpha1.NodeSwapCNI, v1alpha1.NodeSwapZtunnel, v1alpha1.NodeSoak, v1alpha1.NodeGate, v1alpha1.NodeDone,
		v1alpha1.NodeSkipped, v1alpha1.NodeFailed}
	now := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	targets := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	// mutate changes one random thing of a node's view.
	mutate := func(n model.NodeView) model.NodeView {
		n.Pods = maps.Clone(n.Pods)
		n.Labels = maps.Clone(n.Labels)
		switch rng.IntN(11) {
		case 0:
			n.State = states[rng.IntN(len(states))]
		case 1:
			n.Ready = !n.Ready
			if !n.Ready {
				n.NotReadySince = now.Add(-time.Duration(rng.IntN(60)) * time.Minute)
			} else {
				n.NotReadySince = time.Time{}
			}
		case 2:
			n.Unschedulable = !n.Unschedulable
		case 3:
			n.HeldBy = map[bool]string{true: "held by Kured's lock"}[n.HeldBy == ""]
		case 4:
			n.Blocked = map[bool]string{true: "blocked by pod a/b"}[n.Blocked == ""]
		case 5:
			n.Drained = !n.Drained
		case 6:
			n.Retried = !n.Retried
		case 7:
			for k, p := range n.Pods {
				switch rng.IntN(4) {
				case 0:
					p.Ready = !p.Ready
				case 1:
					p.Hash = map[bool]string{true: fixture.NewHash, false: fixture.OldHash}[p.Hash == fixture.OldHash]
				case 2:
					p.Terminating = !p.Terminating
				case 3:
					p.Name, p.UID = p.Name+"-x", "uid-x" // recreated: the planner reads neither
				}
				n.Pods[k] = p
				break
			}
		case 8:
			n.Prepull = model.PrepullView{Exists: true, Pulled: rng.IntN(2) == 0}
		case 9:
			n.Labels["pool"] = "other"
		case 10:
			n.Labels[model.LabelZone] = "zone-z"
			n.Zone = "zone-z"
		}
		return n
	}
	checked, refusedMoved := 0, 0
	for round := 0; round < 3000; round++ {
		fleet := fixture.Fleet(2, 4+rng.IntN(6))
		for i := range fleet {
			fleet[i].State = states[rng.IntN(len(states))]
			if rng.IntN(4) == 0 {
				fixture.Upgrade(fleet, fleet[i].Name)
			}
			if rng.IntN(8) == 0 {
				fleet[i].Ready, fleet[i].NotReadySince = false, now.Add(-time.Hour)
			}
			if rng.IntN(8) == 0 {
				fleet[i].Unschedulable = true
				fleet[i].Drained = rng.IntN(2) == 0
			}
			if rng.IntN(10) == 0 {
				fleet[i].HeldBy = "held by Kured's lock"
			}
		}
		p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
			s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1+int32(rng.IntN(4))), intstr.FromInt32(1+int32(rng.IntN(4)))
			if rng.IntN(3) == 0 {
				s.CanaryNodes = []string{fleet[rng.IntN(len(fleet))].Name}
			}
		})
		p.Opportunistic = rng.IntN(2) == 0
		p.Selector = nil
		if rng.IntN(4) == 0 {
			p.NotReadyTimeout = 30 * time.Minute
		}
		p.CountOthers, p.Prepull = rng.IntN(4) != 0, rng.IntN(4) == 0
		status := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing}
		switch rng.IntN(8) {
		case 0:
			p.Rollback = true // the templates restored: status moved nodes to another revision
			status.Targets = []v1alpha1.TargetStatus{{Namespace: targets[0].Ref.Namespace, Name: targets[0].Ref.Name, Revision: "moved-to"}}
		case 1:
			p.Abort = true
		case 2:
			p.Paused = true
		case 3:
			status.Phase, status.HaltReason = v1alpha1.PhaseHalted, "node x failed"
		}
		was := model.Snapshot{Nodes: fleet, Targets: targets, Status: status, ResumeRequested: rng.IntN(8) == 0}
		i := rng.IntN(len(fleet))
		is := was
		is.Nodes = append([]model.NodeView(nil), fleet...)
		is.Nodes[i] = mutate(fleet[i])
		dw, di := Plan(was, p, now), Plan(is, p, now)
		same := reflect.DeepEqual(dw, di) && reflect.DeepEqual(NextInLine(was, p, dw), NextInLine(is, p, di)) &&
			reflect.DeepEqual(inFlight(was), inFlight(is))
		if Unmoved(fleet[i], is.Nodes[i]) {
			checked++
			if !same {
				t.Fatalf("round %d: node %s changed from %+v to %+v, Unmoved, but the plan changed:\n%+v\n%+v", round, fleet[i].Name, fleet[i], is.Nodes[i], dw, di)
			}
		} else if !same {
			refusedMoved++
		}
	}
	if checked < 500 || refusedMoved < 500 {
		t.Fatalf("the rounds did not exercise both sides: %d unmoved changes checked, %d refused changes that moved the plan", checked, refusedMoved)
	}
	t.Logf("%d unmoved changes left the plan alone; %d refused changes moved it", checked, refusedMoved)
}

func inFlight(s model.Snapshot) []string {
	var out []string
	for _, n := range s.Nodes {
		if model.InFlight(n.State) {
			out = append(out, n.Name)
		}
	}
	return out
}

func TestUnmoved(t *testing.T) {
	base := fixture.Fleet(1, 1)[0]
	inflight := base
	inflight.State = v1alpha1.NodeSwapCNI
	with := func(n model.NodeView, f func(*model.NodeView)) model.NodeView {
		n.Pods, n.Labels = maps.Clone(n.Pods), maps.Clone(n.Labels)
		f(&n)
		return n
	}
	for _, tc := range []struct {
		name    string
		was, is model.NodeView
		want    bool
	}{
		{"nothing changed", base, base, true},
		{"a target pod recreated, same revision and readiness", base, with(base, func(n *model.NodeView) {
			p := n.Pods["istio-system/ztunnel"]
			p.Name, p.UID = "ztunnel-new", "u2"
			n.Pods["istio-system/ztunnel"] = p
		}), true},
		{"a pending node's target pod turns Ready", with(base, func(n *model.NodeView) {
			p := n.Pods["istio-system/ztunnel"]
			p.Ready = false
			n.Pods["istio-system/ztunnel"] = p
		}), base, false},
		{"a pending node goes NotReady", base, with(base, func(n *model.NodeView) { n.Ready, n.NotReadySince = false, time.Unix(1, 0) }), false},
		{"in flight: its next step, its cordon, its pods", inflight, with(inflight, func(n *model.NodeView) {
			n.State, n.Unschedulable, n.Ready = v1alpha1.NodeSwapZtunnel, true, false
			n.Pods["istio-system/ztunnel"] = model.PodView{Hash: fixture.NewHash}
		}), true},
		{"in flight, then done", inflight, with(inflight, func(n *model.NodeView) { n.State = v1alpha1.NodeDone }), false},
		{"in flight, relabelled", inflight, with(inflight, func(n *model.NodeView) { n.Labels["pool"] = "x" }), false},
		{"in flight, pre-pull pod gone", with(inflight, func(n *model.NodeView) { n.Prepull.Exists = true }), inflight, false},
	} {
		if got := Unmoved(tc.was, tc.is); got != tc.want {
			t.Errorf("%s: Unmoved = %v, want %v", tc.name, got, tc.want)
		}
	}
}
