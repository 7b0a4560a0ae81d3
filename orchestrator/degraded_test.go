package orchestrator

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// TestWritePhaseRebuildsADegradedStatus: a leader that reads a degraded
// status back (a predecessor's, over its budget: n2 and n3 omitted, counted
// in Omitted) plans every node again; the pass brings back their entries
// from the nodes' records, counts each node once, and says nothing was
// lost: an omitted entry is not a status write lost with its leader.
func TestWritePhaseRebuildsADegradedStatus(t *testing.T) {
	since := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) {
		nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing, ObservedGeneration: 1,
			Counts:  v1alpha1.RolloutCounts{Total: 4, InProgress: 2, Done: 2},
			Omitted: &v1alpha1.RolloutCounts{Total: 2, Done: 2},
			Nodes: []v1alpha1.NodeStatus{
				{Name: "n1", State: v1alpha1.NodeSwapZtunnel, StateSince: &since, StartTime: &since},
				{Name: "n4", State: v1alpha1.NodeSoak, StateSince: &since, StartTime: &since},
			}}
	})
	e := newEnv(t, nr)
	d := planner.Decision{Phase: v1alpha1.PhaseProgressing, Reason: "wave 2", Order: []planner.PlannedNode{{Name: "n1"}, {Name: "n2"}, {Name: "n3"}, {Name: "n4"}}}
	settled := map[string]v1alpha1.NodeState{"n2": v1alpha1.NodeDone, "n3": v1alpha1.NodeDone}
	if err := e.ex.apply.writePhase(e.ctx, e.stored("r"), &fleet.Pass{Decision: d}, settled, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ex.status.Mutate(e.ctx, "r", func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	got := e.stored("r").Status
	if c := got.Counts; c.Total != 4 || c.Done != 2 || c.InProgress != 2 || got.Omitted != nil {
		t.Errorf("counts %+v, omitted %+v: want 4 nodes, 2 done, 2 in flight, none omitted", c, got.Omitted)
	}
	for _, ns := range got.Nodes {
		if (ns.Name == "n2" || ns.Name == "n3") && (ns.State != v1alpha1.NodeDone || strings.Contains(ns.Reason, "lost")) {
			t.Errorf("node %s: %+v, want Done from its record, nothing said lost", ns.Name, ns)
		}
	}
}
