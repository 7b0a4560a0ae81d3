package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/orchestrator/apis/v1alpha1"
	"github.com/nodewise/nodewise/test/cluster"
)

// setImageTag points every container of a DaemonSet at a tag (OnDelete: no pod changes).
func (e *env) setImageTag(ds, tag string) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := e.c.Client.AppsV1().DaemonSets(ns).Get(context.Background(), ds, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range cur.Spec.Template.Spec.Containers {
			img := cur.Spec.Template.Spec.Containers[i].Image
			if j := strings.LastIndex(img, ":"); j >= 0 {
				img = img[:j]
			}
			cur.Spec.Template.Spec.Containers[i].Image = img + ":" + tag
		}
		_, err = e.c.Client.AppsV1().DaemonSets(ns).Update(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestNeverReadyZtunnelHalts: a ztunnel that never gets Ready halts the
// rollout within the swap timeout, with the reason, and no further node starts.
func TestNeverReadyZtunnelHalts(t *testing.T) {
	const nodes = 6
	e := newEnv(t, nodes, 2)
	w := e.watch()
	e.upgrade("1.28.1")
	e.setImageTag(cluster.ZtunnelName, "1.28.1"+cluster.TagNeverReady)
	e.runInProcess("solo")
	swapTimeout := 5 * time.Second
	e.apply(rollout("neverready", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = 4, 4
		s.SwapTimeout = &metav1.Duration{Duration: swapTimeout}
	}))
	nr := e.waitPhase("neverready", 2*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s, want Halted", nr.Status.Phase)
	}
	if r := nr.Status.HaltReason; !strings.Contains(r, "ztunnel") || !strings.Contains(r, "swap timeout") {
		t.Errorf("halt reason %q does not name ztunnel and the swap timeout", r)
	}
	time.Sleep(3 * time.Second) // give a broken orchestrator the chance to start another node
	nr, err := e.rollouts.Get(context.Background(), "neverready")
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
}
