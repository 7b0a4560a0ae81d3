package orchestrator

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestTrimCachedDropsManagedFields: cached copies carry no managedFields,
// and a tombstone passes through.
func TestTrimCachedDropsManagedFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	out, err := trimCached(pod)
	if err != nil || len(out.(*corev1.Pod).ManagedFields) != 0 || out.(*corev1.Pod).Name != "p" {
		t.Errorf("trimCached(pod) = %+v, %v", out, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if out, err := trimCached(tomb); err != nil || out != any(tomb) {
		t.Errorf("trimCached(tombstone) = %+v, %v", out, err)
	}
}

// TestTrimCachedSlimsPodsNodewiseNeverActsOn: an app pod keeps only what the
// readiness gate and drain auto read (and they judge it the same); a
// DaemonSet's pod and a bridge stay whole; a node drops its images and a
// ControllerRevision its data.
func TestTrimCachedSlimsPodsNodewiseNeverActsOn(t *testing.T) {
	yes := true
	start := metav1.NewTime(surgeT0)
	app := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels:          map[string]string{"app": "web"},
			Annotations:     map[string]string{corev1.MirrorPodAnnotationKey: "m", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-abc", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app", Image: "web:1"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: start, Message: "long"}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "web:1"}}},
	}
	out, err := trimCached(app.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := out.(*corev1.Pod)
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "u1", ResourceVersion: "7",
			Labels: app.Labels, Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "m"}, OwnerReferences: app.OwnerReferences},
		Spec:   corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: start}}},
	}
	if !equality.Semantic.DeepEqual(slim, want) {
		t.Errorf("slimmed app pod:\n%+v\nwant\n%+v", slim, want)
	}
	if r1, r2 := fmt.Sprint(podReadyCondition(app)), fmt.Sprint(podReadyCondition(slim)); r1 != r2 || podStart(app) != podStart(slim) || len(movablePods([]*corev1.Pod{slim})) != 0 {
		t.Errorf("the slim pod reads differently: ready %s vs %s, start %v vs %v", r1, r2, podStart(app), podStart(slim))
	}

	for _, p := range []*corev1.Pod{surgePod("ztunnel-x", "new", 0), surgePod("b", "new", 0, bridged), surgePod("h", "new", 0, bridged, handedOver)} {
		p.Spec.Containers = []corev1.Container{{Name: "istio-proxy"}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "istio-proxy", RestartCount: 2}}
		out, _ := trimCached(p.DeepCopy())
		if !equality.Semantic.DeepEqual(out, p) {
			t.Errorf("pod %s was trimmed; the swaps read it whole", p.Name)
		}
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{AnnotationStep: "SwapZtunnel"}},
		Spec:   corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"a"}}}, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	out, _ = trimCached(node)
	if n := out.(*corev1.Node); n.Status.Images != nil || !nodeReady(n) || !n.Spec.Unschedulable || n.Annotations[AnnotationStep] != "SwapZtunnel" {
		t.Errorf("trimmed node: %+v", n)
	}
	rev := surgeRev.DeepCopy()
	rev.Data.Raw = []byte(`{"spec":{}}`)
	out, _ = trimCached(rev)
	if r := out.(*appsv1.ControllerRevision); r.Data.Raw != nil || r.Revision != 2 || r.Labels[LabelControllerRevisionHash] != "new" {
		t.Errorf("trimmed revision: %+v", r)
	}
}
