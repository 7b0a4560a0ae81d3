package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestSurgeRolloutThroughAnOutage: a full rollout with ztunnel swapped surge
// (the default) by the orchestrator process, watched by an independent
// sampler every 0.5 s that never sees a node without a Ready ztunnel. Mid-way
// the process is killed -9 and stays down 60 s while a node joins: nothing
// swaps by itself, the new node gets its ztunnel from the DaemonSet. A
// successor finishes; nothing of nodewise's is left and no cordon remains.
func TestSurgeRolloutThroughAnOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, 2)
	e.drainModel(3 * time.Second)
	w := e.watchZtunnels(t)
	e.upgrade("1.28.1")
	// New ztunnels take 3 s to start, so a node stays in SwapZtunnel long
	// enough to be seen there and killed mid-surge (the bridge starting).
	e.slowStart(3 * time.Second)
	hash := e.newestHash(cluster.ZtunnelName)
	first := e.startProcess("first", "127.0.0.1:0")
	e.apply(rollout("outage", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: 2 * time.Second}
	}))
	// Kill it once a node is done and another is being swapped.
	e.waitFor(func(ctx context.Context) bool {
		nr, err := e.rollouts.Get(ctx, "outage", metav1.GetOptions{})
		return err == nil && nr.Status.Counts.Done >= 1
	}, "a first node done")
	surging := e.waitStep("outage", v1alpha1.NodeSwapZtunnel)
	time.Sleep(200 * time.Millisecond) // mid-surge
	first.kill()
	t.Logf("killed -9 the orchestrator mid-surge; down for 60 s")
	// The surge swap has no record of its own: the successor resumes from
	// SwapCNI's.
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), surging, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations[model.AnnotationStep]; got != string(v1alpha1.NodeSwapCNI) {
		t.Fatalf("node %s mid-surge: record %q, want SwapCNI's", surging, got)
	}

	before := e.ztunnelUIDs("")
	spec := e.addNodeServedByDaemonSet(hash)
	time.Sleep(60 * time.Second)
	after := e.ztunnelUIDs("")
	for uid, node := range after {
		if _, ok := before[uid]; !ok && node != spec.Name {
			p := e.ztunnelPodOrNil(node)
			// The one pod the DaemonSet may create: on the node whose old
			// pod was deleted just before the kill, once it drained.
			if p == nil || metav1.GetControllerOf(p).Kind != "DaemonSet" {
				t.Errorf("while nodewise was down, pod %s appeared on %s", uid, node)
			}
		}
	}
	for uid, node := range before {
		if _, ok := after[uid]; !ok {
			t.Logf("while down: pod %s on %s went (the swap in flight at the kill)", uid, node)
		}
	}

	e.startProcess("second", "127.0.0.1:0")
	nr := e.waitPhase("outage", 4*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	e.waitOldGone(hash)
	w.check(t)
	e.requireNoSurgeLeftovers()
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left behind: %v", uns)
	}
	if n := w.createdByDaemonSet(); n < 1 || n > 2 {
		t.Errorf("the DaemonSet created %d pods; want the added node's, plus at most the one whose old pod drained during the outage", n)
	}
}

// TestSurgeAbortMidSwap: `nodewise abort` while a node's ztunnel bridge is
// still starting: the started swap finishes (the bridge is handed over, the
// old pod goes), nothing else starts, and nothing of nodewise's is left.
func TestSurgeAbortMidSwap(t *testing.T) {
	testkit.Binary(t, "nodewise") // built before the swap it aborts, not while it runs
	e := newEnv(t, 3, 1)
	e.upgrade("1.28.1")
	// The bridge starts slowly enough that the abort, a CLI process on a
	// loaded machine, lands while it starts (with 3 s it could land after
	// the node finished and the next began: CI, Done 2).
	e.slowStart(15 * time.Second)
	hash := e.newestHash(cluster.ZtunnelName)
	e.runInProcess("solo")
	e.apply(rollout("abort-surge", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	node := e.waitStep("abort-surge", v1alpha1.NodeSwapZtunnel)
	e.waitFor(func(ctx context.Context) bool { return len(e.surgeLeftovers()) > 0 }, "the bridge created on "+node)
	if out, err := e.cli("abort", "abort-surge"); err != nil {
		t.Fatalf("abort: %v %s", err, out)
	}
	nr := e.waitPhase("abort-surge", 2*time.Minute, v1alpha1.PhaseAborted)
	if p := e.ztunnelPod(node); p.Labels["controller-revision-hash"] != hash || metav1.GetControllerOf(p).Kind != "DaemonSet" {
		t.Errorf("%s after the abort: pod %s on %s; want the swap finished (the DaemonSet's pod on %s)", node, p.Name, p.Labels["controller-revision-hash"], hash)
	}
	if nr.Status.Counts.Done != 1 || nr.Status.Counts.Pending != 2 {
		t.Errorf("after the abort: counts %+v; want the one started node done, the others pending", nr.Status.Counts)
	}
	e.requireNoSurgeLeftovers()
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left after abort: %v", uns)
	}
}
