package worker

import (
	"context"
	"slices"
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

// preparingGate records what the worker hands a gate.
type preparingGate struct {
	gate.Base
	prepared []gate.PrepareInput
	judged   []gate.GateInput
}

func (g *preparingGate) Reads() gate.Reads { return gate.Reads{Samples: true} }

func (g *preparingGate) Prepare(_ context.Context, in gate.PrepareInput) error {
	g.prepared = append(g.prepared, in)
	return nil
}

func (g *preparingGate) Judge(_ context.Context, in gate.GateInput) (health.Verdict, error) {
	g.judged = append(g.judged, in)
	return health.Verdict{Outcome: health.Fail, Reasons: []string{"recorded"}}, nil
}

// TestGateInputCarriesControls: the worker hands the gate the judged
// node's control group, at preflight (PrepareInput) and when it is judged
// (GateInput), from the world as it stands then, observed with the status
// as this process last wrote it: a control cordoned or started meanwhile
// is dropped from the judgement.
func TestGateInputCarriesControls(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "r-uid"},
		Spec: v1alpha1.NodeRolloutSpec{Targets: []v1alpha1.TargetRef{{Namespace: "kube-system", Name: "node-agent"}}, CanaryNodes: []string{"a1"}}}
	nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: "a1", State: v1alpha1.NodePreflight, StartTime: &metav1.Time{Time: now}}}
	for _, n := range []string{"a2", "a3", "a4", "b1"} {
		nr.Status.Nodes = append(nr.Status.Nodes, v1alpha1.NodeStatus{Name: n, State: v1alpha1.NodePending})
	}
	p, err := model.NewPolicy(nr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	c := newCaches()
	_ = c.nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a1"},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
	cordoned := map[string]bool{}
	w := &world{snapshot: func(nr *v1alpha1.NodeRollout) model.Snapshot {
		s := model.Snapshot{Status: nr.Status}
		for _, ns := range nr.Status.Nodes {
			s.Nodes = append(s.Nodes, model.NodeView{Name: ns.Name, Zone: ns.Name[:1], Ready: true, State: ns.State, Unschedulable: cordoned[ns.Name]})
		}
		return s
	}}
	g := &preparingGate{}
	clock := now
	e := testWorker(t, c, g, nr, func() time.Time { return clock })
	e.Skew, e.Fleet = w, w
	if err := e.preflightChecks(context.Background(), nr, p, "a1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"a2", "a3", "a4"}
	if len(g.prepared) != 1 || g.prepared[0].Node != "a1" || !slices.Equal(g.prepared[0].Control, want) {
		t.Fatalf("preflight prepared %+v, want a1 with controls %v", g.prepared, want)
	}

	// Before a1 is judged: a2 is cordoned by someone else, a3 was started
	// (its record in status, written by this process, not yet in nr), b1
	// is untouched.
	cordoned["a2"] = true
	if err := e.Status.Mutate(context.Background(), nr.Name, func(s *v1alpha1.NodeRolloutStatus) { s.Nodes[2].State = v1alpha1.NodeCordon }); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(20 * time.Minute)
	rec := nodestep.Record{SwapSince: now.Add(5 * time.Minute), SoakSince: now.Add(10 * time.Minute)}
	if _, err := e.judge(context.Background(), nr, p, "a1", rec); err == nil {
		t.Fatal("the recording gate fails every node; judge returned no halt")
	}
	if len(g.judged) != 1 {
		t.Fatalf("judged %d times", len(g.judged))
	}
	in := g.judged[0]
	if !slices.Equal(in.Control, []string{"a4"}) || in.ControlScope != "zone a" {
		t.Errorf("GateInput controls %v in %q, want [a4] in \"zone a\"", in.Control, in.ControlScope)
	}
	if last := w.asked[len(w.asked)-1]; last.Nodes[2].State != v1alpha1.NodeCordon {
		t.Errorf("the world was observed with a3 %s; want the status as this process wrote it (Cordon)", last.Nodes[2].State)
	}
}
