package swap

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
)

var (
	podsGVR = corev1.SchemeGroupVersion.WithResource("pods")
	podsGR  = podsGVR.GroupResource()
)

// caches are the informer caches a swap reads: DaemonSets, their
// ControllerRevisions and pods, behind observe.Targets.
type caches struct {
	pods, dss, revs cache.Indexer
	targets         observe.Targets
}

// newCaches caches ds (when not nil) with fixture.SurgeRev as its newest
// revision, and pods.
func newCaches(ds *appsv1.DaemonSet, pods ...*corev1.Pod) caches {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	c := caches{pods: idx(), dss: idx(), revs: idx()}
	c.targets = observe.Targets{DaemonSets: appslisters.NewDaemonSetLister(c.dss), Revisions: appslisters.NewControllerRevisionLister(c.revs),
		Pods: observe.PodCache{PodLister: corelisters.NewPodLister(c.pods)}}
	if ds != nil {
		c.addDaemonSet(ds, fixture.SurgeRev)
	}
	for _, p := range pods {
		_ = c.pods.Add(p.DeepCopy())
	}
	return c
}

// addDaemonSet caches ds and a copy of rev (its hash and number) as its
// ControllerRevision.
func (c caches) addDaemonSet(ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision) {
	_ = c.dss.Add(ds.DeepCopy())
	r := rev.DeepCopy()
	r.Name, r.Namespace, r.UID = ds.Name+"-"+rev.Labels[model.LabelControllerRevisionHash], ds.Namespace, types.UID(ds.Name+"-rev-uid")
	r.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
	_ = c.revs.Add(r)
}

// cluster is a fake API server (the fake clientset, which holds what the
// caches hold) whose caches follow every pod write at once, as the informers
// would, each write an informer event (Changes broadcast). The API server's
// part the fake tracker lacks is played too: a create stamps the pod's
// creation time (by the fake clock) and UID, a delete checks its UID
// precondition (409 Conflict), and a delete with propagationPolicy Orphan
// hands the pod's dependents over to the DaemonSet (the garbage collector,
// then the DaemonSet controller adopting them).
type cluster struct {
	caches
	t       *testing.T
	kube    *fake.Clientset
	changes *observe.Changes
	ds      *appsv1.DaemonSet
	// now is the clock the swaps read.
	now time.Time
	// kubelet, when set, changes a pod as it is created (its status); it may
	// advance now (the time the pod takes) or change the caches.
	kubelet func(p *corev1.Pod)
	// controller, when set, acts after a pod was deleted (the DaemonSet
	// controller creating the node's next pod: put).
	controller func(deleted *corev1.Pod)
}

// newCluster is a cluster holding ds (when not nil) and its newest
// revision fixture.SurgeRev, and pods, its clock an hour past
// fixture.SurgeT0.
func newCluster(t *testing.T, ds *appsv1.DaemonSet, pods ...*corev1.Pod) *cluster {
	t.Helper()
	c := &cluster{caches: newCaches(ds, pods...), t: t, changes: &observe.Changes{}, ds: ds, now: fixture.SurgeT0.Add(time.Hour)}
	var objs []runtime.Object
	for _, idx := range []cache.Indexer{c.dss, c.revs, c.pods} {
		for _, o := range idx.List() {
			objs = append(objs, o.(runtime.Object).DeepCopyObject())
		}
	}
	c.kube = fake.NewClientset(objs...)
	c.kube.PrependReactor("create", "pods", c.create)
	c.kube.PrependReactor("delete", "pods", c.delete)
	return c
}

func (c *cluster) waits() Waits {
	return Waits{Targets: c.targets, Changes: c.changes, Now: func() time.Time { return c.now }}
}

func (c *cluster) replace() Replace {
	return Replace{Waits: c.waits(), Kube: c.kube, Log: zap.NewNop()}
}

func (c *cluster) surge() Surge {
	return Surge{Waits: c.waits(), Kube: c.kube, Log: zap.NewNop(), DaemonSets: c.targets.DaemonSets, Revisions: c.targets.Revisions, Pods: c.targets.Pods}
}

// surger is a Surger reading the API (ObserveSurge) by the cluster's clock.
func (c *cluster) surger() Surger {
	return Surger{Kube: c.kube, Poll: time.Millisecond, Now: func() time.Time { return c.now }}
}

func (c *cluster) create(a k8stesting.Action) (bool, runtime.Object, error) {
	p := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).DeepCopy()
	p.CreationTimestamp = metav1.NewTime(c.now)
	if p.UID == "" {
		p.UID = types.UID(p.Name + "-uid")
	}
	if c.kubelet != nil {
		c.kubelet(p)
	}
	if err := c.kube.Tracker().Create(podsGVR, p, p.Namespace); err != nil {
		return true, nil, err
	}
	c.sync()
	return true, p.DeepCopy(), nil
}

