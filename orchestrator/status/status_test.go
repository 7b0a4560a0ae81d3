package status

import (
	"slices"
	"testing"

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
