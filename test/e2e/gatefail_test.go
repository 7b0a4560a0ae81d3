package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/gate"
)

// TestZeroSoakGate: with no soak the gate judges right before the uncordon
// and a pass is recorded in the uncordon's patch. A pass is Done with its
// verdict; a fail still uncordons, halts with the gate's reason, and no
// further node starts.
func TestZeroSoakGate(t *testing.T) {
	t.Parallel()
	const nodes = 4
	e := newEnv(t, nodes, 1)
	w := e.watch()
	e.upgrade("1.28.1")
	bad := e.c.Nodes[2].Name // the plan goes node by node name: the third node
	gate := gate.GateFunc(func(_ context.Context, in gate.GateInput) (health.Verdict, error) {
		if in.Node == bad {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{"test gate refuses " + in.Node}}, nil
		}
		return health.Verdict{Outcome: health.Pass, Reasons: []string{"test gate passes"}}, nil
	})
	o, err := orchestrator.New(orchestrator.Config{
		RESTConfig: e.c.Config, Namespace: "default", Identity: "gate",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Resync: 500 * time.Millisecond, Registry: prometheus.NewRegistry(), Gate: gate,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = o.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	e.apply(rollout("zerosoak", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	nr := e.waitPhase("zerosoak", 3*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted || !strings.Contains(nr.Status.HaltReason, "test gate refuses "+bad) {
		t.Fatalf("phase %s, reason %q: want Halted by the gate on %s", nr.Status.Phase, nr.Status.HaltReason, bad)
	}
	time.Sleep(500 * time.Millisecond) // let the watcher drain its channel
	w.stop()
	for _, n := range nr.Status.Nodes {
		switch {
		case n.Name == bad:
			if n.State != v1alpha1.NodeFailed || !strings.Contains(n.Verdict, "Fail") {
				t.Errorf("%s: state %s verdict %q, want Failed with the gate's verdict", n.Name, n.State, n.Verdict)
			}
		case n.Name < bad:
			if n.State != v1alpha1.NodeDone || !strings.HasPrefix(n.Verdict, "Pass") {
				t.Errorf("%s: state %s verdict %q, want Done with a Pass verdict", n.Name, n.State, n.Verdict)
			}
		default:
			if n.State != v1alpha1.NodePending {
				t.Errorf("%s: state %s after the halt, want Pending (nothing starts)", n.Name, n.State)
			}
		}
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left behind: %v", uns)
	}
	if got, worst := w.max(); got > 1 {
		t.Errorf("%d nodes unavailable at once (> 1): %s", got, worst)
	}
}
