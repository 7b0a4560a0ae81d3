package drain

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// now is the tests' fake clock; stepSince is when the node's Drain step began.
var (
	now       = fixture.SurgeT0.Add(time.Hour)
	stepSince = now.Add(-10 * time.Second)
)

const (
	node       = "n1"
	nodeUID    = types.UID("n1-uid")
	ownNS      = "nodewise"
	pdbMessage = "Cannot evict pod as it would violate the pod's disruption budget."
)

var (
	podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podsGVK = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	podsGR  = schema.GroupResource{Resource: "pods"}
)

// policy is a valid policy with drain policy d and pdbBlocked pdb.
func policy(t *testing.T, d v1alpha1.DrainPolicy, pdb v1alpha1.PDBBlockedPolicy) model.Policy {
	t.Helper()
	return fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) { s.Drain.Policy, s.Drain.PDBBlocked = d, pdb })
}

// testRollout is the NodeRollout every test drains for.
func testRollout() *v1alpha1.NodeRollout {
	return &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "rollout-uid"}}
}

// drainRecord is node's record at its Drain step of testRollout.
func drainRecord() nodestep.Record {
	return nodestep.Record{}.WithStep("r", "rollout-uid", v1alpha1.NodeDrain, stepSince)
}

// appPod is a Running pod of a ReplicaSet in namespace default, on n,
// started at fixture.SurgeT0.
func appPod(name, n string) *corev1.Pod {
	yes := true
	start := metav1.NewTime(fixture.SurgeT0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name + "-uid"), CreationTimestamp: start,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-uid", Controller: &yes}}},
		Spec:   corev1.PodSpec{NodeName: n},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &start},
	}
}

// ownPod is one of nodewise's own replicas on node (never evicted).
func ownPod() *corev1.Pod {
	p := appPod("orchestrator-0", node)
	p.Namespace, p.Labels = ownNS, map[string]string{nodestep.LabelPartOf: "nodewise"}
	return p
}

// mirrorPod is a static pod's mirror on node (never evicted).
func mirrorPod() *corev1.Pod {
	p := appPod("kube-proxy-n1", node)
	p.Namespace, p.OwnerReferences = "kube-system", nil
	p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "hash"}
	return p
}

// ztunnelPod is ztunnel's (old) DaemonSet pod on node, with the grace period
// given (nil: none set). Its owner reference names apps/v1, as the
// DaemonSet controller writes it (the drain library matches on it).
func ztunnelPod(name string, grace *int64) *corev1.Pod {
	return fixture.SurgePod(name, fixture.OldHash, 0, fixture.OnNode(node), func(p *corev1.Pod) {
		p.OwnerReferences[0].APIVersion = "apps/v1"
		p.Spec.TerminationGracePeriodSeconds = grace
	})
}

// standardPods are node's pods in most tests: two app pods to evict, what a
// drain leaves alone (ztunnel, nodewise's own pod, a mirror pod), and an app
// pod on another node.
func standardPods() []*corev1.Pod {
	return []*corev1.Pod{appPod("web-1", node), appPod("web-2", node), appPod("web-other", "n2"),
		ztunnelPod("ztunnel-n1", nil), ownPod(), mirrorPod()}
}

// harness is a Drainer over a fake clientset and fake caches holding the
// same pods, the ztunnel DaemonSet and node n1 (with the record rec), whose
// Eviction API the test steers with evict.
type harness struct {
	kube    *fake.Clientset
	d       *Drainer
	status  *statusRecorder
	events  *eventRecorder
	podIdx  cache.Indexer
	dsIdx   cache.Indexer
	leaving atomic.Value // nodestep.Leave

	// evict answers one eviction (dry runs included) before the API applies
	// it; nil accepts every eviction. keep leaves an evicted pod in place
	// (terminating for its grace period) instead of deleting it. Set them
	// before Drain runs; mu guards the reactor's reads.
	mu    sync.Mutex
	evict func(ev *policyv1.Eviction) error
	keep  bool
}

