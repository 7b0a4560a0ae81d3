package status

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// TestPreviewMergesOnlyTheScope: Preview over the positions of the nodes
// changed or held (b newly held, c held before, d's record settled) leaves
// prev as it was, names exactly the entries Record changes, with Record's
// counts; an entry outside the scope is not read (e's stale reason stays),
// and entries out of plan order are merged whole (ok false).
func TestPreviewMergesOnlyTheScope(t *testing.T) {
	now := metav1.Now()
	order := []planner.PlannedNode{{Name: "a", Wave: 1}, {Name: "b", Wave: 2}, {Name: "c", Wave: 2}, {Name: "d", Wave: 3}, {Name: "e", Wave: 3}}
	prev := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing, ObservedGeneration: 1, Nodes: []v1alpha1.NodeStatus{
		{Name: "a", Wave: 1, State: v1alpha1.NodeDone},
		{Name: "b", Wave: 2, State: v1alpha1.NodePending},
		{Name: "c", Wave: 2, State: v1alpha1.NodePending, Reason: "waiting: Kured's lock"},
		{Name: "d", Wave: 3, State: v1alpha1.NodeSoak},
		{Name: "e", Wave: 3, State: v1alpha1.NodePending, Reason: "waiting: outside the scope"},
	}}
	prev.Counts = planner.Counts(prev.Nodes)
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	d := planner.Decision{Phase: v1alpha1.PhaseProgressing, Reason: "wave 2", Order: order, Held: map[string]string{"b": "NotReady: swapped when it is Ready again"}}
	settled := map[string]v1alpha1.NodeState{"d": v1alpha1.NodeDone}
	only := []int{1, 2, 3}

	was := RecordCopy(prev)
	next, edits, ok := Preview(prev, nr, d, nil, settled, now, only)
	if !ok {
		t.Fatal("Preview of entries in plan order: ok false")
	}
	if !Same(prev, was) {
		t.Errorf("Preview changed prev: %+v", prev.Nodes)
	}
	want := RecordCopy(prev)
	Record(&want, nr, d, nil, settled, now)
	want.Nodes[4] = prev.Nodes[4] // outside the scope: Record clears its reason, Preview does not read it
	got := RecordCopy(next)
	for _, e := range edits {
		got.Nodes[e.I] = e.Entry
	}
	if len(edits) != 3 || !Same(got, want) {
		t.Errorf("Preview: %d edits, entries %+v counts %+v; want 3, as Record: %+v counts %+v", len(edits), got.Nodes, got.Counts, want.Nodes, want.Counts)
	}
	if c := next.Counts; c.Done != 2 || c.InProgress != 0 || c.Pending != 3 {
		t.Errorf("counts %+v: want 2 done, 3 pending", c)
	}

	RecordOnly(&was, nr, d, nil, settled, now, only, nil) // the writer's mutation: the same, in place
	if !Same(was, got) {
		t.Errorf("RecordOnly in place: %+v, want %+v", was.Nodes, got.Nodes)
	}

	prev.Nodes[0], prev.Nodes[1] = prev.Nodes[1], prev.Nodes[0]
	if _, _, ok := Preview(prev, nr, d, nil, settled, now, []int{0}); ok {
		t.Error("Preview of entries out of plan order: ok true, want every entry merged")
	}
}
