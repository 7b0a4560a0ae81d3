package orchestrator

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestPassSkipsANodeNotReadyPastTheLimit: a pass over a rollout with
// spec.notReadyTimeout records the node NotReady longer than that as
// Skipped, with the reason in status and a NodeSkipped Event, and the
// rollout completes saying so.
func TestPassSkipsANodeNotReadyPastTheLimit(t *testing.T) {
	objs := cluster(fixture.NewHash, "n1", "n2")
	dead := testNode("n3")
	dead.Status.Conditions[0].Status = corev1.ConditionUnknown
	dead.Status.Conditions[0].LastTransitionTime = metav1.NewTime(t0.Add(-31 * time.Minute))
	objs = append(objs, dead, targetPod(cniDS, "n3", fixture.OldHash), targetPod(ztunnelDS, "n3", fixture.OldHash))
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) {
		nr.Spec.NotReadyTimeout = &v1alpha1.Duration{Duration: 30 * time.Minute}
	})
	e := newEnv(t, append(objs, nr)...)
	s, err := e.ex.observer.Snapshot(e.stored("r"), model.MustPolicy(nr.Spec))
	if err != nil {
		t.Fatal(err)
	}
	if n3 := nodeView(t, s, "n3"); n3.Ready || !n3.NotReadySince.Equal(t0.Add(-31*time.Minute)) {
		t.Fatalf("n3 ready %v since %s, want NotReady since its condition's last transition", n3.Ready, n3.NotReadySince)
	}
	for range 2 { // the skip, then the pass that reads it back
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		if err := e.store.Update(e.stored("r")); err != nil {
			t.Fatal(err)
		}
	}
	ns := e.nodeStatus("r", "n3")
	if ns.State != v1alpha1.NodeSkipped || !strings.Contains(ns.Reason, "longer than notReadyTimeout 30m0s") {
		t.Fatalf("n3 %s %q, want Skipped with the reason", ns.State, ns.Reason)
	}
	if !hasEvent(e.emitted(), "Warning NodeSkipped node n3 skipped: NotReady since") {
		t.Error("no NodeSkipped Event for n3")
	}
	if st := e.stored("r").Status; st.Phase != v1alpha1.PhaseCompleted || st.Counts.Skipped != 1 {
		t.Fatalf("phase %s counts %+v, want Completed with one skipped", st.Phase, st.Counts)
	}
	for _, a := range e.kube.Actions() {
		if a.GetVerb() == "delete" {
			t.Errorf("a skipped node's pods were touched: %v", a)
		}
	}
}

// TestSnapshotDrained: with spec.coordination.opportunistic, a cordoned
// node is drained when nothing but DaemonSet, mirror and finished pods (and
// nodewise's own pre-pull pod) runs on it.
func TestSnapshotDrained(t *testing.T) {
	objs := cluster(fixture.OldHash, "empty", "busy", "open")
	nodeIn(objs, "empty").Spec.Unschedulable = true
	nodeIn(objs, "busy").Spec.Unschedulable = true
	pod := func(name, node string, mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app"}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if mut != nil {
			mut(p)
		}
		return p
	}
	yes := true
	objs = append(objs,
		pod("done-job", "empty", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("static", "empty", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }),
		pod("logs", "empty", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "fluent", UID: "f", Controller: &yes}}
		}),
		pod("pull", "empty", func(p *corev1.Pod) { p.Labels = map[string]string{model.LabelPrepull: "r"} }),
		pod("web", "busy", nil),
		pod("web2", "open", nil),
	)
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Coordination.Opportunistic = true })
	e := newEnv(t, append(objs, nr)...)
	s, err := e.ex.observer.Snapshot(e.stored("r"), model.MustPolicy(nr.Spec))
	if err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]bool{"empty": true, "busy": false, "open": false} {
		if got := nodeView(t, s, node).Drained; got != want {
			t.Errorf("%s drained %v, want %v", node, got, want)
		}
	}
	// Off: not looked at.
	s, err = e.ex.observer.Snapshot(e.stored("r"), model.MustPolicy(v1alpha1.NodeRolloutSpec{}))
	if err != nil {
		t.Fatal(err)
	}
	if nodeView(t, s, "empty").Drained {
		t.Error("drained read with opportunistic off")
	}
}
