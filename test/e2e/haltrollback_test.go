package e2e

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestRollbackAfterHalt is the emergency path in the order the docs give
// it: a rollout halts on a node its gate fails, the operator re-applies the
// old chart (the halted rollout keeps planning meanwhile), then runs
// `nodewise rollback`. Every swapped node, the failed one included, goes
// back to the old revision, last swapped first, and no cordon is left.
func TestRollbackAfterHalt(t *testing.T) {
	t.Parallel()
	const nodes = 4
	e := newEnv(t, nodes, 1)
	oldCNI, oldZt := e.newestHash(cluster.CNIName), e.newestHash(cluster.ZtunnelName)
	bad := e.c.Nodes[2].Name // the plan goes node by node name: the third node
	var failing atomic.Bool
	failing.Store(true)
	gate := gate.GateFunc(func(_ context.Context, in gate.GateInput) (health.Verdict, error) {
		if in.Node == bad && failing.Load() {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{"test gate refuses " + in.Node}}, nil
		}
		return health.Verdict{Outcome: health.Pass, Reasons: []string{"test gate passes"}}, nil
	})
	e.runInProcessWith("solo", func(c *orchestrator.Config) { c.Gate = gate })
	e.upgrade("1.28.1")
	e.apply(rollout("halts", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	nr := e.waitPhase("halts", 3*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted || !strings.Contains(nr.Status.HaltReason, bad) {
		t.Fatalf("phase %s reason %q: want Halted on %s", nr.Status.Phase, nr.Status.HaltReason, bad)
	}
	failing.Store(false) // the rollback's own gates pass

	// Re-apply the old chart, and let the halted rollout plan a few passes
	// (resync 500 ms) on the restored template before asking for rollback.
	if err := cluster.InstallIstio(context.Background(), e.c.Client, cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType, SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	if got := e.newestHash(cluster.ZtunnelName); got != oldZt {
		t.Fatalf("re-applied ztunnel at %s, want the old revision %s", got, oldZt)
	}
	time.Sleep(3 * time.Second)
	if nr, _ = e.rollouts.Get(context.Background(), "halts", metav1.GetOptions{}); nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s after re-applying the old chart: want still Halted", nr.Status.Phase)
	}
	w := e.watch()
	if out, err := e.cli("rollback", "halts"); err != nil {
		t.Fatalf("rollback: %v %s", err, out)
	}
	nr = e.waitPhase("halts", 3*time.Minute, v1alpha1.PhaseRolledBack)
	time.Sleep(500 * time.Millisecond) // let the watcher drain its channel
	w.stop()
	if c := nr.Status.Counts; c.RolledBack != 3 || c.Pending != 1 {
		t.Errorf("counts %+v: want the 3 swapped nodes RolledBack and the one never started Pending", c)
	}
	// Every node runs the old revision of both DaemonSets, Ready.
	if got := e.newestHash(cluster.CNIName); got != oldCNI {
		t.Fatalf("istio-cni newest revision %s, want the old %s", got, oldCNI)
	}
	e.assertAllOnNewest(nodes)
	order := w.swapOrder()
	want := []string{bad, e.c.Nodes[1].Name, e.c.Nodes[0].Name}
	if len(order) != len(want) || order[0] != want[0] || order[1] != want[1] || order[2] != want[2] {
		t.Errorf("rollback swapped %v, want the swapped nodes last first: %v", order, want)
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left: %v", uns)
	}
}
