package nodecond

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// apiNodes reads the nodes from the fake API: the newest copy there is.
type apiNodes struct{ kube *fake.Clientset }

func (a apiNodes) Newest(node string) *corev1.Node {
	n, err := a.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return n
}

func (apiNodes) Remember(string, string, *corev1.Node) {}

// TestSweep: every node's conditions are brought to its record, and only
// a difference is written: an in-flight record or a claim without the
// condition gets it, a stale one of nodewise's (no record behind it, or a
// rollout that is gone) goes, another writer's and a finished node are
// not written.
func TestSweep(t *testing.T) {
	node := func(name, rolloutUID string, step v1alpha1.NodeState, cs ...corev1.NodeCondition) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}, Status: corev1.NodeStatus{
			Conditions: append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}, cs...)}}
		if rolloutUID != "" {
			n.Annotations[model.AnnotationRollout], n.Annotations[model.AnnotationRolloutUID], n.Annotations[model.AnnotationStep] = "r", rolloutUID, string(step)
		}
		return n
	}
	ours := corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: locks.ReasonInFlight, Message: InFlight("r").Message}
	theirs := corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: "FirmwareUpdate"}
	nodes := []*corev1.Node{
		node("in-flight", "u", v1alpha1.NodeSwapZtunnel),
		node("in-flight-already", "u", v1alpha1.NodeSoak, ours),
		node("stale", "", "", ours),
		node("claimed", "", ""),
		node("theirs", "", "", theirs),
		node("done", "u", v1alpha1.NodeDone),
		node("gone-rollout", "old", v1alpha1.NodeDrain, ours),
	}
	kube := fake.NewClientset()
	for _, n := range nodes {
		if _, err := kube.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kube.ClearActions()
	w := &Writer{Kube: kube, Nodes: apiNodes{kube}, Live: func(name string, uid types.UID) bool { return uid == "u" },
		Now: time.Now, Log: zap.NewNop(), WG: &sync.WaitGroup{}}
	w.Sweep(context.Background(), nodes, map[string]string{"claimed": "r"})

	var patched []string
	for _, a := range kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetSubresource() == "status" {
			patched = append(patched, p.GetName())
		}
	}
	slices.Sort(patched)
	if want := []string{"claimed", "gone-rollout", "in-flight", "stale"}; !slices.Equal(patched, want) {
		t.Errorf("status patched on %v, want %v", patched, want)
	}
	for name, want := range map[string]string{"in-flight": locks.ReasonInFlight, "in-flight-already": locks.ReasonInFlight, "claimed": locks.ReasonInFlight,
		"stale": "", "gone-rollout": "", "theirs": "FirmwareUpdate", "done": ""} {
		n := apiNodes{kube}.Newest(name)
		got, ready := "", false
		for _, c := range n.Status.Conditions {
			switch c.Type {
			case corev1.NodeMaintenanceInProgress:
				got = c.Reason
			case corev1.NodeReady:
				ready = c.Reason == "KubeletReady"
			}
		}
		if got != want || !ready {
			t.Errorf("%s: MaintenanceInProgress reason %q, conditions %+v; want %q beside the kubelet's Ready", name, got, n.Status.Conditions, want)
		}
	}
}
