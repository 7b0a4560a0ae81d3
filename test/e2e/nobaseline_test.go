package e2e

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/gate"
)

// TestReadinessGateWaitsNoBaseline: with no judge wired (no --agent-ca, the
// readiness gate) nothing reads a node's baseline, so a 60 s baseline costs
// no node its wait in preflight. Three nodes one at a time: each node's
// recorded slot (startTime, preflight, to finishTime, its gate passed) is
// shorter than the baseline it would otherwise have sat out, and its
// verdict says why none was waited.
func TestReadinessGateWaitsNoBaseline(t *testing.T) {
	t.Parallel()
	const baseline = 60 * time.Second
	e := newEnv(t, 3, 1)
	e.upgrade("1.28.1")
	e.runInProcess("solo")
	e.apply(rollout("nobaseline", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Baseline, s.Soak = &v1alpha1.Duration{Duration: baseline}, &v1alpha1.Duration{Duration: time.Second}
	}))
	// Long enough for three nodes that each wait their baseline, so that
	// the recorded times, not this wait, tell the two apart.
	nr := e.waitPhase("nobaseline", 4*baseline, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if len(nr.Status.Nodes) != 3 {
		t.Fatalf("%d nodes in status, want 3", len(nr.Status.Nodes))
	}
	for _, ns := range nr.Status.Nodes {
		if ns.StartTime == nil || ns.FinishTime == nil {
			t.Fatalf("node %s: start %v finish %v, want both recorded", ns.Name, ns.StartTime, ns.FinishTime)
		}
		if slot := ns.FinishTime.Sub(ns.StartTime.Time); slot >= baseline {
			t.Errorf("node %s: slot %s (preflight %s to done %s), not shorter than the %s baseline: it was waited for", ns.Name, slot,
				ns.StartTime.UTC().Format(time.RFC3339), ns.FinishTime.UTC().Format(time.RFC3339), baseline)
		}
		if d := strings.Join(ns.Detail, "; "); !strings.Contains(d, gate.ReasonNoBaseline) {
			t.Errorf("node %s: detail %q does not say why no baseline was waited", ns.Name, d)
		}
	}
}
