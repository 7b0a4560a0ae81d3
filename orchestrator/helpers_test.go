package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// istioNS is the Istio namespace every test target lives in.
const istioNS = "istio-system"

// t0 is every test's clock: executors here never see time pass.
var t0 = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

// The two default targets as the test cluster runs them: OnDelete,
// settled, each with an old and a new ControllerRevision.
var (
	cniDS     = targetDS("istio-cni-node", "cni-uid", map[string]string{"k8s-app": "istio-cni-node"}, "docker.io/istio/install-cni:1.28.1")
	ztunnelDS = targetDS("ztunnel", "zt-uid", map[string]string{"app": "ztunnel"}, "docker.io/istio/ztunnel:1.28.1")
)

func targetDS(name string, uid types.UID, labels map[string]string, image string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: istioNS, UID: uid, Generation: 3},
		Spec: appsv1.DaemonSetSpec{
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
			},
		},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 3},
	}
}

// revisions are ds's old (1) and new (2) ControllerRevisions.
func revisions(ds *appsv1.DaemonSet) []runtime.Object {
	rev := func(n int64, hash string) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s", ds.Name, hash), Namespace: ds.Namespace,
				Labels:          map[string]string{model.LabelControllerRevisionHash: hash},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}}},
			Revision: n,
		}
	}
	return []runtime.Object{rev(1, fixture.OldHash), rev(2, fixture.NewHash)}
}

// testNode is a Ready node in zone-a.
func testNode(name string) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1", Labels: map[string]string{model.LabelZone: "zone-a"}},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

// targetPod is ds's Ready pod on node at hash.
func targetPod(ds *appsv1.DaemonSet, node, hash string) *corev1.Pod {
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + node, Namespace: ds.Namespace, UID: types.UID(ds.Name + "-" + node + "-uid"),
			Labels:          map[string]string{model.LabelControllerRevisionHash: hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &yes}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// cluster is the two targets and their revisions, and the named nodes, each
// running both targets at hash.
func cluster(hash string, nodes ...string) []runtime.Object {
	objs := []runtime.Object{cniDS.DeepCopy(), ztunnelDS.DeepCopy()}
	objs = append(objs, revisions(cniDS)...)
	objs = append(objs, revisions(ztunnelDS)...)
	for _, n := range nodes {
		objs = append(objs, testNode(n), targetPod(cniDS, n, hash), targetPod(ztunnelDS, n, hash))
	}
	return objs
}

// rollout is a valid NodeRollout of the default targets, one node at a
// time, no baseline or soak, changed by mut.
func rollout(name string, mut func(*v1alpha1.NodeRollout)) *v1alpha1.NodeRollout {
	nr := &v1alpha1.NodeRollout{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Generation: 1, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec: v1alpha1.NodeRolloutSpec{MaxParallel: intstr.FromInt32(1), MaxUnavailable: intstr.FromInt32(1),
			Baseline: &v1alpha1.Duration{}, Soak: &v1alpha1.Duration{}},
	}
	if mut != nil {
		mut(nr)
	}
	return nr
}

// nodeIn is the named node of objs.
func nodeIn(objs []runtime.Object, name string) *corev1.Node {
	for _, o := range objs {
		if n, ok := o.(*corev1.Node); ok && n.Name == name {
			return n
		}
	}
	panic("no node " + name)
}

// recordOf is the annotations of a node record of nr at step st.
func recordOf(nr *v1alpha1.NodeRollout, st v1alpha1.NodeState) map[string]string {
	return map[string]string{
		model.AnnotationRollout: nr.Name, model.AnnotationRolloutUID: string(nr.UID),
		model.AnnotationStep: string(st), model.AnnotationStepSince: t0.Add(-time.Minute).Format(time.RFC3339Nano),
	}
}

// env is an executor wired as lead wires it, over a fake clientset, the
// informer stores a test fills (the same objects as the clientset holds)
// and an in-memory NodeRollout API.
type env struct {
	t      testing.TB
	ctx    context.Context
	kube   *fake.Clientset
	api    *fixture.Rollouts
	nodes  cache.Indexer
	pods   cache.Indexer
	dss    cache.Indexer
	revs   cache.Indexer
	store  cache.Store
	events *record.FakeRecorder
	ex     *executor
}

func indexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

func testConfig() Config {
	return Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, Identity: "test", Now: func() time.Time { return t0 }}
}

