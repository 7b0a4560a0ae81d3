package orchestrator

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// preparingGate records what the executor hands a gate.
type preparingGate struct {
	prepared []gate.PrepareInput
	judged   []gate.GateInput
}

func (g *preparingGate) Prepare(_ context.Context, in gate.PrepareInput) error {
	g.prepared = append(g.prepared, in)
	return nil
}

func (g *preparingGate) Judge(_ context.Context, in gate.GateInput) (health.Verdict, error) {
	g.judged = append(g.judged, in)
	return health.Verdict{Outcome: health.Fail, Reasons: []string{"recorded"}}, nil
}

// TestGateInputCarriesControls: the executor hands the gate the judged
// node's control group, at preflight (PrepareInput) and when it is judged
// (GateInput), from the caches as they stand then: a control cordoned or
// started meanwhile is dropped from the judgement.
func TestGateInputCarriesControls(t *testing.T) {
	now := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	nodes, pods, dss, revs := idx(), idx(), idx(), idx()
	ref := v1alpha1.TargetRef{Namespace: "kube-system", Name: "node-agent"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: "ds"},
		Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}}}
	_ = dss.Add(ds)
	_ = revs.Add(&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: "node-agent-new",
		Labels: map[string]string{model.LabelControllerRevisionHash: "new"}, OwnerReferences: []metav1.OwnerReference{{UID: "ds"}}}, Revision: 2})
	addNode := func(name, zone string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{model.LabelZone: zone}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		_ = nodes.Add(n)
		_ = pods.Add(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: "node-agent-" + name,
			Labels: map[string]string{model.LabelControllerRevisionHash: "old"}, OwnerReferences: []metav1.OwnerReference{{UID: "ds", Kind: "DaemonSet"}}},
			Spec: corev1.PodSpec{NodeName: name}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
		return n
	}
	for _, n := range []string{"a1", "a2", "a3", "a4", "b1"} {
		addNode(n, map[bool]string{true: "a", false: "b"}[n[0] == 'a'])
	}
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "r-uid"},
		Spec: v1alpha1.NodeRolloutSpec{Targets: []v1alpha1.TargetRef{ref}, CanaryNodes: []string{"a1"}}}
	nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: "a1", State: v1alpha1.NodePreflight, StartTime: &metav1.Time{Time: now}}}
	for _, n := range []string{"a2", "a3", "a4", "b1"} {
		nr.Status.Nodes = append(nr.Status.Nodes, v1alpha1.NodeStatus{Name: n, State: v1alpha1.NodePending})
	}
	p, err := model.NewPolicy(nr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	gate := &preparingGate{}
	clock := now
	e := &executor{
		o:     &Orchestrator{cfg: Config{Now: func() time.Time { return clock }}, log: zap.NewNop()},
		nodes: corelisters.NewNodeLister(nodes), pods: observe.PodCache{PodLister: corelisters.NewPodLister(pods)},
		dss: appslisters.NewDaemonSetLister(dss), revs: appslisters.NewControllerRevisionLister(revs),
		gate: gate, status: seededStatus(t, nr),
		cp:           &controlPlane{at: now, tags: map[string]string{}}, // no istiod to skew against
		rolloutStore: cache.NewStore(cache.MetaNamespaceKeyFunc),
	}
	e.wire()
	_ = e.rolloutStore.Add(nr.DeepCopy())
	if err := e.preflightChecks(context.Background(), nr, p, "a1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"a2", "a3", "a4"}
	if len(gate.prepared) != 1 || gate.prepared[0].Node != "a1" || !slices.Equal(gate.prepared[0].Control, want) {
		t.Fatalf("preflight prepared %+v, want a1 with controls %v", gate.prepared, want)
	}

	// Before a1 is judged: a2 is cordoned by someone else, a3 was started by
	// another rollout's worker (its record in status), b1 is untouched.
	a2, _ := e.nodes.Get("a2")
	a2 = a2.DeepCopy()
	a2.Spec.Unschedulable = true
	_ = nodes.Update(a2)
	if err := e.status.Mutate(context.Background(), nr.Name, func(s *v1alpha1.NodeRolloutStatus) { s.Nodes[2].State = v1alpha1.NodeCordon }); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(20 * time.Minute)
	rec := nodestep.Record{SwapSince: now.Add(5 * time.Minute), SoakSince: now.Add(10 * time.Minute)}
	if _, _, err := e.judge(context.Background(), nr, p, "a1", rec); err == nil {
		t.Fatal("the recording gate fails every node; judge returned no halt")
	}
	if len(gate.judged) != 1 {
		t.Fatalf("judged %d times", len(gate.judged))
	}
	in := gate.judged[0]
	if !slices.Equal(in.Control, []string{"a4"}) || in.ControlScope != "zone a" {
		t.Errorf("GateInput controls %v in %q, want [a4] in \"zone a\"", in.Control, in.ControlScope)
	}
}

// seededStatus is a status writer over an in-memory API holding nr, which
// has read nr once (as a leader's first write does).
func seededStatus(t *testing.T, nr *v1alpha1.NodeRollout) *write.Status {
	t.Helper()
	w := write.NewStatus(context.Background(), fixture.NewRollouts(nr), zap.NewNop())
	if err := w.Mutate(context.Background(), nr.Name, func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	return w
}
