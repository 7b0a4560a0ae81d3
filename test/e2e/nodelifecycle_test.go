package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// The lifecycle gaps of #18: what happens to a node nodewise holds when
// the world changes under it. Each test holds the canary cordoned in Drain
// (a PodDisruptionBudget at zero, pdbBlocked wait), changes one thing, and
// checks the node is handed back as a person would expect.

// stuckInDrain starts a rollout whose canary (node 0) a PDB holds in Drain,
// and returns the canary's name once it is cordoned there.
func (e *env) stuckInDrain(name string, mut func(*v1alpha1.NodeRolloutSpec)) string {
	e.t.Helper()
	canary, _ := e.stuckInDrainBy("solo", name, mut)
	return canary
}

// stuckInDrainBy is stuckInDrain under an orchestrator of that identity
// in this process, also returning what stops it.
func (e *env) stuckInDrainBy(identity, name string, mut func(*v1alpha1.NodeRolloutSpec)) (string, func()) {
	e.t.Helper()
	canary := e.c.Nodes[0].Name
	e.blockDrain(canary)
	stop, _ := e.runInProcess(identity)
	e.upgrade("1.28.1")
	e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{canary}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, PDBBlocked: v1alpha1.PDBWait, Timeout: &v1alpha1.Duration{Duration: 30 * time.Minute}}
		if mut != nil {
			mut(s)
		}
	}))
	e.t.Cleanup(func() {
		if !e.t.Failed() {
			return
		}
		if nr, err := e.rollouts.Get(context.Background(), name, metav1.GetOptions{}); err == nil {
			for _, ns := range nr.Status.Nodes {
				e.t.Logf("status of %s: %s %q", ns.Name, ns.State, ns.Reason)
			}
		}
	})
	if n := e.waitStep(name, v1alpha1.NodeDrain); n != canary {
		e.t.Fatalf("node %s in Drain, want the canary %s", n, canary)
	}
	if !e.unschedulable()[canary] {
		e.t.Fatalf("%s not cordoned while draining", canary)
	}
	return canary, stop
}

// waitSchedulable waits until node is schedulable again.
func (e *env) waitSchedulable(node string, within time.Duration) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return !e.unschedulable()[node], nil
	})
	if err != nil {
		e.t.Fatalf("%s still cordoned %s later", node, within)
	}
}

// TestDeletingARolloutReleasesItsNodes: `kubectl delete noderollout`
// mid-drain is an abort first. The finalizer holds the object until the
// cordoned canary is handed back; then the object goes.
func TestDeletingARolloutReleasesItsNodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 1)
	canary := e.stuckInDrain("doomed", nil)
	ctx := context.Background()
	nr, err := e.rollouts.Get(ctx, "doomed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(nr.Finalizers, model.FinalizerReleaseNodes) {
		t.Fatalf("a rollout holding a cordoned node has finalizers %v, want %s", nr.Finalizers, model.FinalizerReleaseNodes)
	}
	if err := e.rollouts.Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.rollouts.Get(ctx, "doomed", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the deleted rollout is still there a minute later")
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left after the rollout was deleted: %v", uns)
	}
	e.noCordonBookkeeping(canary)
}

// TestNodeRelabelledOutIsHandedBack: a node relabelled out of the
// selector while nodewise holds it is made safe (uncordoned, its drain
// stopped, nothing swapped); the rest of the rollout goes on.
func TestNodeRelabelledOutIsHandedBack(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	for _, n := range e.c.Nodes {
		e.labelNode(n.Name, `{"pool":"a"}`)
	}
	canary := e.stuckInDrain("pool-a", func(s *v1alpha1.NodeRolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	})
	e.labelNode(canary, `{"pool":"b"}`)
	e.waitSchedulable(canary, 30*time.Second)
	nr := e.waitPhase("pool-a", 2*time.Minute, v1alpha1.PhaseCompleted)
	for _, ns := range nr.Status.Nodes {
		if ns.Name == canary {
			t.Errorf("the relabelled node is still in status: %+v", ns)
		}
	}
	if nr.Status.Counts.Done != nodes-1 {
		t.Errorf("counts %+v, want the %d nodes still selected Done", nr.Status.Counts, nodes-1)
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left: %v", uns)
	}
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), canary, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := n.Annotations[model.AnnotationStep]; st != string(v1alpha1.NodePending) {
		t.Errorf("the relabelled node's record says %q, want Pending (made safe before its swap)", st)
	}
}

