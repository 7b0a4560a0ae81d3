package status

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// RecordCopy is a copy of s that Record may change: its node
// entries copied one level only (Record sets their fields, never what they
// point to), the rest deep. An entry Record leaves alone shares its
// pointers and slices with s's, so Same compares it at once.
func RecordCopy(s v1alpha1.NodeRolloutStatus) v1alpha1.NodeRolloutStatus {
	nodes := s.Nodes
	s.Nodes = nil
	c := *s.DeepCopy()
	c.Nodes = slices.Clone(nodes)
	return c
}

// Same is equality.Semantic.DeepEqual(a, b), the node entries
// compared field by field rather than by reflection.
func Same(a, b v1alpha1.NodeRolloutStatus) bool {
	if len(a.Nodes) != len(b.Nodes) || (a.Nodes == nil) != (b.Nodes == nil) {
		return false
	}
	for i := range a.Nodes {
		if i == 0 && &a.Nodes[0] == &b.Nodes[0] {
			break // the same entries (status.Preview shares them)
		}
		if !sameEntry(&a.Nodes[i], &b.Nodes[i]) {
			return false
		}
	}
	a.Nodes, b.Nodes = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}

// sameEntry compares every field of NodeStatus (TestSameStatusIsSemanticEquality
// fails when one is added and not here).
func sameEntry(x, y *v1alpha1.NodeStatus) bool {
	return x.Name == y.Name && x.Zone == y.Zone && x.Canary == y.Canary && x.Wave == y.Wave && x.State == y.State &&
		sameTime(x.StateSince, y.StateSince) && sameTime(x.StartTime, y.StartTime) && sameTime(x.FinishTime, y.FinishTime) &&
		x.Reason == y.Reason && x.Verdict == y.Verdict && (x.Detail == nil) == (y.Detail == nil) && slices.Equal(x.Detail, y.Detail) &&
		(x.Judgement == y.Judgement || equality.Semantic.DeepEqual(x.Judgement, y.Judgement)) && x.Baseline == y.Baseline && x.Controls == y.Controls
}

// sameTime compares times as equality.Semantic does (the instant, in UTC).
func sameTime(a, b *metav1.Time) bool {
	return a == b || (a != nil && b != nil && a.UTC() == b.UTC())
}
