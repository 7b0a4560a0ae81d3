package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestPDBBlockedDrainUnderLeaderChurn: a drain's timeout counts from the
// Drain step's persisted start, so leader churn cannot stretch it. A node
// whose only pod a PDB holds, under pdbBlocked skip-node, is skipped while
// every leader is killed -9 two seconds after it takes the Lease (far less
// than the timeout: a leader that started the timeout afresh would never
// reach it); then the rollout completes, with no cordon left.
func TestPDBBlockedDrainUnderLeaderChurn(t *testing.T) {
	const nodes, drainTimeout, leads = 3, 12 * time.Second, 2 * time.Second
	e := newEnv(t, nodes, 1)
	guarded := e.c.Nodes[0].Name
	e.blockDrain(guarded)
	e.upgrade("1.28.1")
	p := e.startProcess("churn-0", "127.0.0.1:0")
	waitHolder(t, e, "churn-0")
	e.apply(rollout("churn", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{guarded}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, PDBBlocked: v1alpha1.PDBSkipNode, Timeout: &v1alpha1.Duration{Duration: drainTimeout}}
	}))
	e.waitStep("churn", v1alpha1.NodeDrain)
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), guarded, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	drainStart, err := time.Parse(time.RFC3339Nano, n.Annotations[model.AnnotationStepSince])
	if err != nil {
		t.Fatalf("Drain step-since: %v", err)
	}

	state := func() (v1alpha1.NodeState, string) {
		nr, err := e.rollouts.Get(context.Background(), "churn", metav1.GetOptions{})
		if err != nil {
			return "", ""
		}
		for _, ns := range nr.Status.Nodes {
			if ns.Name == guarded {
				return ns.State, ns.Reason
			}
		}
		return "", ""
	}
	// Churn for up to five drain timeouts: each leader leads for `leads`.
	kills := 0
	deadline := time.Now().Add(5 * drainTimeout)
	for st, _ := state(); st != v1alpha1.NodeSkipped; st, _ = state() {
		if time.Now().After(deadline) {
			t.Fatalf("node %s still %s after %d leaders each killed %s after taking the Lease (drain timeout %s, started %s ago)",
				guarded, st, kills, leads, drainTimeout, time.Since(drainStart).Round(time.Second))
		}
		time.Sleep(leads)
		p.kill()
		kills++
		id := fmt.Sprintf("churn-%d", kills)
		p = e.startProcess(id, "127.0.0.1:0")
		waitHolder(t, e, id)
	}
	st, reason := state()
	t.Logf("node %s %s after %d kills, %s after its drain started: %s", guarded, st, kills, time.Since(drainStart).Round(time.Second), reason)
	if !strings.Contains(reason, "PodDisruptionBudget") {
		t.Errorf("skipped with reason %q, want the PodDisruptionBudget named", reason)
	}
	if kills == 0 {
		t.Error("skipped before any leader was killed: the test shows nothing")
	}
	nr := e.waitPhase("churn", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left behind: %v", uns)
	}
}
