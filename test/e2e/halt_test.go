package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
)

// setImageTag points every container of a DaemonSet at a tag (OnDelete: no pod changes).
func (e *env) setImageTag(ds, tag string) {
	e.t.Helper()
	err := cluster.SetImageTag(context.Background(), e.c.Client, ds, tag)
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestNeverReadyZtunnelHalts: a ztunnel that never gets Ready halts the
// rollout within the swap timeout, with the reason, and no further node starts.
// Then, on the same cluster: the user fixes the template and runs `nodewise
// resume`, and the rollout continues from the halted node and completes
// without swapping any node twice (resumeAfterFix); and a template newer than
// istiod is refused at preflight before any pod is touched (refuseSkew).
func TestNeverReadyZtunnelHalts(t *testing.T) {
	const nodes = 6
	e := newEnv(t, nodes, 2)
	w := e.watch()
	e.upgrade("1.28.1")
	e.setImageTag(cluster.ZtunnelName, "1.28.1"+cluster.TagNeverReady)
	e.runInProcess("solo")
	swapTimeout := 5 * time.Second
	e.apply(rollout("neverready", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(4), intstr.FromInt32(4)
		s.SwapTimeout = &v1alpha1.Duration{Duration: swapTimeout}
	}))
	nr := e.waitPhase("neverready", 2*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s, want Halted", nr.Status.Phase)
	}
	if r := nr.Status.HaltReason; !strings.Contains(r, "ztunnel") || !strings.Contains(r, "swap timeout") {
		t.Errorf("halt reason %q does not name ztunnel and the swap timeout", r)
	}
	time.Sleep(3 * time.Second) // give a broken orchestrator the chance to start another node
	nr, err := e.rollouts.Get(context.Background(), "neverready", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started := 0
	for _, n := range nr.Status.Nodes {
		if n.State == v1alpha1.NodeFailed {
			var swapStart time.Time
			if n.StartTime != nil {
				swapStart = n.StartTime.Time
			}
			if took := n.StateSince.Sub(swapStart); took > swapTimeout+3*time.Second {
				t.Errorf("node %s halted %s after it started, swap timeout %s", n.Name, took, swapTimeout)
			}
		}
		if n.State != v1alpha1.NodePending {
			started++
		}
	}
	if started != 1 {
		t.Errorf("%d nodes started, want only the first (halt stops the rollout): %+v", started, nr.Status.Nodes)
	}
	w.mu.Lock()
	swapped := len(w.firstSwap)
	w.mu.Unlock()
	if swapped != 1 {
		t.Errorf("watcher saw pods deleted on %d nodes, want 1", swapped)
	}
	events, err := e.c.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onRollout, onNode := false, false
	for _, ev := range events.Items {
		if ev.Reason == "Halted" && ev.InvolvedObject.Kind == "NodeRollout" {
			onRollout = true
		}
		if ev.Reason == "NodewiseHalted" && ev.InvolvedObject.Kind == "Node" {
			onNode = true
		}
	}
	if !onRollout || !onNode {
		t.Errorf("halt events: on NodeRollout %v, on Node %v; want both", onRollout, onNode)
	}
	halted := ""
	for _, n := range nr.Status.Nodes {
		if n.State == v1alpha1.NodeFailed {
			halted = n.Name
		}
	}
	// Surge: the halted node still runs its old ztunnel, Ready, and no
	// bridge is left.
	e.waitFor(func(ctx context.Context) bool { return len(e.surgeLeftovers()) == 0 }, "the never-Ready bridge gone")
	if p := e.ztunnelPodOrNil(halted); p == nil || !podutils.IsPodReady(p) || !strings.HasSuffix(p.Spec.Containers[0].Image, ":1.27.3") {
		t.Errorf("halted node %s: ztunnel %v; want the old 1.27.3 pod still serving (Ready)", halted, p)
	}
	resumeAfterFix(t, e, w, nodes, halted)
	refuseSkew(t, e, w)
}

// resumeAfterFix: the user restores a good ztunnel template and runs
// `nodewise resume`; the halted node is retried first (its never-Ready pod is
// replaced), then the rest follow; every other node's old pods are deleted
// exactly once, maxUnavailable holds, and no cordon is left.
func resumeAfterFix(t *testing.T, e *env, w *watcher, nodes int, halted string) {
	t.Helper()
	if halted == "" {
		t.Fatal("no node is Failed after the halt")
	}
	e.setImageTag(cluster.ZtunnelName, "1.28.1")
	if out, err := e.cli("resume", "neverready"); err != nil {
		t.Fatalf("nodewise resume: %v %s", err, out)
	}
	e.waitPhase("neverready", time.Minute, v1alpha1.PhaseProgressing, v1alpha1.PhaseCompleted) // the halt is cleared
	nr := e.waitPhase("neverready", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Done != int32(nodes) || nr.Status.HaltReason != "" {
		t.Fatalf("after resume: phase %s, counts %+v, halt reason %q", nr.Status.Phase, nr.Status.Counts, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)
	time.Sleep(500 * time.Millisecond) // let the watcher drain its channel
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range e.c.Nodes {
		for _, ds := range []string{cluster.CNIName, cluster.ZtunnelName} {
			// ztunnel is swapped surge: at the halt its never-Ready bridge
			// went and the 1.27.3 pod kept serving, so every node's old pods
			// are deleted once, the halted node's included.
			want := 1
			if got := w.deletes[n.Name+"/"+ds]; got != want {
				t.Errorf("%s/%s: %d old pods deleted, want %d", n.Name, ds, got, want)
			}
		}
	}
	retried := w.lastDelete[halted+"/"+cluster.ZtunnelName]
	for n, first := range w.firstSwap {
		if n != halted && first.Before(retried) {
			t.Errorf("node %s swapped at %s, before the halted node %s was retried at %s: the rollout did not continue from the halted node",
				n, first.Format(time.RFC3339Nano), halted, retried.Format(time.RFC3339Nano))
		}
	}
	if w.maxUnavail > 4 {
		t.Errorf("watcher saw %d nodes unavailable at once (> maxUnavailable 4): %s", w.maxUnavail, w.worst)
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left after the resumed rollout: %v", uns)
	}
}

// refuseSkew: a ztunnel template newer than its istiod (1.29 under istiod
// 1.28, revision 1-28) halts the next rollout at its first node's preflight,
// with the reason, before any pod is deleted or any cordon is left.
func refuseSkew(t *testing.T, e *env, w *watcher) {
	t.Helper()
	w.mu.Lock()
	before := len(w.deletes)
	deleted := 0
	for _, n := range w.deletes {
		deleted += n
	}
	w.mu.Unlock()
	e.setImageTag(cluster.ZtunnelName, "1.29.0")
	e.apply(rollout("skewed", nil))
	nr := e.waitPhase("skewed", time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	for _, want := range []string{"preflight", "ztunnel 1.29 is newer than its control plane 1.28"} {
		if !strings.Contains(nr.Status.HaltReason, want) {
			t.Errorf("halt reason %q lacks %q", nr.Status.HaltReason, want)
		}
	}
	if nr.Status.Phase != v1alpha1.PhaseHalted || nr.Status.Counts.Failed != 1 {
		t.Errorf("phase %s counts %+v, want Halted with its first node Failed", nr.Status.Phase, nr.Status.Counts)
	}
	time.Sleep(500 * time.Millisecond)
	w.mu.Lock()
	after := 0
	for _, n := range w.deletes {
		after += n
	}
	grew := len(w.deletes) != before || after != deleted
	w.mu.Unlock()
	if grew {
		t.Errorf("pods deleted under a refused skew: %d before, %d after", deleted, after)
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left after the preflight refusal: %v", uns)
	}
}
