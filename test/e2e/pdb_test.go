package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// blockDrain pins a one-replica Deployment to node with a PDB that allows no disruption.
func (e *env) blockDrain(node string) {
	e.t.Helper()
	ctx := context.Background()
	nsName := "pdb"
	labels := e.pinApp(nsName, "guarded", node)
	minAvail := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: nsName},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvail, Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets(nsName).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.c.Client.PolicyV1().PodDisruptionBudgets(nsName).Get(ctx, "guarded", metav1.GetOptions{})
		return err == nil && p.Status.CurrentHealthy == 1 && p.Status.DisruptionsAllowed == 0, nil
	})
	if err != nil {
		e.t.Fatalf("PDB never became blocking: %v", err)
	}
}

// pinApp creates (namespace and) a one-replica Deployment pinned to node,
// and returns its pod labels.
func (e *env) pinApp(nsName, name, node string) map[string]string {
	e.t.Helper()
	ctx := context.Background()
	_, _ = e.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{})
	labels := map[string]string{"app": name}
	one := int32(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsName},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/hostname": node},
					Containers:   []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
				},
			},
		},
	}
	if _, err := e.c.Client.AppsV1().Deployments(nsName).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	return labels
}

func (e *env) unblockDrain() {
	e.t.Helper()
	if err := e.c.Client.PolicyV1().PodDisruptionBudgets("pdb").Delete(context.Background(), "guarded", metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestPDBBlockedPolicies: a PDB that blocks the drain leads to wait,
// skip-node or halt, as configured, with the reason shown.
func TestPDBBlockedPolicies(t *testing.T) {
	t.Parallel()
	const nodes = 4
	e := newEnv(t, nodes, 2)
	guarded := e.c.Nodes[0].Name
	e.blockDrain(guarded)
	e.runInProcess("solo")
	spec := func(policy v1alpha1.PDBBlockedPolicy) func(*v1alpha1.NodeRolloutSpec) {
		return func(s *v1alpha1.NodeRolloutSpec) {
			s.CanaryNodes = []string{guarded}
			s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
			s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, PDBBlocked: policy, Timeout: &v1alpha1.Duration{Duration: 3 * time.Second}}
		}
	}
	nodeStatus := func(nr *v1alpha1.NodeRollout, name string) v1alpha1.NodeStatus {
		for _, n := range nr.Status.Nodes {
			if n.Name == name {
				return n
			}
		}
		return v1alpha1.NodeStatus{}
	}

	t.Run("halt", func(t *testing.T) {
		e.t = t
		e.upgrade("1.28.1")
		e.apply(rollout("pdb-halt", spec(v1alpha1.PDBHalt)))
		nr := e.waitPhase("pdb-halt", 2*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
		if nr.Status.Phase != v1alpha1.PhaseHalted || !strings.Contains(nr.Status.HaltReason, "PodDisruptionBudget") {
			t.Fatalf("phase %s reason %q, want Halted naming the PodDisruptionBudget", nr.Status.Phase, nr.Status.HaltReason)
		}
		if uns := e.unschedulable(); uns[guarded] {
			t.Errorf("node %s left cordoned after a PDB halt", guarded)
		}
		if n := nodeStatus(nr, guarded); n.State != v1alpha1.NodeFailed {
			t.Errorf("guarded node state %s, want Failed", n.State)
		}
		e.patch("pdb-halt", `{"spec":{"abort":true}}`)
		// Abort ends a halted rollout: Aborted, it no longer holds its nodes
		// against the next rollout (see orchestrator/overlap.go).
		e.waitPhase("pdb-halt", time.Minute, v1alpha1.PhaseAborted)
	})

	t.Run("skip-node", func(t *testing.T) {
		e.t = t
		e.upgrade("1.28.2")
		e.apply(rollout("pdb-skip", spec(v1alpha1.PDBSkipNode)))
		nr := e.waitPhase("pdb-skip", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
		if nr.Status.Phase != v1alpha1.PhaseCompleted {
			t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
		}
		n := nodeStatus(nr, guarded)
		if n.State != v1alpha1.NodeSkipped || !strings.Contains(n.Reason, "PodDisruptionBudget") {
			t.Errorf("guarded node %s %q, want Skipped with the PDB reason", n.State, n.Reason)
		}
		// Other nodes may be skipped too: the sample workloads carry their own
		// PDBs, which can block a drain while their pods are being rescheduled.
		if c := nr.Status.Counts; c.Skipped < 1 || c.Done+c.Skipped != nodes {
			t.Errorf("counts %+v, want every node Done or Skipped, at least one Skipped", c)
		}
		for _, n := range nr.Status.Nodes {
			if n.State == v1alpha1.NodeSkipped {
				t.Logf("skipped %s: %s", n.Name, n.Reason)
				if !strings.Contains(n.Reason, "PodDisruptionBudget") {
					t.Errorf("node %s skipped without a PDB reason: %q", n.Name, n.Reason)
				}
			}
		}
		if uns := e.unschedulable(); len(uns) != 0 {
			t.Errorf("cordons left: %v", uns)
		}
	})

	t.Run("wait", func(t *testing.T) {
		e.t = t
		e.upgrade("1.28.3")
		e.apply(rollout("pdb-wait", spec(v1alpha1.PDBWait)))
		err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			nr, err := e.rollouts.Get(ctx, "pdb-wait", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			n := nodeStatus(nr, guarded)
			return n.State == v1alpha1.NodeDrain && strings.Contains(n.Reason, "waiting") && strings.Contains(n.Reason, "PodDisruptionBudget"), nil
		})
		if err != nil {
			t.Fatalf("guarded node never showed it waits on the PDB: %v", err)
		}
		nr, _ := e.rollouts.Get(context.Background(), "pdb-wait", metav1.GetOptions{})
		if nr.Status.Phase != v1alpha1.PhaseProgressing || nr.Status.Counts.Done != 0 {
			t.Errorf("while waiting: phase %s counts %+v; want Progressing with nothing done (canary first)", nr.Status.Phase, nr.Status.Counts)
		}
		e.unblockDrain()
		nr = e.waitPhase("pdb-wait", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
		if nr.Status.Phase != v1alpha1.PhaseCompleted || nodeStatus(nr, guarded).State != v1alpha1.NodeDone {
			t.Fatalf("after the PDB went: phase %s, guarded %s", nr.Status.Phase, nodeStatus(nr, guarded).State)
		}
		if uns := e.unschedulable(); len(uns) != 0 {
			t.Errorf("cordons left: %v", uns)
		}
	})
}

func (e *env) patch(name, patch string) {
	e.t.Helper()
	if _, err := e.rollouts.Patch(context.Background(), name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}
