package planner

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func skips(d Decision) map[string]string {
	out := map[string]string{}
	for _, a := range d.Actions {
		if a.Kind == ActSkip {
			out[a.Node] = a.Reason
		}
	}
	return out
}

// With spec.notReadyTimeout a node NotReady before its turn waits until the
// limit, on a fake clock, then is Skipped with the reason, and the rollout
// completes saying how many were skipped and why. Without the limit it
// waits forever (TestPlanNotReadyNodeWaitsWithoutASlot).
func TestPlanSkipsANodeNotReadyPastTheLimit(t *testing.T) {
	clock := &fixture.Clock{T: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)}
	ns := fixture.Fleet(1, 3)
	ns[0].Ready, ns[0].NotReadySince = false, clock.Now().Add(-5*time.Minute)
	for _, n := range []string{"zone-a-01", "zone-a-02"} {
		fixture.Upgrade(ns, n)
		fixture.SetState(ns, n, v1alpha1.NodeDone)
	}
	tgts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.NotReadyTimeout = &v1alpha1.Duration{Duration: 10 * time.Minute}
	})
	d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, clock.Now())
	if len(skips(d)) != 0 || d.Phase == v1alpha1.PhaseCompleted {
		t.Fatalf("NotReady 5m of 10m: skips %v, phase %s; want it waiting", skips(d), d.Phase)
	}
	if !strings.HasPrefix(d.Held["zone-a-00"], "NotReady") {
		t.Fatalf("held %v, want zone-a-00 waiting as NotReady", d.Held)
	}
	clock.T = clock.T.Add(5*time.Minute - time.Second)
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, clock.Now()); len(skips(d)) != 0 {
		t.Fatalf("a second before the limit: skips %v", skips(d))
	}
	clock.T = clock.T.Add(time.Second)
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, clock.Now())
	why := skips(d)["zone-a-00"]
	if !strings.Contains(why, "NotReady since 2026-11-30T09:55:00Z (10m0s), longer than notReadyTimeout 10m0s") {
		t.Fatalf("at the limit: skips %v, want zone-a-00 with the reason", skips(d))
	}
	if d.Phase != v1alpha1.PhaseCompleted || !strings.Contains(d.Reason, "2 node(s) on the newest revision, 1 skipped (zone-a-00: NotReady since") {
		t.Fatalf("phase %s %q, want Completed naming the skipped node", d.Phase, d.Reason)
	}
	// The status has it Skipped on the next pass: nothing more is planned for it.
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodeSkipped)
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts, Status: v1alpha1.NodeRolloutStatus{Nodes: []v1alpha1.NodeStatus{{Name: "zone-a-00", State: v1alpha1.NodeSkipped, Reason: why}}}}, p, clock.Now())
	if len(skips(d)) != 0 || d.Phase != v1alpha1.PhaseCompleted || !strings.Contains(d.Reason, "1 skipped (zone-a-00: NotReady since") {
		t.Fatalf("after the skip: skips %v, phase %s %q", skips(d), d.Phase, d.Reason)
	}
	// A node in flight is never skipped by it, NotReady or not.
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodeSoak)
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, clock.Now().Add(time.Hour)); len(skips(d)) != 0 {
		t.Fatalf("in flight: skips %v", skips(d))
	}
}

func TestNotReadyTimeoutMustBePositive(t *testing.T) {
	_, err := model.NewPolicy(v1alpha1.NodeRolloutSpec{NotReadyTimeout: &v1alpha1.Duration{}})
	if err == nil || !strings.Contains(err.Error(), "spec.notReadyTimeout: must be positive") {
		t.Fatalf("notReadyTimeout 0s: %v", err)
	}
}
