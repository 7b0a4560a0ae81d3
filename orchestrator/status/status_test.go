package status

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// TestPruneUnplanned: Pending entries of nodes the plan no longer has go;
// any that started stay as history.
func TestPruneUnplanned(t *testing.T) {
	nodes := []v1alpha1.NodeStatus{{Name: "a", State: v1alpha1.NodePending}, {Name: "b", State: v1alpha1.NodeDone}, {Name: "c"}, {Name: "d", State: v1alpha1.NodePending}}
	got := pruneUnplanned(nodes, []planner.PlannedNode{{Name: "d"}})
	var names []string
	for _, n := range got {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"b", "d"}) {
		t.Errorf("kept %v, want [b d]", names)
	}
}

// TestRecordSetsGitOpsConditions: each pass sets Ready, Reconciling and
// Stalled from the decision's phase beside Valid, Halted and Complete, with
// the halt reason (or else the decision's reason) as the message, and
// status.observedGeneration to the spec's generation.
func TestRecordSetsGitOpsConditions(t *testing.T) {
	nr := &v1alpha1.NodeRollout{}
	nr.Generation = 3
	for _, tc := range []struct {
		d                                 v1alpha1.RolloutPhase
		reason, halt                      string
		wantTrue, wantReason, wantMessage string
	}{
		{v1alpha1.PhaseProgressing, "wave 2", "", v1alpha1.ConditionReconciling, "Progressing", "wave 2"},
		{v1alpha1.PhasePaused, "paused by the user", "", v1alpha1.ConditionReconciling, "Paused", "paused by the user"},
		{v1alpha1.PhaseWaitingForWindow, "window opens at 02:00", "", v1alpha1.ConditionReconciling, "WaitingForWindow", "window opens at 02:00"},
		{v1alpha1.PhasePending, "DaemonSet istio-system/ztunnel not found", "", v1alpha1.ConditionReconciling, "Pending", "DaemonSet istio-system/ztunnel not found"},
		{v1alpha1.PhaseHalted, "ignored: the halt reason is the message", "Halted at node-1: resets 0/s → 3/s", v1alpha1.ConditionStalled, "Halted", "Halted at node-1: resets 0/s → 3/s"},
		{v1alpha1.PhaseFailed, "spec.nodeSelector x=y matches no node", "", v1alpha1.ConditionStalled, "Failed", "spec.nodeSelector x=y matches no node"},
		{v1alpha1.PhaseAborted, "aborted by the user", "", v1alpha1.ConditionStalled, "Aborted", "aborted by the user"},
		{v1alpha1.PhaseCompleted, "6 node(s) on the newest revision", "", v1alpha1.ConditionReady, "Completed", "6 node(s) on the newest revision"},
		{v1alpha1.PhaseRolledBack, "every upgraded node is back", "", v1alpha1.ConditionReady, "RolledBack", "every upgraded node is back"},
	} {
		s := v1alpha1.NodeRolloutStatus{HaltReason: tc.halt}
		if tc.halt != "" {
			s.Phase = v1alpha1.PhaseHalted
		}
		Record(&s, nr, planner.Decision{Phase: tc.d, Reason: tc.reason}, nil, nil, metav1.Now())
		if s.ObservedGeneration != 3 {
			t.Errorf("%s: observedGeneration %d, want 3", tc.d, s.ObservedGeneration)
		}
		for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
			c := meta.FindStatusCondition(s.Conditions, typ)
			switch {
			case c == nil:
				t.Errorf("%s: no %s condition in %+v", tc.d, typ, s.Conditions)
			case (c.Status == metav1.ConditionTrue) != (typ == tc.wantTrue):
				t.Errorf("%s: %s is %s, want only %s True", tc.d, typ, c.Status, tc.wantTrue)
			case c.Reason != tc.wantReason || c.ObservedGeneration != 3:
				t.Errorf("%s: %s reason %q generation %d, want %q, 3", tc.d, typ, c.Reason, c.ObservedGeneration, tc.wantReason)
			case typ == tc.wantTrue && c.Message != tc.wantMessage:
				t.Errorf("%s: %s message %q, want %q", tc.d, typ, c.Message, tc.wantMessage)
			}
		}
		for _, typ := range []string{"Valid", "Halted", "Complete"} {
			if meta.FindStatusCondition(s.Conditions, typ) == nil {
				t.Errorf("%s: the %s condition is gone", tc.d, typ)
			}
		}
	}
}

// Record merges the plan into entries in plan order or not, catches up
// every settled record and says why every held node waits, wherever they
// stand: a settled node not planned, an entry out of order and a new node
// change none of that.
func TestRecordMergesEntriesInAndOutOfPlanOrder(t *testing.T) {
	now := metav1.Now()
	order := []planner.PlannedNode{{Name: "a", Wave: 1}, {Name: "b", Wave: 2}, {Name: "c", Wave: 2}, {Name: "d", Wave: 3}, {Name: "e", Wave: 3}}
	for _, tc := range []struct {
		name    string
		entries []string
	}{
		{"in plan order", []string{"a", "b", "c", "d", "e"}},
		{"out of order, one new", []string{"b", "a", "d", "c"}},
	} {
		s := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing}
		for _, n := range tc.entries {
			s.Nodes = append(s.Nodes, v1alpha1.NodeStatus{Name: n, State: v1alpha1.NodePending, Reason: "waiting: old"})
		}
		d := planner.Decision{Phase: v1alpha1.PhaseProgressing, Order: order, Held: map[string]string{"c": "Kured's lock"}}
		settled := map[string]v1alpha1.NodeState{"gone": v1alpha1.NodeDone, "d": v1alpha1.NodeDone, "e": v1alpha1.NodeSkipped}
		Record(&s, &v1alpha1.NodeRollout{}, d, nil, settled, now)
		got := map[string]v1alpha1.NodeStatus{}
		for _, ns := range s.Nodes {
			got[ns.Name] = ns
		}
		if len(s.Nodes) != 5 || got["e"].Wave != 3 || got["b"].Wave != 2 {
			t.Errorf("%s: entries %+v, want a to e with their waves", tc.name, s.Nodes)
		}
		if got["d"].State != v1alpha1.NodeDone || got["e"].State != v1alpha1.NodeSkipped {
			t.Errorf("%s: d %s, e %s: want the settled records caught up", tc.name, got["d"].State, got["e"].State)
		}
		if got["c"].Reason != "waiting: Kured's lock" || got["a"].Reason != "" || got["b"].Reason != "" {
			t.Errorf("%s: reasons a %q, b %q, c %q: want only c held", tc.name, got["a"].Reason, got["b"].Reason, got["c"].Reason)
		}
	}
}
