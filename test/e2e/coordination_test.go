package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
)

// kuredDaemonSet creates a Kured-style DaemonSet in kube-system (scheduled
// nowhere) whose lock annotation holds node, as Kured's --ds-name does
// (node "": no annotation, as before Kured first took its lock).
func (e *env) kuredDaemonSet(node string) {
	e.t.Helper()
	labels := map[string]string{"name": "kured"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kured"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kured-test": "nowhere"},
					Containers:   []corev1.Container{{Name: "kured", Image: "ghcr.io/kubereboot/kured:1.17.1"}},
				},
			},
		},
	}
	if node != "" {
		ds.Annotations = map[string]string{
			locks.AnnotationKured: fmt.Sprintf(`{"nodeID":%q,"metadata":{"unschedulable":false},"created":%q,"TTL":0}`, node, time.Now().UTC().Format(time.RFC3339)),
		}
	}
	if _, err := e.c.Client.AppsV1().DaemonSets("kube-system").Create(context.Background(), ds, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) uncordon(node string) {
	e.t.Helper()
	if _, err := e.c.Client.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", []byte(`{"spec":{"unschedulable":false}}`), metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitRollout polls the rollout until cond holds.
func (e *env) waitRollout(name string, timeout time.Duration, what string, cond func(*v1alpha1.NodeRollout) bool) *v1alpha1.NodeRollout {
	e.t.Helper()
	var last *v1alpha1.NodeRollout
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = nr
		return cond(nr), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %s: %v (last status %+v)", what, err, last.Status)
	}
	return last
}

// TestKuredLockHoldsANode: Kured holds its lock on a node it has cordoned
// for a reboot. nodewise never swaps that node while the lock is held, counts
// it against maxUnavailable (the watcher counts every cordoned node, from the
// Nodes themselves, so the budget is never exceeded), says why in status, and
// swaps the node once Kured releases it.
func TestKuredLockHoldsANode(t *testing.T) {
	t.Parallel()
	const nodes = 6
	e := newEnv(t, nodes, 1)
	rebooting := e.c.Nodes[2].Name
	w := e.watch()
	e.kuredDaemonSet(rebooting)
	e.cordon(rebooting) // Kured cordons the node it holds
	e.upgrade("1.28.1")
	e.runInProcess("solo")
	e.apply(rollout("beside-kured", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Coordination.KuredLock = v1alpha1.KuredLockHonour // take: no node would start (kuredlock_test.go)
	}))
	nr := e.waitRollout("beside-kured", 4*time.Minute, "every other node Done", func(nr *v1alpha1.NodeRollout) bool {
		return nr.Status.Counts.Done == nodes-1
	})
	for _, n := range nr.Status.Nodes {
		if n.Name == rebooting && (n.State != v1alpha1.NodePending || !strings.Contains(n.Reason, "waiting: held by Kured's lock")) {
			t.Errorf("the node Kured holds is %s (%q), want Pending, waiting for Kured's lock", n.State, n.Reason)
		}
	}
	time.Sleep(2 * time.Second) // a broken orchestrator would start it now
	w.mu.Lock()
	swapped := w.deletes[rebooting+"/"+"ztunnel"] + w.deletes[rebooting+"/"+"istio-cni-node"]
	w.mu.Unlock()
	if swapped != 0 {
		t.Fatalf("nodewise swapped %s while Kured held it", rebooting)
	}
	// Kured is done: it uncordons and releases its lock.
	released := time.Now()
	e.uncordon(rebooting)
	if _, err := e.c.Client.AppsV1().DaemonSets("kube-system").Patch(context.Background(), "kured", "application/merge-patch+json",
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, locks.AnnotationKured)), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nr = e.waitPhase("beside-kured", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)
	time.Sleep(500 * time.Millisecond) // let the watcher drain its channel
	if got, worst := w.max(); got > 2 {
		t.Errorf("watcher saw %d nodes unavailable at once (> maxUnavailable 2, Kured's included): %s", got, worst)
	}
	w.mu.Lock()
	first := w.firstSwap[rebooting]
	w.mu.Unlock()
	if first.Before(released) {
		t.Errorf("%s swapped at %s, before Kured released it at %s", rebooting, first, released)
	}
}

// TestSecondToolCordonsMidRollout: while nodes are in flight another tool
// cordons a node nodewise has not reached. From then on nodewise counts it
// against maxUnavailable: the watcher, counting every cordoned or not-Ready
// node from the Nodes and pods themselves, never sees more than the budget.
// The cordon stays with its owner.
func TestSecondToolCordonsMidRollout(t *testing.T) {
	t.Parallel()
	const nodes = 8
	e := newEnv(t, nodes, 1)
	names := make([]string, 0, nodes)
	for _, n := range e.c.Nodes {
		names = append(names, n.Name)
	}
	sort.Strings(names)
	other := names[len(names)-1] // the last in plan order (one zone: by name)
	w := e.watch()
	e.upgrade("1.28.1")
	e.runInProcess("solo")
	e.apply(rollout("second-tool", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Soak = &v1alpha1.Duration{Duration: 2 * time.Second}
	}))
	e.waitStep("second-tool", v1alpha1.NodeSoak) // the first node is back in service, soaking
	e.cordon(other)
	cordonedAt := time.Now()
	nr := e.waitPhase("second-tool", 5*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)
	time.Sleep(500 * time.Millisecond)
	got, worst := w.max()
	t.Logf("max unavailable seen %d (%s); %s cordoned by the other tool at %s", got, worst, other, cordonedAt.Format("15:04:05.000"))
	for _, n := range nr.Status.Nodes {
		t.Logf("  %s started %s finished %s", n.Name, n.StartTime.Format("15:04:05.000"), n.FinishTime.Format("15:04:05.000"))
	}
	if got > 2 {
		t.Errorf("watcher saw %d nodes unavailable at once (> maxUnavailable 2 with the other tool's cordon): %s", got, worst)
	}
	if got < 2 {
		t.Errorf("watcher saw at most %d unavailable: the other tool's cordon and a swap never overlapped, the test proves nothing", got)
	}
	if uns := e.unschedulable(); len(uns) != 1 || !uns[other] {
		t.Errorf("unschedulable %v, want only the other tool's %s (its cordon is its own)", uns, other)
	}
}