// TestNodeDeletedInFlightLeavesTheRollout: a node deleted while nodewise
// holds it ends Skipped with the reason, not in flight forever, and the
// rollout completes on the others.
func TestNodeDeletedInFlightLeavesTheRollout(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	canary := e.stuckInDrain("losing", nil)
	if err := e.c.Client.CoreV1().Nodes().Delete(context.Background(), canary, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	nr := e.waitPhase("losing", 2*time.Minute, v1alpha1.PhaseCompleted)
	var entry *v1alpha1.NodeStatus
	for i := range nr.Status.Nodes {
		if nr.Status.Nodes[i].Name == canary {
			entry = &nr.Status.Nodes[i]
		}
	}
	want := fmt.Sprintf("node deleted during its %s step", v1alpha1.NodeDrain)
	if entry == nil || entry.State != v1alpha1.NodeSkipped || entry.Reason != want {
		t.Errorf("the deleted node's status entry %+v, want Skipped %q", entry, want)
	}
	if c := nr.Status.Counts; c.InProgress != 0 || c.Done != nodes-1 || c.Skipped != 1 {
		t.Errorf("counts %+v, want %d Done, 1 Skipped, none in progress", c, nodes-1)
	}
}

// TestKeepCordonedIsHonoured: a person who wants a node nodewise holds
// to stay cordoned (a `kubectl cordon` then changes nothing the API shows)
// annotates it nodewise.io/keep-cordoned; the uncordon leaves it cordoned
// and drops nodewise's own bookkeeping.
func TestKeepCordonedIsHonoured(t *testing.T) {
	t.Parallel()
	// Three nodes: with the kept one cordoned, the others' drains have
	// somewhere to move istiod (held by its PDB) to.
	e := newEnv(t, 3, 1)
	// The kept node stays out of the fleet: with maxUnavailable 1 it would
	// hold every other start (spec.coordination.countOthers, on by default).
	countOthers := false
	canary := e.stuckInDrain("kept", func(s *v1alpha1.NodeRolloutSpec) { s.Coordination.CountOthers = &countOthers })
	ctx := context.Background()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"disk errors, ticket 4711"}}}`, model.AnnotationKeepCordoned)
	if _, err := e.c.Client.CoreV1().Nodes().Patch(ctx, canary, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.unblockDrain()
	e.waitPhase("kept", 2*time.Minute, v1alpha1.PhaseCompleted)
	if uns := e.unschedulable(); len(uns) != 1 || !uns[canary] {
		t.Errorf("unschedulable %v, want only the kept %s", uns, canary)
	}
	n := e.noCordonBookkeeping(canary)
	if n.Annotations[model.AnnotationKeepCordoned] == "" {
		t.Errorf("nodewise removed the person's %s", model.AnnotationKeepCordoned)
	}
}

func (e *env) labelNode(node, labels string) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":%s}}`, labels)
	if _, err := e.c.Client.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// noCordonBookkeeping checks nodewise's cordon annotations are gone from
// node, and returns the node.
func (e *env) noCordonBookkeeping(node string) *corev1.Node {
	e.t.Helper()
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, k := range []string{model.AnnotationCordonedBy, model.AnnotationPriorUnschedulable} {
		if v, ok := n.Annotations[k]; ok {
			e.t.Errorf("%s still has %s=%q", node, k, v)
		}
	}
	return n
}
