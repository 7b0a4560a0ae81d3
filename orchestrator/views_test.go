package orchestrator

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodecond"
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
	m := nodecond.InFlight(nr.Name) // its worker set it with its slot
	a.Status.Conditions = append(a.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: m.Reason, Message: m.Message})
	e := newEnv(t, append(objs, nr)...)
	e.ex.claims.StartWorker(nr.Name, "a")
	e.ex.reconcileAll(e.ctx)
	if e.ex.views["r"] == nil || len(kept(e.ex.views["r"])) != 3 {
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
	if kept(e.ex.views["r"])["a"].Pods[istioNS+"/ztunnel"].Ready {
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
	calls, views := len(e.api.Calls), testutil.ToFloat64(e.ex.metrics.NodeViews)
	notReady("b")(e)
	e.ex.reconcileChanged(e.ctx)
	if e.passes("views") != 1 || e.passes("full") != 1 || e.passes("skipped") != 0 {
		t.Fatalf("passes: %d views, %d full, %d skipped; want the event's pass planned from the kept views", e.passes("views"), e.passes("full"), e.passes("skipped"))
	}
	if got := testutil.ToFloat64(e.ex.metrics.NodeViews) - views; got != 1 {
		t.Fatalf("the views pass built %v node views, want 1 (node b's)", got)
	}
	if v := kept(e.ex.views["r"])["b"]; v.Ready {
		t.Fatal("the views pass kept the old view of node b")
	}
	if err := e.ex.status.Mutate(e.ctx, "r", func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	if ns := e.nodeStatus("r", "b"); ns.Reason == "" {
		t.Fatalf("node b's status does not say it waits: %+v", ns)
	}
	if len(e.api.Calls) == calls {
		t.Fatal("the views pass wrote no status")
	}
}

// notReady turns node's Ready condition false, as its kubelet's lease
// running out would, and marks it as the informer's handler does.
func notReady(node string) func(*env) {
	return func(e *env) {
		n := e.cachedNode(node)
		n.Status.Conditions[0].Status, n.Status.Conditions[0].LastTransitionTime = corev1.ConditionFalse, metav1.NewTime(t0)
		e.updateNode(n)
	}
}

func (e *env) cachedNode(name string) *corev1.Node {
	obj, ok, err := e.nodes.GetByKey(name)
	if err != nil || !ok {
		e.t.Fatalf("node %s not in the cache: %v", name, err)
	}
	return obj.(*corev1.Node).DeepCopy()
}

func (e *env) updateNode(n *corev1.Node) {
	if err := e.nodes.Update(n); err != nil {
		e.t.Fatal(err)
	}
	e.ex.nodeEvent(nil, n)
}

// TestAViewsPassDecidesAsAFullPass: each change moves the plan; planned
// from the kept views (the event's pass) it leaves the same status, the
// same requests, and the same kept views as a full pass over the same
// change in an identical executor. One of them acts (a pending node found
// on the new revision is marked Done): both keep views, the marked node's
// seen anew.
func TestAViewsPassDecidesAsAFullPass(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*env)
		acts   bool
	}{
		{"a pending node goes NotReady", notReady("b"), false},
		{"a pending node moves to another zone", func(e *env) {
			n := e.cachedNode("c")
			n.Labels = map[string]string{model.LabelZone: "zone-b"}
			e.updateNode(n)
		}, false},
		{"someone else cordons a pending node", func(e *env) {
			n := e.cachedNode("b")
			n.Spec.Unschedulable = true
			e.updateNode(n)
		}, false},
		{"a pending node is on the new revision", func(e *env) {
			for _, ds := range []string{cniDS.Name, ztunnelDS.Name} {
				obj, _, _ := e.pods.GetByKey(istioNS + "/" + ds + "-b")
				old := obj.(*corev1.Pod)
				pod := old.DeepCopy()
				pod.Labels[model.LabelControllerRevisionHash] = fixture.NewHash
				if err := e.pods.Update(pod); err != nil {
					t.Fatal(err)
				}
				e.ex.podEvent(old, pod)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			views, full := inFlightFleet(t), inFlightFleet(t)
			type mark struct{ api, kube int }
			var before [2]mark
			for i, e := range []*env{views, full} {
				tc.change(e)
				before[i] = mark{len(e.api.Calls), len(e.kube.Actions())}
			}
			views.ex.reconcileChanged(views.ctx)
			full.ex.reconcileAll(full.ctx)
			if views.passes("views") != 1 || views.passes("full") != 1 {
				t.Fatalf("passes: %d views, %d full; want the event's pass planned from the kept views", views.passes("views"), views.passes("full"))
			}
			var status [2]v1alpha1.NodeRolloutStatus
			var calls, actions [2][]string
			for i, e := range []*env{views, full} {
				if err := e.ex.status.Mutate(e.ctx, "r", func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
					t.Fatal(err)
				}
				status[i] = e.stored("r").Status
				for j := range status[i].Conditions {
					status[i].Conditions[j].LastTransitionTime = metav1.Time{} // the wall clock's
				}
				calls[i] = e.api.Calls[before[i].api:]
				for _, a := range e.kube.Actions()[before[i].kube:] {
					actions[i] = append(actions[i], a.GetVerb()+" "+a.GetResource().Resource+" "+a.GetSubresource())
				}
			}
			if !equality.Semantic.DeepEqual(status[0], status[1]) {
				t.Errorf("status after the views pass:\n%+v\nafter a full pass:\n%+v", status[0], status[1])
			}
			if !slices.Equal(calls[0], calls[1]) || !slices.Equal(actions[0], actions[1]) {
				t.Errorf("requests of the views pass: %v %v; of a full pass: %v %v", calls[0], actions[0], calls[1], actions[1])
			}
			if tc.acts && len(actions[0]) == 0 {
				t.Fatal("the acting change made no request: it did not act")
			}
			if v := views.ex.views["r"]; tc.acts && (v == nil || kept(v)["b"].State != v1alpha1.NodeDone) {
				t.Fatalf("kept views %+v: want node b's seen anew after its mark (Done), not as planned from", v)
			}
			if v, f := views.ex.views["r"], full.ex.views["r"]; v == nil || f == nil || !reflect.DeepEqual(kept(v), kept(f)) {
				t.Fatalf("kept views differ: views pass %+v, full pass %+v", v, f)
			}
			if status[0].Phase != v1alpha1.PhaseProgressing {
				t.Fatalf("phase %s, want Progressing", status[0].Phase)
			}
		})
	}
}

func TestChangesThatMayTouchEveryNodePlanInFull(t *testing.T) {
	e := inFlightFleet(t)
	ds := daemonSet()
	with := func(f func(*appsv1.DaemonSet)) *appsv1.DaemonSet { c := ds.DeepCopy(); f(c); return c }
	for _, tc := range []struct {
		name string
		mark func()
	}{
		{"a new node", func() { e.ex.dirty.Node("d") }},
		{"a new DaemonSet", func() { e.ex.daemonSetEvent(nil, ds) }},
		{"a DaemonSet deleted", func() { e.ex.daemonSetEvent(nil, cache.DeletedFinalStateUnknown{Key: "istio-system/ztunnel", Obj: ds}) }},
		{"a DaemonSet's template", func() {
			// as a fake clientset writes it: the generation does not move
			e.ex.daemonSetEvent(ds, with(func(d *appsv1.DaemonSet) { d.Spec.Template.Spec.Containers[0].Image = "istio/ztunnel:1.29.0" }))
		}},
		{"a DaemonSet's generation", func() { e.ex.daemonSetEvent(ds, with(func(d *appsv1.DaemonSet) { d.Generation++ })) }},
		{"a DaemonSet's controller catching up", func() {
			e.ex.daemonSetEvent(ds, with(func(d *appsv1.DaemonSet) { d.Status.ObservedGeneration-- }))
		}},
		{"a DaemonSet's annotations (Kured's lock)", func() {
			e.ex.daemonSetEvent(ds, with(func(d *appsv1.DaemonSet) { d.Annotations = map[string]string{locks.AnnotationKured: "{}"} }))
		}},
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

// TestADaemonSetsPodCountsStartNoPass: the counts in a DaemonSet's status
// move with every pod a swap replaces, and no pass reads them. Such an
// update starts no pass at all; before, each made the next pass observe
// the whole fleet.
func TestADaemonSetsPodCountsStartNoPass(t *testing.T) {
	e := inFlightFleet(t)
	ds := daemonSet()
	counted := ds.DeepCopy()
	counted.ResourceVersion = "8"
	counted.Status.NumberReady--
	counted.Status.NumberUnavailable++
	counted.Status.UpdatedNumberScheduled++
	full, views := e.passes("full"), e.passes("views")
	e.ex.daemonSetEvent(ds, counted)
	e.ex.reconcileChanged(e.ctx)
	if e.passes("full") != full || e.passes("views") != views {
		t.Errorf("a DaemonSet's pod counts started a pass: full %d -> %d, views %d -> %d", full, e.passes("full"), views, e.passes("views"))
	}
}

// daemonSet is a target DaemonSet its controller has caught up with.
func daemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "ztunnel", UID: "ds-uid", Generation: 3, ResourceVersion: "7"},
		Spec: appsv1.DaemonSetSpec{
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template:       corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "istio-proxy", Image: "istio/ztunnel:1.28.1"}}}},
		},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: 3, NumberReady: 3, UpdatedNumberScheduled: 1},
	}
}