// newEnv builds the executor over objs: Nodes, Pods, DaemonSets and
// ControllerRevisions go to both the clientset and the caches, NodeRollouts
// to the in-memory API and the rollout cache.
func newEnv(t testing.TB, objs ...runtime.Object) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	e := &env{t: t, ctx: ctx, api: fixture.NewRollouts(), nodes: indexer(), pods: indexer(), dss: indexer(), revs: indexer(),
		store: cache.NewStore(cache.MetaNamespaceKeyFunc), events: record.NewFakeRecorder(1000)}
	if err := observe.IndexPodsByNode(e.pods); err != nil { // as the pod informer is
		t.Fatal(err)
	}
	var kubeObjs []runtime.Object
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			_ = e.nodes.Add(o)
		case *corev1.Pod:
			_ = e.pods.Add(o)
		case *appsv1.DaemonSet:
			_ = e.dss.Add(o)
		case *appsv1.ControllerRevision:
			_ = e.revs.Add(o)
		case *v1alpha1.NodeRollout:
			e.put(o)
			continue
		default:
			t.Fatalf("newEnv: unexpected %T", o)
		}
		kubeObjs = append(kubeObjs, o.DeepCopyObject())
	}
	e.kube = fake.NewClientset(kubeObjs...)
	cfg := testConfig()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	log := zap.NewNop()
	ex := &executor{
		cfg: cfg, log: log, metrics: m, kube: e.kube, rollouts: e.api,
		nodes: corelisters.NewNodeLister(e.nodes), pods: observe.NewPodCache(e.pods),
		dss: appslisters.NewDaemonSetLister(e.dss), revs: appslisters.NewControllerRevisionLister(e.revs),
		kick: make(chan struct{}, 1), freed: make(chan struct{}, 1),
		status: write.NewStatus(ctx, e.api, log), rolloutStore: e.store, recorder: e.events,
	}
	ex.gate = gate.ReadinessGate{Nodes: ex.nodes, Pods: ex.pods}
	ex.wire()
	e.ex = ex
	t.Cleanup(func() {
		cancel()
		ex.wg.Wait()
		ex.status.Wait()
	})
	return e
}

// put stores nr in the API (a user's write, new resourceVersion) and in the rollout cache.
func (e *env) put(nr *v1alpha1.NodeRollout) {
	e.api.Put(nr)
	if err := e.store.Update(e.api.Stored(nr.Name)); err != nil {
		e.t.Fatal(err)
	}
}

// pass runs one reconcile pass over the cached copy of the named rollout.
func (e *env) pass(name string) error {
	e.t.Helper()
	obj, ok, err := e.store.GetByKey(name)
	if err != nil || !ok {
		e.t.Fatalf("rollout %s not in the cache: %v", name, err)
	}
	return e.ex.reconcile(e.ctx, obj.(*v1alpha1.NodeRollout).DeepCopy())
}

// stored is the named rollout as the API holds it.
func (e *env) stored(name string) *v1alpha1.NodeRollout {
	e.t.Helper()
	nr := e.api.Stored(name)
	if nr == nil {
		e.t.Fatalf("rollout %s not in the API", name)
	}
	return nr
}

// nodeStatus is the node's entry in the rollout's stored status.
func (e *env) nodeStatus(rollout, node string) v1alpha1.NodeStatus {
	e.t.Helper()
	for _, ns := range e.stored(rollout).Status.Nodes {
		if ns.Name == node {
			return ns
		}
	}
	e.t.Fatalf("rollout %s has no status entry for node %s", rollout, node)
	return v1alpha1.NodeStatus{}
}

// apiNode is the node as the fake API holds it.
func (e *env) apiNode(name string) *corev1.Node {
	e.t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

// emitted drains the events recorded so far.
func (e *env) emitted() []string {
	var out []string
	for {
		select {
		case ev := <-e.events.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

// hasEvent says one of events starts with prefix ("Normal Completed").
func hasEvent(events []string, prefix string) bool {
	return slices.ContainsFunc(events, func(ev string) bool { return strings.HasPrefix(ev, prefix) })
}

// patched is the names of the objects of resource the clientset was asked to patch.
func (e *env) patched(resource string) []string {
	var out []string
	for _, a := range e.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetVerb() == "patch" && a.GetResource().Resource == resource && a.GetSubresource() == "" {
			out = append(out, p.GetName())
		}
	}
	return out
}

// count is how many of the in-memory API's calls were verb.
func (e *env) count(verb string) int {
	n := 0
	for _, c := range e.api.Calls {
		if strings.HasPrefix(c, verb+" ") {
			n++
		}
	}
	return n
}

// condition is the rollout status's condition of type typ.
func condition(s v1alpha1.NodeRolloutStatus, typ string) metav1.Condition {
	for _, c := range s.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// failOnce makes the in-memory API answer err to the first n calls of verb.
func failOnce(api *fixture.Rollouts, verb string, n int, err error) {
	var mu sync.Mutex
	api.Fail = func(v, _ string) error {
		mu.Lock()
		defer mu.Unlock()
		if v == verb && n > 0 {
			n--
			return err
		}
		return nil
	}
}

// watchableRollouts is the in-memory NodeRollout API with a watch that never
// sends an event (the fixture refuses watches), and that refuses a
// watch-list so the informer lists.
type watchableRollouts struct{ *fixture.Rollouts }

func (r watchableRollouts) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		return nil, fmt.Errorf("watch-list is not supported here")
	}
	return watch.NewFake(), nil
}
