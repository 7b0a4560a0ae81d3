package status

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Same agrees with equality.Semantic on a status and its record
// copy with each field of one node entry changed in turn, and on the
// copy left alone; a field added to NodeStatus fails here until
// sameEntry compares it.
func TestSameStatusIsSemanticEquality(t *testing.T) {
	if n := reflect.TypeFor[v1alpha1.NodeStatus]().NumField(); n != 14 {
		t.Fatalf("NodeStatus has %d fields, sameEntry compares 14: compare the new one", n)
	}
	at := metav1.NewTime(time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC))
	later := metav1.NewTime(at.Add(time.Second))
	base := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing, Nodes: []v1alpha1.NodeStatus{
		{Name: "a", Zone: "z", Wave: 1, State: v1alpha1.NodeDone, StateSince: &at, StartTime: &at, FinishTime: &at, Reason: "r", Verdict: "v",
			Detail: []string{"d"}, Judgement: &v1alpha1.NodeJudgement{}, Baseline: "b", Controls: "c"},
		{Name: "b", State: v1alpha1.NodePending},
	}}
	elsewhere := metav1.NewTime(at.In(time.FixedZone("east", 3600)))
	changes := map[string]func(*v1alpha1.NodeStatus){
		"none":          func(*v1alpha1.NodeStatus) {},
		"name":          func(n *v1alpha1.NodeStatus) { n.Name = "x" },
		"zone":          func(n *v1alpha1.NodeStatus) { n.Zone = "y" },
		"canary":        func(n *v1alpha1.NodeStatus) { n.Canary = true },
		"wave":          func(n *v1alpha1.NodeStatus) { n.Wave = 2 },
		"state":         func(n *v1alpha1.NodeStatus) { n.State = v1alpha1.NodeFailed },
		"stateSince":    func(n *v1alpha1.NodeStatus) { n.StateSince = &later },
		"same instant":  func(n *v1alpha1.NodeStatus) { n.StateSince = &elsewhere },
		"startTime":     func(n *v1alpha1.NodeStatus) { n.StartTime = nil },
		"finishTime":    func(n *v1alpha1.NodeStatus) { n.FinishTime = &later },
		"reason":        func(n *v1alpha1.NodeStatus) { n.Reason = "s" },
		"verdict":       func(n *v1alpha1.NodeStatus) { n.Verdict = "w" },
		"detail":        func(n *v1alpha1.NodeStatus) { n.Detail = []string{"e"} },
		"detail empty":  func(n *v1alpha1.NodeStatus) { n.Detail = []string{} },
		"judgement":     func(n *v1alpha1.NodeStatus) { n.Judgement = &v1alpha1.NodeJudgement{Judgements: 2} },
		"judgement new": func(n *v1alpha1.NodeStatus) { n.Judgement = &v1alpha1.NodeJudgement{} },
		"baseline":      func(n *v1alpha1.NodeStatus) { n.Baseline = "x" },
		"controls":      func(n *v1alpha1.NodeStatus) { n.Controls = "x" },
	}
	differ := 0
	for name, change := range changes {
		next := RecordCopy(base)
		change(&next.Nodes[0])
		want := equality.Semantic.DeepEqual(base, next)
		if got := Same(base, next); got != want {
			t.Errorf("%s: Same %v, equality.Semantic %v", name, got, want)
		}
		if !want {
			differ++
		}
	}
	if differ != len(changes)-3 { // none, the same instant, an equal new judgement
		t.Fatalf("%d of %d changes differ: the table proves little", differ, len(changes))
	}
	next := RecordCopy(base)
	next.Phase = v1alpha1.PhaseHalted
	if Same(base, next) {
		t.Error("a new phase is not the same status")
	}
}
