package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// holdingGate judges Inconclusive for ever, one round per millisecond, as
// the judge does under noData: Inconclusive with a renamed metric: its
// wait ends only with its context.
type holdingGate struct {
	gate.Base
	mu    sync.Mutex
	specs []v1alpha1.GatesSpec
}

func (g *holdingGate) Judge(ctx context.Context, in gate.GateInput) (health.Verdict, error) {
	g.mu.Lock()
	g.specs = append(g.specs, in.Spec)
	g.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return health.Verdict{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// TestGateWaitEndsOnAbortAndOnAGatesEdit: #27 finding 1. A node held at
// its gate by Inconclusive rounds is reached there by the user's abort and
// by an edit of spec.gates: the gate's wait ends within a few seconds with
// no verdict (no halt), for the worker to make the node safe or to judge
// again under the new spec. It used to wait until its context ended.
func TestGateWaitEndsOnAbortAndOnAGatesEdit(t *testing.T) {
	for _, edit := range []string{"abort", "gates", "delete"} {
		t.Run(edit, func(t *testing.T) {
			nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "r-uid"},
				Spec: v1alpha1.NodeRolloutSpec{Gates: v1alpha1.GatesSpec{Interval: v1alpha1.DurationOf(time.Minute)}}}
			gate := &holdingGate{}
			e := testWorker(t, newCaches(), gate, nr, time.Now)
			store := e.Rollouts
			p, err := model.NewPolicy(nr.Spec)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				time.Sleep(100 * time.Millisecond)
				live := nr.DeepCopy()
				switch edit {
				case "abort":
					live.Spec.Abort = true
				case "gates":
					live.Spec.Gates.Interval = v1alpha1.DurationOf(2 * time.Minute)
				case "delete":
					now := metav1.Now()
					live.DeletionTimestamp = &now
				}
				_ = store.Update(live)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			rec := nodestep.Record{Step: v1alpha1.NodeSoak, SwapSince: time.Now().Add(-time.Hour), SoakSince: time.Now().Add(-time.Minute)}
			verdict, err := e.judge(ctx, nr, p, "n1", rec)
			var se *nodestep.StepError
			if errors.As(err, &se) || verdict != nil || ctx.Err() != nil {
				t.Fatalf("after the %s edit the gate's wait went on until its context ended (%v): verdict %v, %v; want it cut short with no verdict", edit, ctx.Err(), verdict, err)
			}
			if err == nil {
				t.Fatal("judge returned no error and no verdict")
			}
		})
	}
}

// passingGate passes every node.
type passingGate struct{ gate.Base }

func (passingGate) Judge(context.Context, gate.GateInput) (health.Verdict, error) {
	return health.Verdict{Outcome: health.Pass, Reasons: []string{"no regression"}}, nil
}

// TestZeroSoakStillChecksReadiness: #27 finding 7. With soak: 0s the gate
// judges the present; a gate's Pass on a node that is not Ready (or whose
// pod is not) must still fail: the end-of-soak readiness check used to be
// skipped when the soak had no length.
func TestZeroSoakStillChecksReadiness(t *testing.T) {
	c := newCaches()
	_ = c.nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}}})
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "r-uid"}, Spec: v1alpha1.NodeRolloutSpec{Soak: v1alpha1.DurationOf(0)}}
	e := testWorker(t, c, passingGate{}, nr, time.Now)
	p, err := model.NewPolicy(nr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.judge(context.Background(), nr, p, "n1", nodestep.Record{Step: v1alpha1.NodeWaitReady, SwapSince: time.Now().Add(-time.Minute)})
	var se *nodestep.StepError
	if !errors.As(err, &se) || se.Halt != nodestep.HaltGateFailed || !strings.Contains(se.Reason, "not Ready") {
		t.Fatalf("soak 0s, node NotReady, the gate passing: %v; want a gate_failed halt naming the node not Ready", err)
	}
}
