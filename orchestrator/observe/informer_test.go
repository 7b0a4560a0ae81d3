package observe

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestTrimCachedDropsManagedFields: cached copies carry no managedFields,
// and a tombstone passes through.
func TestTrimCachedDropsManagedFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	out, err := TrimCached(pod)
	if err != nil || len(out.(*corev1.Pod).ManagedFields) != 0 || out.(*corev1.Pod).Name != "p" {
		t.Errorf("trimCached(pod) = %+v, %v", out, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if out, err := TrimCached(tomb); err != nil || out != any(tomb) {
		t.Errorf("trimCached(tombstone) = %+v, %v", out, err)
	}
}

// TestTrimCachedSlimsPodsNodewiseNeverActsOn: an app pod keeps only what the
// readiness gate and drain auto read (and they judge it the same); a
// DaemonSet's pod and a bridge stay whole; a node drops its images and a
// ControllerRevision its data.
func TestTrimCachedSlimsPodsNodewiseNeverActsOn(t *testing.T) {
	yes := true
	start := metav1.NewTime(fixture.SurgeT0)
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
	out, err := TrimCached(app.DeepCopy())
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
	if r1, r2 := fmt.Sprint(model.PodReadyCondition(app)), fmt.Sprint(model.PodReadyCondition(slim)); r1 != r2 || nodestep.PodStart(app) != nodestep.PodStart(slim) || len(nodestep.MovablePods([]*corev1.Pod{slim})) != 0 {
		t.Errorf("the slim pod reads differently: ready %s vs %s, start %v vs %v", r1, r2, nodestep.PodStart(app), nodestep.PodStart(slim))
	}

	for _, p := range []*corev1.Pod{fixture.SurgePod("ztunnel-x", "new", 0), fixture.SurgePod("b", "new", 0, fixture.Bridged), fixture.SurgePod("h", "new", 0, fixture.Bridged, fixture.HandedOver)} {
		p.Spec.Containers = []corev1.Container{{Name: "istio-proxy"}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "istio-proxy", RestartCount: 2}}
		out, _ := TrimCached(p.DeepCopy())
		if !equality.Semantic.DeepEqual(out, p) {
			t.Errorf("pod %s was trimmed; the swaps read it whole", p.Name)
		}
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Annotations: map[string]string{model.AnnotationStep: "SwapZtunnel"}},
		Spec:   corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"a"}}}, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	out, _ = TrimCached(node)
	if n := out.(*corev1.Node); n.Status.Images != nil || !model.NodeReady(n) || !n.Spec.Unschedulable || n.Annotations[model.AnnotationStep] != "SwapZtunnel" {
		t.Errorf("trimmed node: %+v", n)
	}
	rev := fixture.SurgeRev.DeepCopy()
	rev.Data.Raw = []byte(`{"spec":{}}`)
	out, _ = TrimCached(rev)
	if r := out.(*appsv1.ControllerRevision); r.Data.Raw != nil || r.Revision != 2 || r.Labels[model.LabelControllerRevisionHash] != "new" {
		t.Errorf("trimmed revision: %+v", r)
	}
}