func (c *cluster) delete(a k8stesting.Action) (bool, runtime.Object, error) {
	d := a.(k8stesting.DeleteAction)
	defer c.sync() // the caches catch up with the API, whatever it answered
	obj, err := c.kube.Tracker().Get(podsGVR, d.GetNamespace(), d.GetName())
	if err != nil {
		return true, nil, err
	}
	p := obj.(*corev1.Pod)
	o := d.GetDeleteOptions()
	if o.Preconditions != nil && o.Preconditions.UID != nil && *o.Preconditions.UID != p.UID {
		return true, nil, apierrors.NewConflict(podsGR, p.Name, fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *o.Preconditions.UID, p.UID))
	}
	if err := c.kube.Tracker().Delete(podsGVR, p.Namespace, p.Name); err != nil {
		return true, nil, err
	}
	if o.PropagationPolicy != nil && *o.PropagationPolicy == metav1.DeletePropagationOrphan {
		for _, dep := range c.apiPods() {
			if ctl := metav1.GetControllerOf(dep); ctl != nil && ctl.UID == p.UID {
				dep.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(c.ds, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
				if err := c.kube.Tracker().Update(podsGVR, dep, dep.Namespace); err != nil {
					c.t.Fatalf("handing %s over: %v", dep.Name, err)
				}
			}
		}
	}
	if c.controller != nil {
		c.controller(p)
	}
	return true, nil, nil
}

// sync makes the pod cache the API's pods and broadcasts the change.
func (c *cluster) sync() {
	var objs []any
	for _, p := range c.apiPods() {
		objs = append(objs, p)
	}
	if err := c.pods.Replace(objs, ""); err != nil {
		c.t.Fatalf("syncing the pod cache: %v", err)
	}
	c.changes.Broadcast()
}

// put creates or replaces p in the API only (the caches follow at the
// next write, or at sync).
func (c *cluster) put(p *corev1.Pod) {
	tr, err := c.kube.Tracker(), error(nil)
	if _, gerr := tr.Get(podsGVR, p.Namespace, p.Name); gerr == nil {
		err = tr.Update(podsGVR, p.DeepCopy(), p.Namespace)
	} else {
		err = tr.Create(podsGVR, p.DeepCopy(), p.Namespace)
	}
	if err != nil {
		c.t.Fatalf("putting pod %s: %v", p.Name, err)
	}
}

// apiPods are the pods in the API, by name.
func (c *cluster) apiPods() map[string]*corev1.Pod {
	obj, err := c.kube.Tracker().List(podsGVR, corev1.SchemeGroupVersion.WithKind("Pod"), "")
	if err != nil {
		c.t.Fatalf("listing pods: %v", err)
	}
	out := map[string]*corev1.Pod{}
	for _, p := range obj.(*corev1.PodList).Items {
		out[p.Name] = p.DeepCopy()
	}
	return out
}

// fail makes the API answer verb on pods (named name, or any when empty)
// with err.
func (c *cluster) fail(verb, name string, err error) {
	c.kube.PrependReactor(verb, "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var n string
		switch a := a.(type) {
		case k8stesting.DeleteAction:
			n = a.GetName()
		case k8stesting.CreateAction:
			n = a.GetObject().(*corev1.Pod).Name
		}
		return name == "" || n == name, nil, err
	})
}

// podWrites are the pod creates and deletes asked of the API, as
// "create name" and "delete name", with each delete's options.
func (c *cluster) podWrites() ([]string, []metav1.DeleteOptions) {
	var writes []string
	var opts []metav1.DeleteOptions
	for _, a := range c.kube.Actions() {
		if a.GetResource() != podsGVR {
			continue
		}
		switch a := a.(type) {
		case k8stesting.CreateAction:
			if a.GetVerb() == "create" {
				writes = append(writes, "create "+a.GetObject().(*corev1.Pod).Name)
			}
		case k8stesting.DeleteAction:
			writes = append(writes, "delete "+a.GetName())
			opts = append(opts, a.GetDeleteOptions())
		}
	}
	return writes, opts
}

// halt is err's halt kind ("" when err is no step error).
func halt(err error) string {
	var se *nodestep.StepError
	if errors.As(err, &se) {
		return se.Halt
	}
	return ""
}

// running sets a pod's status: Running, Ready or not.
func running(ready bool) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}
	}
}

// crashLooping makes a pod not Ready, its container in CrashLoopBackOff.
func crashLooping(p *corev1.Pod) {
	running(false)(p)
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "istio-proxy", RestartCount: 3,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
}

// unsettled is a copy of ds whose template its controller has not observed.
func unsettled(ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	ds = ds.DeepCopy()
	ds.Generation, ds.Status.ObservedGeneration = 3, 2
	return ds
}

// fakeTargets is a Targets answering views in turn (the last one again
// once all were read), each newer view an informer event on changes (set);
// err fails Target, onNodeErr OnNode, which otherwise answers live.
type fakeTargets struct {
	views     []model.TargetView
	err       error
	live      []*corev1.Pod
	onNodeErr error
	changes   *observe.Changes
	reads     int
}

func (f *fakeTargets) Target(ref v1alpha1.TargetRef) (model.TargetView, error) {
	if f.err != nil {
		return model.TargetView{Ref: ref}, f.err
	}
	tv := f.views[min(f.reads, len(f.views)-1)]
	f.reads++
	if f.reads < len(f.views) {
		f.changes.Broadcast()
	}
	return tv, nil
}

func (f *fakeTargets) OnNode(model.TargetView, string) ([]*corev1.Pod, int, error) {
	return f.live, 0, f.onNodeErr
}

// view is ztunnel's target view: found, newest hash "new", settled or not.
func view(settled bool) model.TargetView {
	return model.TargetView{Ref: fixture.ZtunnelTarget, Found: true, UID: fixture.SurgeDS.UID, NewestHash: "new", Settled: settled}
}

// isStepError says err is a nodestep halt (or skip).
func isStepError(err error) bool { return halt(err) != "" }

// sortedNames are m's keys, sorted.
func sortedNames[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