// TestAPassThatStartedANodeKeepsItsViews: a pass that takes the finalizer
// and starts a node keeps its views, the started node's seen anew (in
// flight: this process's claim), so the next event's pass plans from them.
// One that creates a pre-pull pod keeps none: the pod shows in a view only
// once the pod cache has it.
func TestAPassThatStartedANodeKeepsItsViews(t *testing.T) {
	nr := rollout("r", nil)
	e := newEnv(t, append(cluster(fixture.OldHash, "a", "b"), nr)...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	fv := e.ex.views["r"]
	if fv == nil {
		t.Fatal("a pass that took the finalizer and started a node kept no views")
	}
	started := 0
	for _, n := range fv.Roster.Nodes() {
		if model.InFlight(n.State) {
			started++
		}
	}
	if started != 1 {
		t.Fatalf("kept views %+v: want the started node's view in flight", fv.Roster.Nodes())
	}
	e.ex.dirty.Node("b")
	e.ex.reconcileChanged(e.ctx)
	if e.passes("full") != 0 {
		t.Fatalf("the event's pass after a starting pass was full (%d full)", e.passes("full"))
	}

	pp := rollout("p", func(nr *v1alpha1.NodeRollout) { nr.Spec.Prepull = true })
	e = newEnv(t, append(cluster(fixture.OldHash, "a", "b"), pp)...)
	if err := e.pass("p"); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(e.kube.Actions(), func(a k8stesting.Action) bool {
		return a.GetVerb() == "create" && a.GetResource().Resource == "pods"
	}) {
		t.Fatalf("the pre-pull rollout's pass created no pod: %v", e.kube.Actions())
	}
	if e.ex.views["p"] != nil {
		t.Fatal("a pass that created pre-pull pods kept its views: the next event's pass would plan without them")
	}
}

// TestAnEndedWorkerPlansFromTheViews: a worker that ends wakes a pass that
// plans from the kept views, its node's seen anew, without observing the
// fleet: node a's record says Done, so b starts in its freed slot. A worker
// that ended with its node still in flight (an error) makes the same pass
// (which resumes the node), though no view moved.
func TestAnEndedWorkerPlansFromTheViews(t *testing.T) {
	e := inFlightFleet(t)
	n := e.cachedNode("a")
	n.Annotations, n.Spec.Unschedulable = recordOf(e.stored("r"), v1alpha1.NodeDone), false
	if err := e.nodes.Update(n); err != nil {
		t.Fatal(err)
	}
	e.ex.claims.EndWorker("r", "a")
	e.ex.slotFreed("a")
	e.ex.reconcileChanged(e.ctx)
	if e.passes("views") != 1 || e.passes("full") != 1 {
		t.Fatalf("passes: %d views, %d full; want the ended worker's pass planned from the views", e.passes("views"), e.passes("full"))
	}
	if !e.ex.claims.Claimed("r", "b") && !e.ex.claims.Working("r", "b") {
		t.Fatal("node b did not start in the slot node a freed")
	}

	e = inFlightFleet(t)
	e.ex.claims.EndWorker("r", "a") // ended with an error: a is still in flight
	e.ex.slotFreed("a")
	e.ex.reconcileChanged(e.ctx)
	if e.passes("views") != 1 || e.passes("skipped") != 0 {
		t.Fatalf("passes: %d views, %d skipped; want the plan made again (it resumes a)", e.passes("views"), e.passes("skipped"))
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

// TestEachWatchedInformerMarksWhatItsEventsChange: each informer the
// executor watches is paired with the mark of its own kind. The pairs are
// named, not found by comparing informers: the factory's Informer() returns
// a new wrapper at every call, so such a comparison never matched, every
// event marked every node, and every pass in the process was full.
func TestEachWatchedInformerMarksWhatItsEventsChange(t *testing.T) {
	e := newEnv(t)
	c := &caches{f: informers.NewSharedInformerFactory(fake.NewSimpleClientset(), 0)}
	ds := daemonSet()
	counted := ds.DeepCopy()
	counted.Status.NumberReady--
	events := map[string]struct {
		old, obj   any
		nodes      []string
		everything bool
	}{
		"core/v1.Node]":               {nil, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, []string{"n1"}, false},
		"core/v1.Pod]":                {nil, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: corev1.PodSpec{NodeName: "n2"}}, []string{"n2"}, false},
		"apps/v1.DaemonSet]":          {ds, counted, nil, false},
		"apps/v1.ControllerRevision]": {nil, &appsv1.ControllerRevision{}, nil, true},
	}
	watched := c.watched()
	if len(watched) != len(events) {
		t.Fatalf("%d informers watched, %d expected", len(watched), len(events))
	}
	for _, w := range watched {
		kind := fmt.Sprintf("%T", w.inf) // *cache.typedSharedIndexInformer[*k8s.io/api/core/v1.Node]
		var found bool
		for suffix, ev := range events {
			if !strings.HasSuffix(kind, suffix) {
				continue
			}
			found = true
			e.ex.dirty.Take()
			w.mark(e.ex, ev.old, ev.obj)
			nodes, all, _ := e.ex.dirty.Take()
			if !slices.Equal(nodes, ev.nodes) || all != ev.everything {
				t.Errorf("%s: an event marked nodes %v, every node %v; want %v, %v", kind, nodes, all, ev.nodes, ev.everything)
			}
		}
		if !found {
			t.Errorf("%s: an informer of no kind this test knows", kind)
		}
	}
}

// kept are the node views fv keeps, by name.
func kept(fv *fleet.View) map[string]model.NodeView {
	out := map[string]model.NodeView{}
	for _, n := range fv.Roster.Nodes() {
		out[n.Name] = n
	}
	return out
}
