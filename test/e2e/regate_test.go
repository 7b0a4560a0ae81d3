package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestResumeGatesASwappedNodeAgain: a node whose swap went through and
// whose gate then failed (as it does when a restart lost the gate's
// baseline: "never tracked") is on the newest revision. `nodewise resume`
// must not mark it Done for that: it is judged again, and passes only
// through its gate, without being swapped a second time.
func TestResumeGatesASwappedNodeAgain(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	w := e.watch()
	e.upgrade("1.28.1")
	bad := e.c.Nodes[1].Name
	var mu sync.Mutex
	judged := map[string]int{}
	gate := gate.GateFunc(func(_ context.Context, in gate.GateInput) (health.Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		judged[in.Node]++
		if in.Node == bad && judged[in.Node] == 1 {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{"node " + in.Node + " never tracked (the baseline was lost)"}}, nil
		}
		return health.Verdict{Outcome: health.Pass, Reasons: []string{"test gate passes"}}, nil
	})
	// Replace, not surge: the watcher counts a replace's deleted old pods.
	e.runInProcessWith("regate", func(c *orchestrator.Config) { c.Gate, c.ZtunnelSwap = gate, model.SwapReplace })
	e.apply(rollout("regate", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{bad}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: time.Second}
	}))
	nr := e.waitPhase("regate", 2*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted || !strings.Contains(nr.Status.HaltReason, "never tracked") {
		t.Fatalf("phase %s (%s), want Halted by the gate on %s", nr.Status.Phase, nr.Status.HaltReason, bad)
	}
	if out, err := e.cli("resume", "regate"); err != nil {
		t.Fatalf("nodewise resume: %v %s", err, out)
	}
	e.waitPhase("regate", time.Minute, v1alpha1.PhaseProgressing, v1alpha1.PhaseCompleted) // the halt is cleared
	nr = e.waitPhase("regate", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("after resume: phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	for _, n := range nr.Status.Nodes {
		if n.Name == bad && (n.State != v1alpha1.NodeDone || !strings.HasPrefix(n.Verdict, "Pass")) {
			t.Errorf("%s: %s, verdict %q, reason %q: want Done through a passing gate", n.Name, n.State, n.Verdict, n.Reason)
		}
	}
	mu.Lock()
	if judged[bad] != 2 {
		t.Errorf("node %s judged %d times, want 2 (failed, then judged again after resume)", bad, judged[bad])
	}
	mu.Unlock()
	time.Sleep(500 * time.Millisecond) // let the watcher drain its channel
	w.stop()
	for k, n := range w.deletes {
		if n != 1 {
			t.Errorf("%s: %d old pods deleted, want exactly 1 (swapped twice?)", k, n)
		}
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left behind: %v", uns)
	}
}
