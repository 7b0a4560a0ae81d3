package planner

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func TestOverlappingRolloutsWaitForTheOneUnderWay(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	node := func(name, pool string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": pool}}}
	}
	nodes := []*corev1.Node{node("n1", "a"), node("n2", "a"), node("n3", "b")}
	nr := func(name string, age int, pool string, phase v1alpha1.RolloutPhase) *v1alpha1.NodeRollout {
		r := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))}}
		if pool != "" {
			r.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": pool}}
		}
		r.Status.Phase, r.Status.ObservedGeneration = phase, 1
		return r
	}
	cases := []struct {
		name   string
		me     *v1alpha1.NodeRollout
		others []*v1alpha1.NodeRollout
		want   string // "" = free to go
	}{
		{"alone", nr("b", 1, "", ""), nil, ""},
		{"disjoint selectors", nr("b", 1, "b", ""), []*v1alpha1.NodeRollout{nr("a", 0, "a", v1alpha1.PhaseProgressing)}, ""},
		{"an older one under way", nr("b", 1, "", ""), []*v1alpha1.NodeRollout{nr("a", 0, "a", v1alpha1.PhaseProgressing)}, "waiting for NodeRollout a (Progressing), which also selects node(s) n1, n2"},
		{"two new ones: the older goes", nr("b", 1, "a", ""), []*v1alpha1.NodeRollout{nr("a", 0, "", "")}, "NodeRollout a (Pending)"},
		{"the older of two new ones goes", nr("a", 0, "", ""), []*v1alpha1.NodeRollout{nr("b", 1, "a", "")}, ""},
		{"a finished one does not hold", nr("b", 1, "", ""), []*v1alpha1.NodeRollout{nr("a", 0, "", v1alpha1.PhaseCompleted)}, ""},
		{"a halted one holds", nr("b", 1, "", ""), []*v1alpha1.NodeRollout{nr("a", 0, "b", v1alpha1.PhaseHalted)}, "NodeRollout a (Halted), which also selects node(s) n3"},
		{"an older one woken by rollback waits for the newer under way", nr("a", 0, "", v1alpha1.PhaseCompleted), []*v1alpha1.NodeRollout{nr("b", 1, "", v1alpha1.PhaseProgressing)}, "NodeRollout b (Progressing)"},
		{"the newer under way is not held by the older woken one", nr("b", 1, "", v1alpha1.PhaseProgressing), []*v1alpha1.NodeRollout{nr("a", 0, "", v1alpha1.PhaseCompleted)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.me.Status.Phase == v1alpha1.PhaseCompleted {
				tc.me.Generation = 2 // woken by a spec change
			}
			for _, o := range tc.others {
				if strings.Contains(tc.name, "woken") && o.Status.Phase == v1alpha1.PhaseCompleted {
					o.Generation = 2
				}
			}
			p, err := model.NewPolicy(tc.me.Spec)
			if err != nil {
				t.Fatal(err)
			}
			err = Overlapping(tc.me, p, append(tc.others, tc.me), nodes)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("held: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want mention of %q", err, tc.want)
			}
		})
	}
}
