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

// With spec.coordination.opportunistic a node someone else cordoned and
// drained goes first, in the window now current, once the canaries are
// finished; without it (or while a canary is unfinished) the order holds.
func TestPlanOpportunisticDrainedNodeGoesFirst(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tgts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	world := func() []model.NodeView {
		ns := fixture.Fleet(2, 4)                       // zone-a-00 … zone-b-03
		ns[6].Unschedulable, ns[6].Drained = true, true // zone-b-02, far down the order
		return ns
	}
	spec := func(opp bool) func(*v1alpha1.NodeRolloutSpec) {
		return func(s *v1alpha1.NodeRolloutSpec) {
			s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
			s.CanaryNodes = []string{"zone-a-03"}
			s.Coordination.Opportunistic = opp
		}
	}
	// The canary first, in both cases.
	for _, opp := range []bool{false, true} {
		d := Plan(model.Snapshot{Nodes: world(), Targets: tgts}, fixture.Policy(t, spec(opp)), now)
		if got := strings.Join(starts(d), " "); got != "zone-a-03" {
			t.Fatalf("opportunistic=%v before the canary passed: started %q, want the canary alone (%s)", opp, got, d.Reason)
		}
	}
	afterCanary := func() []model.NodeView {
		ns := world()
		fixture.Upgrade(ns, "zone-a-03")
		fixture.SetState(ns, "zone-a-03", v1alpha1.NodeDone)
		return ns
	}
	d := Plan(model.Snapshot{Nodes: afterCanary(), Targets: tgts}, fixture.Policy(t, spec(false)), now)
	if got := strings.Join(starts(d), " "); got != "zone-a-00" {
		// The cordoned zone-b-02 counts against maxUnavailable 2 (one left)
		// but waits for its window, far down the order.
		t.Fatalf("off: started %q, want zone-a-00 alone, in plan order (%s)", got, d.Reason)
	}
	d = Plan(model.Snapshot{Nodes: afterCanary(), Targets: tgts}, fixture.Policy(t, spec(true)), now)
	if got := strings.Join(starts(d), " "); got != "zone-b-02 zone-a-00" {
		t.Fatalf("on: started %q, want the drained zone-b-02 first, in a slot and costing no budget, then zone-a-00 (%s)", got, d.Reason)
	}
	if !strings.Contains(d.Reason, "first, cordoned and drained by someone else: zone-b-02") || !strings.Contains(d.Reason, "wave 2") {
		t.Errorf("reason %q: want the wave of the order and the node moved up", d.Reason)
	}
	// Cordoned but not drained: not moved.
	ns := afterCanary()
	ns[6].Drained = false
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, fixture.Policy(t, spec(true)), now)
	if got := strings.Join(starts(d), " "); got != "zone-a-00" {
		t.Fatalf("cordoned, not drained: started %q, want zone-a-00 only", got)
	}
	// Drained but held by Kured: it waits, it is not moved.
	ns = afterCanary()
	ns[6].HeldBy = "held by Kured's lock"
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, fixture.Policy(t, spec(true)), now)
	if got := strings.Join(starts(d), " "); got != "zone-a-00" {
		t.Fatalf("drained and held by Kured: started %q, want zone-a-00 only", got)
	}
}
