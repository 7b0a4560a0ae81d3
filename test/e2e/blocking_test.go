package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestBlockingPodHoldsItsNode: a pod matching spec.blocking.podSelector runs
// on one node (a backup, say). Every other node is swapped; that node waits,
// its status reason naming the pod, and is not touched. Once the pod is
// gone it is swapped and the rollout completes.
func TestBlockingPodHoldsItsNode(t *testing.T) {
	t.Parallel()
	const nodes = 5
	e := newEnv(t, nodes, 1)
	busy := e.c.Nodes[2].Name
	w := e.watch()
	ctx := context.Background()
	blocker := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "backup", Labels: map[string]string{"maintenance": "blocks"}},
		Spec:       corev1.PodSpec{NodeName: busy, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if _, err := e.c.Client.CoreV1().Pods("default").Create(ctx, blocker, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.upgrade("1.28.1")
	e.runInProcess("solo")
	e.apply(rollout("blocked", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Blocking.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"maintenance": "blocks"}}
	}))
	nr := e.waitRollout("blocked", 4*time.Minute, "every other node Done", func(nr *v1alpha1.NodeRollout) bool {
		return nr.Status.Counts.Done == nodes-1
	})
	if got := nodeStatus(nr, busy); got.State != v1alpha1.NodePending || !strings.Contains(got.Reason, "waiting: blocked by pod default/backup") {
		t.Errorf("the node running the blocking pod is %s (%q), want Pending, naming the pod", got.State, got.Reason)
	}
	time.Sleep(2 * time.Second) // a broken orchestrator would start it now
	w.mu.Lock()
	swapped := w.deletes[busy+"/ztunnel"] + w.deletes[busy+"/istio-cni-node"]
	w.mu.Unlock()
	if swapped != 0 || e.unschedulable()[busy] {
		t.Fatalf("nodewise touched %s while the blocking pod ran on it", busy)
	}
	zero := int64(0)
	if err := e.c.Client.CoreV1().Pods("default").Delete(ctx, "backup", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	nr = e.waitPhase("blocked", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)
}
