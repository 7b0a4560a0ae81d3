package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestPinnedRolloutHaltsOnAnotherVersion: a rollout pinned to 1.28.1 whose
// templates move to 1.28.2 mid-rollout halts, naming both versions, and
// the node it had done keeps its 1.28.1 pods (not one deleted).
func TestPinnedRolloutHaltsOnAnotherVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, 1)
	ctx := context.Background()
	e.upgrade("1.28.1")
	e.runInProcess("pinned")
	e.apply(rollout("pinned", func(s *v1alpha1.NodeRolloutSpec) {
		s.Version = "1.28.1"
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: 3 * time.Second} // time to change the template after the first node
	}))
	// The first node done on 1.28.1: its pods' UIDs.
	var done string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, n := range nr.Status.Nodes {
			if n.State == v1alpha1.NodeDone {
				done = n.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no node done on 1.28.1: %v", err)
	}
	before := podUIDs(t, e, done)
	e.upgrade("1.28.2")
	nr := e.waitPhase("pinned", time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted || !strings.Contains(nr.Status.HaltReason, "template is at 1.28.2") || !strings.Contains(nr.Status.HaltReason, "not the pinned version 1.28.1") {
		t.Fatalf("phase %s reason %q; want Halted naming 1.28.2 and 1.28.1", nr.Status.Phase, nr.Status.HaltReason)
	}
	time.Sleep(2 * time.Second) // passes after the halt: still nothing on the done node
	if after := podUIDs(t, e, done); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("node %s, done on 1.28.1, had its data-plane pods replaced after the template moved: %v → %v", done, before, after)
	}
}

// podUIDs are the UIDs of the data-plane pods on node, sorted by DaemonSet.
func podUIDs(t *testing.T, e *env, node string) []string {
	t.Helper()
	var out []string
	for _, ds := range []string{cluster.CNIName, cluster.ZtunnelName} {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if dsOf(&p) == ds {
				out = append(out, ds+"="+string(p.UID))
			}
		}
	}
	return out
}
