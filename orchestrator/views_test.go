package orchestrator

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// passes is how many passes of kind the executor ran.
func (e *env) passes(kind string) int {
	return int(testutil.ToFloat64(e.ex.metrics.Passes.WithLabelValues(kind)))
}

// inFlightFleet is three nodes, a in flight (its worker counted as
// running), b and c pending, under a one-node-at-a-time rollout, after one
// full pass.
func inFlightFleet(t *testing.T) *env {
	nr := rollout("r", nil)
	objs := cluster(fixture.OldHash, "a", "b", "c")
	a := nodeIn(objs, "a")
	a.Annotations, a.Spec.Unschedulable = recordOf(nr, v1alpha1.NodeSwapZtunnel), true
	e := newEnv(t, append(objs, nr)...)
	e.ex.claims.StartWorker(nr.Name, "a")
	e.ex.reconcileAll(e.ctx)
	if e.ex.views["r"] == nil || len(e.ex.views["r"].nodes) != 3 {
		t.Fatalf("the full pass kept no views of the rollout: %+v", e.ex.views["r"])
	}
	return e
}

func TestAnInFlightNodesEventSkipsThePass(t *testing.T) {
	e := inFlightFleet(t)
	calls, views := len(e.api.Calls), testutil.ToFloat64(e.ex.metrics.NodeViews)
	obj, _, _ := e.pods.GetByKey(istioNS + "/ztunnel-a")
	pod := obj.(*corev1.Pod).DeepCopy()
	pod.Status.Conditions[0].Status = corev1.ConditionFalse
	_ = e.pods.Update(pod)
	e.ex.podEvent(obj, pod)
	e.ex.reconcileChanged(e.ctx)
	if e.passes("skipped") != 1 || e.passes("full") != 1 {
		t.Fatalf("passes: %d skipped, %d full; want the event's pass skipped", e.passes("skipped"), e.passes("full"))
	}
	if got := testutil.ToFloat64(e.ex.metrics.NodeViews) - views; got != 1 {
		t.Fatalf("the skipped pass built %v node views, want 1", got)
	}
	if len(e.api.Calls) != calls {
		t.Fatalf("the skipped pass wrote: %v", e.api.Calls[calls:])
	}
	if e.ex.views["r"].nodes["a"].Pods[istioNS+"/ztunnel"].Ready {
		t.Fatal("the kept view of node a was not brought up to date")
	}
	// Nothing dirty: no pass at all.
	e.ex.reconcileChanged(e.ctx)
	if e.passes("skipped") != 1 || e.passes("full") != 1 {
		t.Fatalf("a pass with nothing changed ran: %d skipped, %d full", e.passes("skipped"), e.passes("full"))
	}
}

func TestAPendingNodeGoingNotReadyPlansAgain(t *testing.T) {
	e := inFlightFleet(t)
	obj, _, _ := e.nodes.GetByKey("b")
	n := obj.(*corev1.Node).DeepCopy()
	n.Status.Conditions[0].Status, n.Status.Conditions[0].LastTransitionTime = corev1.ConditionFalse, metav1.NewTime(t0)
	_ = e.nodes.Update(n)
	e.ex.nodeEvent(nil, n)
	e.ex.reconcileChanged(e.ctx)
	if e.passes("full") != 2 || e.passes("skipped") != 0 {
		t.Fatalf("passes: %d full, %d skipped; want the event's pass full", e.passes("full"), e.passes("skipped"))
	}
	if v := e.ex.views["r"].nodes["b"]; v.Ready {
		t.Fatal("the full pass kept the old view of node b")
	}
	if err := e.ex.status.Mutate(e.ctx, "r", func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	if ns := e.nodeStatus("r", "b"); ns.Reason == "" {
		t.Fatalf("node b's status does not say it waits: %+v", ns)
	}
}

func TestChangesThatMayTouchEveryNodePlanInFull(t *testing.T) {
	e := inFlightFleet(t)
	for _, tc := range []struct {
		name string
		mark func()
	}{
		{"a new node", func() { e.ex.dirty.Node("d") }},
		{"a DaemonSet", e.ex.dirty.All},
		{"a system-upgrade-controller job pod", func() {
			e.ex.podEvent(nil, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "suc", Labels: map[string]string{"upgrade.cattle.io/plan": "p"}}})
		}},
	} {
		full := e.passes("full")
		tc.mark()
		e.ex.reconcileChanged(e.ctx)
		if e.passes("full") != full+1 {
			t.Errorf("%s: the pass was not full", tc.name)
		}
	}
}

func TestAPassThatActedKeepsNoViews(t *testing.T) {
	nr := rollout("r", nil)
	e := newEnv(t, append(cluster(fixture.OldHash, "a", "b"), nr)...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if e.ex.views["r"] != nil {
		t.Fatal("a pass that took the finalizer and started a node kept its views: the next event's pass would skip the plan from before")
	}
	e.ex.dirty.Node("b")
	e.ex.reconcileChanged(e.ctx)
	if e.passes("full") != 1 {
		t.Fatalf("the event's pass after an acting pass was not full (%d full)", e.passes("full"))
	}
}

func TestRolloutChanged(t *testing.T) {
	nr := rollout("r", nil)
	status := nr.DeepCopy()
	status.ResourceVersion, status.Status.Phase = "9", v1alpha1.PhaseProgressing
	resumed := nr.DeepCopy()
	resumed.Annotations = map[string]string{model.AnnotationResumeToken: "x"}
	spec := nr.DeepCopy()
	spec.Generation++
	finalizer := nr.DeepCopy()
	finalizer.Finalizers = []string{model.FinalizerReleaseNodes}
	for _, tc := range []struct {
		name string
		to   *v1alpha1.NodeRollout
		want bool
	}{
		{"status only", status, false},
		{"resume requested", resumed, true},
		{"spec changed", spec, true},
		{"finalizer", finalizer, true},
	} {
		if got := rolloutChanged(nr, tc.to); got != tc.want {
			t.Errorf("%s: rolloutChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}
