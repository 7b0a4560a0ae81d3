package planner

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestPlanStoppedResumesInFlightAndStartsNothing: a rollout that cannot
// go on (Policy.Invalid) resumes its in-flight nodes, a node outside the
// selector it can still read too, starts none, keeps its status entries
// as they are, and says why; an abort ends it once nothing is in flight.
func TestPlanStoppedResumesInFlightAndStartsNothing(t *testing.T) {
	ns := fixture.Fleet(2, 3)
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDrain)
	fixture.SetState(ns, "zone-b-02", v1alpha1.NodeSoak)
	status := v1alpha1.NodeRolloutStatus{Nodes: []v1alpha1.NodeStatus{
		{Name: "zone-a-00", State: v1alpha1.NodeDrain, Zone: "zone-a", Wave: 1, Canary: true},
		{Name: "zone-b-02", State: v1alpha1.NodeSoak, Zone: "zone-b", Wave: 3},
	}}
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{model.LabelZone: "zone-a"}}
	})
	p.Invalid = "spec.maintenanceWindows[0]: unknown time zone Europe/Berln"
	snap := model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType), Status: status}
	d := Plan(snap, p, time.Now())
	var resumed []string
	for _, a := range d.Actions {
		switch a.Kind {
		case ActResume:
			resumed = append(resumed, a.Node)
		case ActStart, ActMarkDone, ActRetry, ActSkip, ActPrepull:
			t.Errorf("%s %s planned while the rollout cannot go on", a.Kind, a.Node)
		}
	}
	if strings.Join(resumed, ",") != "zone-a-00,zone-b-02" {
		t.Errorf("resumed %v, want both in-flight nodes", resumed)
	}
	if d.Phase != v1alpha1.PhasePending || !strings.Contains(d.Reason, p.Invalid) || !strings.Contains(d.Reason, "making 2 in-flight node(s) safe") {
		t.Errorf("%s %q, want Pending naming the field and the nodes made safe", d.Phase, d.Reason)
	}
	if len(d.Order) != 2 || d.Order[0] != (PlannedNode{Name: "zone-a-00", Zone: "zone-a", Wave: 1, Canary: true}) || d.Order[1].Name != "zone-b-02" {
		t.Errorf("order %+v, want the status's two entries as they are", d.Order)
	}

	p.Abort = true
	if d := Plan(snap, p, time.Now()); d.Phase != v1alpha1.PhasePending || !strings.Contains(d.Reason, "aborting") {
		t.Errorf("aborted with nodes in flight: %s %q, want Pending, aborting", d.Phase, d.Reason)
	}
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodePending)
	fixture.SetState(ns, "zone-b-02", v1alpha1.NodePending)
	if d := Plan(snap, p, time.Now()); d.Phase != v1alpha1.PhaseAborted || len(d.Actions) != 0 {
		t.Errorf("aborted, nothing in flight: %s %q %+v, want Aborted and no action", d.Phase, d.Reason, d.Actions)
	}
}

// TestPlanEmptySelectionFails: a selector that matches no node is Failed,
// naming the selector, not Completed; once the rollout has started, a
// selection emptied (every node deleted) is not a failure of the spec.
func TestPlanEmptySelectionFails(t *testing.T) {
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "ingres"}}
	})
	snap := model.Snapshot{Nodes: fixture.Fleet(2, 2), Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)}
	if d := Plan(snap, p, time.Now()); d.Phase != v1alpha1.PhaseFailed || !strings.Contains(d.Reason, "spec.nodeSelector pool=ingres matches no node") {
		t.Errorf("%s %q, want Failed naming the selector", d.Phase, d.Reason)
	}
	if d := Plan(model.Snapshot{Targets: snap.Targets}, fixture.Policy(t, nil), time.Now()); d.Phase != v1alpha1.PhaseFailed || !strings.Contains(d.Reason, "the cluster has none") {
		t.Errorf("no node at all: %s %q, want Failed", d.Phase, d.Reason)
	}
	snap.Status.StartTime = &metav1.Time{Time: time.Now()}
	if d := Plan(snap, p, time.Now()); d.Phase != v1alpha1.PhaseCompleted {
		t.Errorf("after the start: %s %q, want Completed", d.Phase, d.Reason)
	}
}