// TestPodCacheOnNodeReadsTheNodeIndex: OnNode returns the pods bound to the
// node, in every namespace, from the node index (unbound pods and other
// nodes' left out, a pod moved by an update re-indexed), and the same from a
// cache without the index.
func TestPodCacheOnNodeReadsTheNodeIndex(t *testing.T) {
	pod := func(ns, name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node}}
	}
	indexed := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, podNodeIndex: podNodeIndexFunc})
	plain := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, idx := range []cache.Indexer{indexed, plain} {
		for _, p := range []*corev1.Pod{pod("istio-system", "ztunnel-a", "n1"), pod("apps", "web-1", "n1"), pod("apps", "web-2", "n2"), pod("apps", "pending", "")} {
			if err := idx.Add(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := idx.Update(pod("apps", "web-2", "n1")); err != nil { // bound elsewhere since
			t.Fatal(err)
		}
	}
	for name, c := range map[string]PodCache{"indexed": NewPodCache(indexed), "without the index": {PodLister: corelisters.NewPodLister(plain)}} {
		got, err := c.OnNode("n1")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var names []string
		for _, p := range got {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		sort.Strings(names)
		if want := "apps/web-1,apps/web-2,istio-system/ztunnel-a"; strings.Join(names, ",") != want {
			t.Errorf("%s: OnNode(n1) = %v; want %s", name, names, want)
		}
		if got, _ := c.OnNode("n2"); len(got) != 0 {
			t.Errorf("%s: OnNode(n2) = %d pods; want none (moved to n1)", name, len(got))
		}
	}
}

// TestTrimCachedKeepsWhatASwapMayActOn: a pod without the hash label stays
// whole when a DaemonSet controls it or it is a pre-pull pod (its container
// states are the pull's outcome); a pod of another controller is slimmed.
func TestTrimCachedKeepsWhatASwapMayActOn(t *testing.T) {
	yes := true
	pod := func(name string, lbl map[string]string, ownerKind string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: lbl},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "x:1"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "c", RestartCount: 1}}}}
		if ownerKind != "" {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: ownerKind, Name: "o", Controller: &yes}}
		}
		return p
	}
	for _, tc := range []struct {
		pod   *corev1.Pod
		whole bool
	}{
		{pod("ds-pod", nil, "DaemonSet"), true},
		{pod("prepull", map[string]string{model.LabelPrepull: "r"}, "Pod"), true},
		{pod("rs-pod", map[string]string{"app": "web"}, "ReplicaSet"), false},
		{pod("bare", nil, ""), false},
	} {
		out, err := TrimCached(tc.pod.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		if got := equality.Semantic.DeepEqual(out, tc.pod); got != tc.whole {
			t.Errorf("%s kept whole: %v, want %v", tc.pod.Name, got, tc.whole)
		}
		if p := out.(*corev1.Pod); p.Spec.NodeName != "n1" || p.Name != tc.pod.Name {
			t.Errorf("%s lost its identity or node: %+v", tc.pod.Name, p)
		}
	}
}

// TestAddPodNodeIndex: the index added to a pod informer is the one OnNode
// reads; OnNode on an indexer without it is an error, not an empty node.
func TestAddPodNodeIndex(t *testing.T) {
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, cache.Indexers{})
	if err := AddPodNodeIndex(inf); err != nil {
		t.Fatal(err)
	}
	if err := inf.GetIndexer().Add(fixture.SurgePod("ztunnel-a", "new", 0)); err != nil {
		t.Fatal(err)
	}
	if got, err := NewPodCache(inf.GetIndexer()).OnNode("n1"); err != nil || len(got) != 1 || got[0].Name != "ztunnel-a" {
		t.Errorf("OnNode(n1) = %v, %v; want ztunnel-a", got, err)
	}

	unindexed := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if _, err := NewPodCache(unindexed).OnNode("n1"); err == nil {
		t.Error("OnNode read an indexer without the node index and reported no error")
	}
}

// TestRolloutInformerListsThroughTheTypedClient: the NodeRollout informer
// lists through the client it is given and caches trimmed copies (no
// managedFields). The fake refuses watches, so the informer syncs from the
// list alone.
func TestRolloutInformerListsThroughTheTypedClient(t *testing.T) {
	api := fixture.NewRollouts(&v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "r1",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}})
	inf := NewRolloutInformer(api)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the rollout informer never synced from the list")
	}
	obj, ok, err := inf.GetIndexer().GetByKey("r1")
	if err != nil || !ok {
		t.Fatalf("r1 not cached: %v", err)
	}
	nr := obj.(*v1alpha1.NodeRollout)
	if nr.ResourceVersion == "" || len(nr.ManagedFields) != 0 {
		t.Errorf("cached r1: resourceVersion %q, %d managedFields; want the stored one, none", nr.ResourceVersion, len(nr.ManagedFields))
	}
}