func newHarness(t *testing.T, rec nodestep.Record, pods ...*corev1.Pod) *harness {
	t.Helper()
	ann := map[string]string{}
	for k, v := range rec.Patch(nodestep.Record{}) {
		ann[k] = *v
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: nodeUID, Annotations: ann}}
	objs := []runtime.Object{n, fixture.SurgeDS.DeepCopy()}
	podIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	dsIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	nodeIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range pods {
		objs = append(objs, p)
		if err := podIdx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	kube := fake.NewClientset(objs...)
	// The Eviction API is served (policy/v1), as the drain library checks.
	kube.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods", Kind: "Pod", Namespaced: true},
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1", Namespaced: true},
	}}}
	h := &harness{kube: kube, podIdx: podIdx, dsIdx: dsIdx, status: &statusRecorder{}, events: &eventRecorder{}}
	h.leaving.Store(nodestep.Leave(""))
	// The API server's field selector, which the fake ignores: the drain
	// lists the pods of one node.
	kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := kube.Tracker().List(podsGVR, podsGVK, a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		list := obj.(*corev1.PodList)
		sel := a.(k8stesting.ListAction).GetListRestrictions().Fields
		var kept []corev1.Pod
		for _, p := range list.Items {
			if sel == nil || sel.Matches(fields.Set{"spec.nodeName": p.Spec.NodeName}) {
				kept = append(kept, p)
			}
		}
		list.Items = kept
		return true, list, nil
	})
	// The eviction subresource: evict's answer, else (not a dry run) the pod goes.
	kube.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		h.mu.Lock()
		evict, keep := h.evict, h.keep
		h.mu.Unlock()
		if evict != nil {
			if err := evict(ev); err != nil {
				return true, nil, err
			}
		}
		if ev.DeleteOptions != nil && len(ev.DeleteOptions.DryRun) > 0 {
			return true, nil, nil
		}
		if _, err := kube.Tracker().Get(podsGVR, a.GetNamespace(), ev.Name); err != nil {
			return true, nil, err
		}
		if keep {
			return true, nil, nil
		}
		return true, nil, kube.Tracker().Delete(podsGVR, a.GetNamespace(), ev.Name)
	})
	kube.ClearActions()

	revIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := nodeIdx.Add(n); err != nil {
		t.Fatal(err)
	}
	if err := dsIdx.Add(fixture.SurgeDS.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	nodes := corelisters.NewNodeLister(nodeIdx)
	clock := func() time.Time { return now }
	h.d = &Drainer{
		Kube: kube, Log: zap.NewNop(), Now: clock, EvictRetryDelay: 10 * time.Millisecond, Namespace: ownNS,
		Targets: observe.Targets{
			DaemonSets: appslisters.NewDaemonSetLister(dsIdx),
			Revisions:  appslisters.NewControllerRevisionLister(revIdx),
			Pods:       observe.PodCache{PodLister: corelisters.NewPodLister(podIdx)},
		},
		Nodes: nodes, Recorder: h.events, Status: h.status,
		Records: &write.Nodes{Kube: kube, Cache: nodes, Changes: &observe.Changes{}, Now: clock, Log: zap.NewNop()},
		Leaving: func(nr *v1alpha1.NodeRollout, n string) nodestep.Leave {
			if nr.Name != "r" || n != node {
				return nodestep.Leave(fmt.Sprintf("asked about %s/%s", nr.Name, n))
			}
			return h.leaving.Load().(nodestep.Leave)
		},
	}
	return h
}

// evictions are the evictions the API was sent, as "namespace/name", with
// " (dry run)" after a server dry run, sorted.
func (h *harness) evictions() []string {
	var out []string
	for _, a := range h.kube.Actions() {
		if a.GetVerb() != "create" || a.GetSubresource() != "eviction" {
			continue
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		s := ev.Namespace + "/" + ev.Name
		if ev.DeleteOptions != nil && len(ev.DeleteOptions.DryRun) > 0 {
			s += " (dry run)"
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// podExists says the API still holds the pod.
func (h *harness) podExists(t *testing.T, ns, name string) bool {
	t.Helper()
	_, err := h.kube.Tracker().Get(podsGVR, ns, name)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// storedRecord is node's record as the API holds it.
func (h *harness) storedRecord(t *testing.T) nodestep.Record {
	t.Helper()
	n, err := h.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nodestep.ParseRecord(n.Annotations)
}

// tooManyRequests is the API server's answer to an eviction a
// PodDisruptionBudget refuses.
func tooManyRequests() error { return apierrors.NewTooManyRequests(pdbMessage, 10) }

// refuse answers 429 to the evictions of the named pods (dry runs included).
func refuse(names ...string) func(ev *policyv1.Eviction) error {
	return func(ev *policyv1.Eviction) error {
		for _, n := range names {
			if ev.Name == n {
				return tooManyRequests()
			}
		}
		return nil
	}
}

// stepError is err as a *nodestep.StepError (the test fails if it is not one).
func stepError(t *testing.T, err error) *nodestep.StepError {
	t.Helper()
	var se *nodestep.StepError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not a StepError", err, err)
	}
	return se
}

// statusRecorder is a StatusWriter holding one NodeRollout's status in
// memory; fail, when set, answers every Mutate instead.
type statusRecorder struct {
	mu     sync.Mutex
	status v1alpha1.NodeRolloutStatus
	names  []string
	fail   func() error
}

func (s *statusRecorder) Mutate(_ context.Context, name string, f func(*v1alpha1.NodeRolloutStatus)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.names = append(s.names, name)
	if s.fail != nil {
		return s.fail()
	}
	f(&s.status)
	return nil
}

// reason is node's status reason.
func (s *statusRecorder) reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.status.Nodes {
		if n.Name == node {
			return n.Reason
		}
	}
	return ""
}

// writes are the rollouts Mutate was called for, in order.
func (s *statusRecorder) writes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.names...)
}

// event is one recorded Event.
type event struct {
	obj                  runtime.Object
	typ, reason, message string
}

// eventRecorder keeps the Events and the objects they are about.
type eventRecorder struct {
	mu     sync.Mutex
	events []event
}

func (r *eventRecorder) Event(obj runtime.Object, typ, reason, message string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, event{obj, typ, reason, message})
}

func (r *eventRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r *eventRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r *eventRecorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}
