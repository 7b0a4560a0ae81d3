package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestNodeNotReadyDuringSoakFails: a canary made NotReady for a moment in
// the middle of its soak, and Ready again before the gate judges, does not
// pass: the rollout halts on it, and its verdict names the Ready transition
// instead of claiming the node was Ready through the soak.
func TestNodeNotReadyDuringSoakFails(t *testing.T) {
	const nodes, soak = 3, 45 * time.Second
	e := newEnv(t, nodes, 1)
	canary := e.c.Nodes[0].Name
	e.upgrade("1.28.1")
	e.runInProcess("flap")
	e.apply(rollout("flap", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{canary}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: soak}
	}))
	if node := e.waitStep("flap", v1alpha1.NodeSoak); node != canary {
		t.Fatalf("node %s soaking first, want the canary %s", node, canary)
	}
	ctx := context.Background()
	n, err := e.c.Client.CoreV1().Nodes().Get(ctx, canary, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	soakStart, err := time.Parse(time.RFC3339Nano, n.Annotations[model.AnnotationSoakSince])
	if err != nil {
		t.Fatalf("soak-since: %v", err)
	}
	readyIs := func(want corev1.ConditionStatus) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			n, err := e.c.Client.CoreV1().Nodes().Get(ctx, canary, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == want, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("node %s never Ready=%s", canary, want)
		}
	}
	if err := cluster.SetNodeReady(ctx, e.c.Client, canary, false); err != nil {
		t.Fatal(err)
	}
	readyIs(corev1.ConditionFalse)
	if err := cluster.SetNodeReady(ctx, e.c.Client, canary, true); err != nil {
		t.Fatal(err)
	}
	readyIs(corev1.ConditionTrue)
	flapped := time.Now()
	if left := soakStart.Add(soak).Sub(flapped); left < 10*time.Second {
		// The gate's cache must see the node Ready again before it judges.
		t.Fatalf("the node was Ready again only %s before the soak's end (soak %s): too late to show anything", left, soak)
	}

	// The canary's judgement, as soon as it is recorded.
	var got v1alpha1.NodeStatus
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, "flap", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, n := range nr.Status.Nodes {
			if n.Name == canary {
				got = n
			}
		}
		return got.State == v1alpha1.NodeDone || got.State == v1alpha1.NodeFailed, nil
	})
	if err != nil {
		t.Fatalf("canary %s never judged: %s", canary, got.State)
	}
	if got.State != v1alpha1.NodeFailed {
		t.Fatalf("canary %s (verdict %q): want Failed", got.State, got.Verdict)
	}
	if !strings.Contains(got.Verdict, "Ready condition changed during the soak") || strings.Contains(got.Verdict, "through the soak") {
		t.Errorf("verdict %q, want the Ready transition named and no claim of Ready through the soak", got.Verdict)
	}
	if nr := e.waitPhase("flap", time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted); nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Errorf("phase %s, want Halted on the canary", nr.Status.Phase)
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left behind: %v", uns)
	}
}
