package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestTargetOutsideIstioNamespaceStaysPending: the orchestrator may delete
// and create pods only in its --istio-namespace (its RBAC Roles are there),
// so a NodeRollout with a target elsewhere stays Pending with a reason that
// names the target and the namespace, and no node is touched; the rollout
// of the same fleet with its targets in place then completes.
func TestTargetOutsideIstioNamespaceStaysPending(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	e.upgrade("1.28.1")
	e.apply(rollout("elsewhere", func(s *v1alpha1.NodeRolloutSpec) {
		s.Targets = []v1alpha1.TargetRef{{Namespace: ns, Name: "istio-cni-node"}, {Namespace: "mesh", Name: "ztunnel"}}
	}))
	stop, _ := e.runInProcess("solo")
	defer stop()
	var got *v1alpha1.NodeRollout
	want := "spec.targets[1] mesh/ztunnel: not in the Istio namespace istio-system"
	for range 50 {
		got = e.waitPhase("elsewhere", 30*time.Second, v1alpha1.PhasePending)
		if strings.Contains(conditionMessage(got, "Valid"), want) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if msg := conditionMessage(got, "Valid"); !strings.Contains(msg, want) {
		t.Fatalf("Valid condition %q, want it to say %q", msg, want)
	}
	if got.Status.Counts.InProgress+got.Status.Counts.Done != 0 {
		t.Errorf("the refused rollout acted: counts %+v", got.Status.Counts)
	}
	nl, err := e.c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nl.Items {
		if n.Spec.Unschedulable {
			t.Errorf("node %s cordoned by a refused rollout", n.Name)
		}
	}
	if err := e.rollouts.Delete(context.Background(), "elsewhere", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.apply(rollout("here", nil))
	if done := e.waitPhase("here", 3*time.Minute, v1alpha1.PhaseCompleted); done.Status.Counts.Done != nodes {
		t.Errorf("rollout with its targets in the Istio namespace: counts %+v", done.Status.Counts)
	}
}
