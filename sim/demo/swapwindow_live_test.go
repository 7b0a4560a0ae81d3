package demo

import (
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestLiveReplaceSwapHaltsOnTheSwapWindow: a healthy build swapped
// break-before-make (replace, drain never) leaves the node without a
// listening ztunnel until the old one has drained, and the apps' connects
// are refused meanwhile. The judge's swap window sees them: the rollout
// halts at its first node on the swap window's failed connects, though
// the build and its soak are healthy (about 40 s).
func TestLiveReplaceSwapHaltsOnTheSwapWindow(t *testing.T) {
	t.Parallel()
	e := newLiveEnvSwap(t, 3, liveTraffic, testAgents(t), model.SwapReplace)
	e.upgrade("1.28.1")
	e.settle()
	nr := e.rolloutOn("replace", "node-001", v1alpha1.DrainNever, v1alpha1.InconclusivePass)
	ns := nodeStatus(t, nr, "node-001")
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	t.Logf("detail: %s", strings.Join(ns.Detail, "\n"))
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node-001 %s (verdict %q): want Halted at node-001", nr.Status.Phase, ns.State, ns.Verdict)
	}
	if !strings.Contains(nr.Status.HaltReason, "swap window: failed connects") || ns.Judgement == nil || ns.Judgement.Regressions == 0 {
		t.Errorf("want the swap window's failed connects as the reason: verdict %q, halt %q, judgement %+v", ns.Verdict, nr.Status.HaltReason, ns.Judgement)
	}
}
