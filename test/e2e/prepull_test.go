package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestPrepullFailureHaltsBeforeAnyCordon: the new ztunnel image cannot be
// pulled (the simulated kubelet reports ErrImagePull for a tag ending in
// -nopull). With spec.prepull the rollout pulls the first node's new images
// in a pre-pull pod, sees the failure and halts, naming the image and the
// node, before any node is cordoned or any data-plane pod deleted.
func TestPrepullFailureHaltsBeforeAnyCordon(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	w := e.watch()
	e.upgrade("1.28.1")
	e.setImageTag(cluster.ZtunnelName, "1.28.1"+cluster.TagNoPull)
	e.runInProcess("solo")
	e.apply(rollout("prepull", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Prepull = true
	}))
	nr := e.waitPhase("prepull", 2*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s, want Halted on the failed pull", nr.Status.Phase)
	}
	for _, want := range []string{"pre-pull of image", ":1.28.1" + cluster.TagNoPull, "on node node-", "ErrImagePull"} {
		if !strings.Contains(nr.Status.HaltReason, want) {
			t.Errorf("halt reason %q lacks %q", nr.Status.HaltReason, want)
		}
	}
	time.Sleep(2 * time.Second) // a broken orchestrator would cordon now
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("nodes cordoned: %v, want none (the pull failed before the cordon)", uns)
	}
	nl, err := e.c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nl.Items {
		if st := n.Annotations[model.AnnotationStep]; st != "" {
			t.Errorf("node %s has step %s recorded, want none started", n.Name, st)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.deletes) != 0 || len(w.firstSwap) != 0 {
		t.Errorf("data-plane pods deleted: %v", w.deletes)
	}
	if got, worst := w.maxUnavail, w.worst; got != 0 {
		t.Errorf("the watcher saw %d node(s) unavailable (%s), want none", got, worst)
	}
	pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: model.LabelPrepull + "=prepull"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no pre-pull pod left to show the failure (%v)", err)
	}
}

// TestPrepullThenSwap: with images that pull, every node is pre-pulled, then
// swapped; no pre-pull pod is left once the rollout completes.
func TestPrepullThenSwap(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	e.upgrade("1.28.1")
	e.runInProcess("solo")
	e.apply(rollout("prepull-ok", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Prepull = true
	}))
	nr := e.waitPhase("prepull-ok", 3*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)
	pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: model.LabelPrepull})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			t.Errorf("pre-pull pod %s left behind", p.Name)
		}
	}
}
