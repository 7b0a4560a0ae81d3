package planner

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Other maintenance counts against maxUnavailable: a node held by Kured is
// never started, a node cordoned by someone else costs a slot to swap but no
// more budget, and with countOthers off only nodewise's own nodes count.
func TestPlanCountsOtherMaintenance(t *testing.T) {
	world := func() []model.NodeView {
		ns := fixture.Fleet(1, 8)
		for _, n := range []string{"zone-a-00", "zone-a-01", "zone-a-02"} {
			fixture.Upgrade(ns, n)
			fixture.SetState(ns, n, v1alpha1.NodeDone)
		}
		fixture.SetState(ns, "zone-a-03", v1alpha1.NodeSwapZtunnel)
		ns[4].HeldBy, ns[4].Unschedulable = "held by Kured's lock", true
		ns[5].Unschedulable = true
		return ns
	}
	tgts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(4), intstr.FromInt32(3)
	})
	d := Plan(model.Snapshot{Nodes: world(), Targets: tgts}, p, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	// 3 - 2 others - 1 in flight = 0 budget: only the cordoned zone-a-05
	// may start (it is unavailable already), zone-a-04 waits for Kured.
	got := starts(d)
	if strings.Join(got, " ") != "zone-a-05" {
		t.Fatalf("started %v, want only the cordoned zone-a-05 (%s)", got, d.Reason)
	}
	if !strings.Contains(d.Reason, "zone-a-04 held by Kured's lock") || !strings.Contains(d.Reason, "2 node(s) unavailable through other maintenance") {
		t.Errorf("reason %q does not name the held node and the count", d.Reason)
	}
	off := false
	p2 := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(4), intstr.FromInt32(3)
		s.Coordination.CountOthers = &off
	})
	d = Plan(model.Snapshot{Nodes: world(), Targets: tgts}, p2, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	if got := strings.Join(starts(d), " "); got != "zone-a-05 zone-a-06" {
		t.Errorf("countOthers off started %q, want zone-a-05 zone-a-06 (3 - 1 in flight; Kured's node still held)", got)
	}
	bad := Plan(model.Snapshot{Nodes: world(), Targets: tgts, UnreadableLocks: []string{"Kured lock on DaemonSet kube-system/kured is not JSON"}}, p, time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	if len(starts(bad)) != 0 || !strings.Contains(bad.Reason, "not JSON") {
		t.Fatalf("an unreadable lock: starts %v, reason %q; want none, fail closed", starts(bad), bad.Reason)
	}
}

// A node NotReady before its turn holds neither a slot nor its window: the
// nodes after it start, it says why, and it starts once Ready again.
func TestPlanNotReadyNodeWaitsWithoutASlot(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	ns := fixture.Fleet(1, 4)
	ns[0].Ready = false // zone-a-00, the first wave on its own
	tgts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
	})
	d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if got := strings.Join(starts(d), " "); got != "zone-a-01 zone-a-02" {
		t.Fatalf("started %q, want the two nodes after the NotReady one (%s)", got, d.Reason)
	}
	if !strings.HasPrefix(d.Held["zone-a-00"], "NotReady") {
		t.Fatalf("held %v: the NotReady node does not say why it waits", d.Held)
	}
	for _, n := range []string{"zone-a-01", "zone-a-02", "zone-a-03"} {
		fixture.Upgrade(ns, n)
		fixture.SetState(ns, n, v1alpha1.NodeDone)
	}
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now); d.Phase == v1alpha1.PhaseCompleted || len(starts(d)) != 0 {
		t.Fatalf("with only the NotReady node left: phase %s, starts %v", d.Phase, starts(d))
	}
	ns[0].Ready = true
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now); strings.Join(starts(d), " ") != "zone-a-00" {
		t.Fatalf("back Ready: starts %v, want zone-a-00 (%s)", starts(d), d.Reason)
	}
}
