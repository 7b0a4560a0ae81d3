package fleet

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// TestHoldsNodes: only a decision that starts, resumes or rolls back a node
// needs the finalizer first.
func TestHoldsNodes(t *testing.T) {
	for _, tc := range []struct {
		kinds []planner.ActionKind
		want  bool
	}{
		{nil, false},
		{[]planner.ActionKind{planner.ActMarkDone, planner.ActPrepull, planner.ActPrepullDone, planner.ActRetry, planner.ActForget, planner.ActMarkRolledBack}, false},
		{[]planner.ActionKind{planner.ActMarkDone, planner.ActStart}, true},
		{[]planner.ActionKind{planner.ActResume}, true},
		{[]planner.ActionKind{planner.ActRollback}, true},
	} {
		var ps Pass
		for _, k := range tc.kinds {
			ps.Decision.Actions = append(ps.Decision.Actions, planner.Action{Kind: k, Node: "n"})
		}
		if got := ps.HoldsNodes(); got != tc.want {
			t.Errorf("HoldsNodes(%v) = %v, want %v", tc.kinds, got, tc.want)
		}
	}
}

// TestKuredLockDecisions: Kured's lock is held for the nodes in flight and
// those the plan starts (none when the rollout only honours it), and a lock
// refused drops only the starts of nodes not yet in flight.
func TestKuredLockDecisions(t *testing.T) {
	snap := model.Snapshot{Nodes: []model.NodeView{{Name: "a", State: v1alpha1.NodeSoak}, {Name: "b", State: v1alpha1.NodePending}, {Name: "c", State: v1alpha1.NodeDone}}}
	d := planner.Decision{Reason: "wave 1", Actions: []planner.Action{{Kind: planner.ActResume, Node: "a"}, {Kind: planner.ActStart, Node: "b"}, {Kind: planner.ActMarkDone, Node: "c"}}}
	for _, tc := range []struct {
		take bool
		want []string
	}{{true, []string{"a", "b"}}, {false, nil}} {
		if got := kuredNodes(model.Policy{TakeKuredLock: tc.take}, planner.NewRoster(snap, model.Policy{}), d); !slices.Equal(got, tc.want) {
			t.Errorf("take %v: Kured's lock for %v, want %v", tc.take, got, tc.want)
		}
	}
	ps := Pass{Snap: snap, Decision: d}
	ps.KuredLockRefused("Kured's lock cannot be taken: busy")
	var kinds []string
	for _, a := range ps.Decision.Actions {
		kinds = append(kinds, string(a.Kind)+" "+a.Node)
	}
	if len(ps.Decision.Actions) != 2 || ps.Decision.Held["b"] == "" || ps.Decision.Held["a"] != "" || !strings.HasSuffix(ps.Decision.Reason, "no node starts: Kured's lock cannot be taken: busy") {
		t.Errorf("actions %v, held %v, reason %q: want b's start dropped and held, a resumed, c marked", kinds, ps.Decision.Held, ps.Decision.Reason)
	}
	if d.Held != nil {
		t.Error("the refusal changed the plan it was given")
	}
}
