package orchestrator

import (
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/prepull"
)

// nodeView is the named node of a snapshot.
func nodeView(t *testing.T, s model.Snapshot, name string) model.NodeView {
	t.Helper()
	for _, n := range s.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("snapshot has no node %s", name)
	return model.NodeView{}
}

// TestSnapshotReadsTheCachesAndOwnWrites: the planner's snapshot holds each
// node's state read the one way (this process's claim, then its own newest
// write, then the cache's record, then status), the targets' pods (a live
// pod over a terminating one; other owners' and unbound pods left out), who
// else holds a node, its pre-pull pod, and whether resume was asked.
func TestSnapshotReadsTheCachesAndOwnWrites(t *testing.T) {
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) {
		nr.Annotations = map[string]string{model.AnnotationResumeToken: "t2", model.AnnotationAckedResumeToken: "t1"}
		nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: "n5", State: v1alpha1.NodeDone}}
	})
	objs := cluster(fixture.NewHash, "n1", "n2", "n3", "n4", "n5")
	nodeIn(objs, "n1").Annotations = recordOf(nr, v1alpha1.NodeDrain)
	nodeIn(objs, "n4").Annotations = recordOf(nr, v1alpha1.NodePending)
	other := rollout("other", nil)
	nodeIn(objs, "n5").Annotations = recordOf(other, v1alpha1.NodeSoak) // another rollout's record: status decides
	// n1's ztunnel: a terminating pod at the old hash beside the live one.
	old := targetPod(ztunnelDS, "n1", fixture.OldHash)
	old.Name, old.UID = "ztunnel-n1-old", "old-uid"
	old.DeletionTimestamp = &metav1.Time{Time: t0}
	unbound := targetPod(ztunnelDS, "", fixture.OldHash)
	unbound.Name = "ztunnel-pending"
	stranger := targetPod(ztunnelDS, "n2", fixture.OldHash)
	stranger.Name, stranger.OwnerReferences = "lookalike", []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ztunnel", UID: "someone-else"}}
	// Kured holds n2; an SUC job holds n3; the pre-pull pods of n1 (one per
	// target), ztunnel's alone of n3, and a deleted one of n2.
	kured := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system",
		Annotations: map[string]string{locks.AnnotationKured: `{"nodeID":"n2"}`}}}
	suc := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "apply-os", Namespace: "system-upgrade",
		Labels: map[string]string{locks.LabelSUCPlan: "os", locks.LabelSUCNode: "n3"}}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	pullPod := func(node, target string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: prepull.Name("r", node, target), Namespace: istioNS, Labels: map[string]string{model.LabelPrepull: "r", model.LabelPrepullTarget: target}},
			Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "pull-0"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RunContainerError"}}}}}}
	}
	gone := pullPod("n2", "ztunnel")
	gone.DeletionTimestamp = &metav1.Time{Time: t0}
	e := newEnv(t, append(objs, old, unbound, stranger, kured, suc, pullPod("n1", "istio-cni-node"), pullPod("n1", "ztunnel"), pullPod("n3", "ztunnel"), gone, nr)...)

	// This process has claimed n3, and written n2's newest record itself
	// (the cache has not caught up).
	e.ex.claims.Claim("r", "n3")
	if _, err := e.ex.nodeWrites.Patch(e.ctx, "n2", "", nodestep.Record{}.WithStep("r", nr.UID, v1alpha1.NodeCordon, t0).Patch(nodestep.Record{}), nil); err != nil {
		t.Fatal(err)
	}

	p := model.MustPolicy(nr.Spec)
	s, err := e.ex.observer.Snapshot(e.stored("r"), p)
	if err != nil {
		t.Fatal(err)
	}
	if !s.ResumeRequested {
		t.Error("a new resume token was not seen")
	}
	if len(s.Targets) != 2 || !s.Targets[1].Found || s.Targets[1].NewestHash != fixture.NewHash || len(s.Targets[1].Images) != 1 {
		t.Errorf("targets %+v, want both found at %s with their images", s.Targets, fixture.NewHash)
	}
	for _, tc := range []struct {
		node    string
		state   v1alpha1.NodeState
		retried bool
	}{
		{"n1", v1alpha1.NodeDrain, false},  // the cache's record
		{"n2", v1alpha1.NodeCordon, false}, // this process's newer write
		{"n3", nodestep.Claimed, false},    // claimed, no record yet
		{"n4", v1alpha1.NodePending, true}, // a record of Pending: started before
		{"n5", v1alpha1.NodeDone, false},   // another rollout's record: status
	} {
		n := nodeView(t, s, tc.node)
		if n.State != tc.state || n.Retried != tc.retried {
			t.Errorf("%s: state %s retried %v, want %s %v", tc.node, n.State, n.Retried, tc.state, tc.retried)
		}
	}
	n1 := nodeView(t, s, "n1")
	if zt := n1.Pods[istioNS+"/ztunnel"]; zt.Name != "ztunnel-n1" || zt.Terminating || zt.Hash != fixture.NewHash {
		t.Errorf("n1 ztunnel %+v, want the live pod", zt)
	}
	if len(n1.Pods) != 2 || !n1.Ready || n1.Zone != "zone-a" {
		t.Errorf("n1 %+v, want Ready in zone-a with both targets' pods", n1)
	}
	if !n1.Prepull.Exists || n1.Prepull.Missing || !n1.Prepull.Pulled {
		t.Errorf("n1 pre-pull %+v, want both targets' pods, pulled", n1.Prepull)
	}
	n2 := nodeView(t, s, "n2")
	if n2.Pods[istioNS+"/ztunnel"].Name != "ztunnel-n2" {
		t.Errorf("n2 ztunnel %+v: a pod of another owner was read as the target's", n2.Pods[istioNS+"/ztunnel"])
	}
	if !strings.Contains(n2.HeldBy, "Kured") || n2.Prepull.Exists {
		t.Errorf("n2 held by %q, pre-pull %+v: want Kured's lock and no (deleted) pre-pull pod", n2.HeldBy, n2.Prepull)
	}
	n3 := nodeView(t, s, "n3")
	if !strings.Contains(n3.HeldBy, "system-upgrade-controller plan os") {
		t.Errorf("n3 held by %q, want the SUC plan", n3.HeldBy)
	}
	if !n3.Prepull.Exists || !n3.Prepull.Missing || n3.Prepull.Pulled {
		t.Errorf("n3 pre-pull %+v, want ztunnel's pod (pulled) with istio-cni's missing: not pulled", n3.Prepull)
	}
	if len(s.UnreadableLocks) != 0 {
		t.Errorf("unreadable locks %v", s.UnreadableLocks)
	}
}

// TestSnapshotUnreadableKuredLock: a Kured lock that cannot be read is
// reported, so the planner starts no node (fail closed).
func TestSnapshotUnreadableKuredLock(t *testing.T) {
	kured := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system",
		Annotations: map[string]string{locks.AnnotationKured: `{not json`}}}
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), kured, rollout("r", nil))...)
	s, err := e.ex.observer.Snapshot(e.stored("r"), model.MustPolicy(e.stored("r").Spec))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.UnreadableLocks) != 1 || !strings.Contains(s.UnreadableLocks[0], "kube-system/kured") {
		t.Errorf("unreadable locks %v, want kube-system/kured's", s.UnreadableLocks)
	}
	// And the pass starts nothing for it.
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if got := e.stored("r").Status; got.Phase != v1alpha1.PhaseProgressing || e.ex.claims.Holds("r") {
		t.Errorf("phase %s, claims %v: want Progressing with no node started", got.Phase, e.ex.claims.Holds("r"))
	}
}

var errCache = errors.New("cache broken")

// Listers that fail, for the snapshot's error paths.
type (
	failingNodes struct{ corelisters.NodeLister }
	failingDSs   struct {
		appslisters.DaemonSetLister
		list, get bool
	}
	failingDSNamespace struct {
		appslisters.DaemonSetNamespaceLister
	}
	failingPods struct {
		corelisters.PodLister
		all, namespaced, selected bool
	}
	failingPodNamespace struct {
		corelisters.PodNamespaceLister
		namespaced, selected bool
	}
)

func (failingNodes) List(labels.Selector) ([]*corev1.Node, error) { return nil, errCache }

func (f failingDSs) List(s labels.Selector) ([]*appsv1.DaemonSet, error) {
	if f.list {
		return nil, errCache
	}
	return f.DaemonSetLister.List(s)
}

func (f failingDSs) DaemonSets(ns string) appslisters.DaemonSetNamespaceLister {
	if f.get {
		return failingDSNamespace{f.DaemonSetLister.DaemonSets(ns)}
	}
	return f.DaemonSetLister.DaemonSets(ns)
}

func (failingDSNamespace) Get(string) (*appsv1.DaemonSet, error) { return nil, errCache }

func (f failingPods) List(s labels.Selector) ([]*corev1.Pod, error) {
	if f.all {
		return nil, errCache
	}
	return f.PodLister.List(s)
}

func (f failingPods) Pods(ns string) corelisters.PodNamespaceLister {
	return failingPodNamespace{f.PodLister.Pods(ns), f.namespaced, f.selected}
}

func (f failingPodNamespace) List(s labels.Selector) ([]*corev1.Pod, error) {
	if (s.Empty() && f.namespaced) || (!s.Empty() && f.selected) {
		return nil, errCache
	}
	return f.PodNamespaceLister.List(s)
}

// TestSnapshotCacheErrors: a cache that cannot be read fails the snapshot
// (and so the pass) with what could not be read; nothing is planned from a
// partial view.
func TestSnapshotCacheErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(o *fleet.Observer)
		want   string
	}{
		{"nodes", func(o *fleet.Observer) { o.Nodes = failingNodes{o.Nodes} }, "listing nodes"},
		{"target", func(o *fleet.Observer) { o.Targets.DaemonSets = failingDSs{DaemonSetLister: o.DaemonSets, get: true} }, "reading DaemonSet istio-system/istio-cni-node"},
		{"target pods", func(o *fleet.Observer) { o.Pods.PodLister = failingPods{PodLister: o.Pods.PodLister, namespaced: true} }, "listing pods in istio-system"},
		{"kured", func(o *fleet.Observer) { o.DaemonSets = failingDSs{DaemonSetLister: o.DaemonSets, list: true} }, "listing DaemonSets for Kured's lock"},
		{"suc", func(o *fleet.Observer) { o.Pods.PodLister = failingPods{PodLister: o.Pods.PodLister, all: true} }, "listing system-upgrade-controller pods"},
		{"prepull", func(o *fleet.Observer) { o.Pods.PodLister = failingPods{PodLister: o.Pods.PodLister, selected: true} }, "listing pre-pull pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", nil))...)
			tc.break_(e.ex.observer)
			err := e.pass("r")
			if !errors.Is(err, errCache) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q wrapping the cache's error", err, tc.want)
			}
			if e.count("updatestatus") != 0 || len(e.patched("nodes")) != 0 {
				t.Error("the pass acted on a partial view")
			}
		})
	}
	t.Run("overlap", func(t *testing.T) {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", nil), rollout("s", nil))...)
		e.ex.observer.Nodes = failingNodes{e.ex.nodes}
		if err := e.ex.observer.Overlapping(e.stored("r"), model.MustPolicy(e.stored("r").Spec)); !errors.Is(err, errCache) {
			t.Fatalf("err %v, want the cache's error", err)
		}
	})
}

// TestSnapshotFromAPI: the CLI's snapshot lists what the caches would hold
// and plans the same; a user who may not list other tools' locks
// cluster-wide (Forbidden) still gets a plan, any other error fails it.
func TestSnapshotFromAPI(t *testing.T) {
	nr := rollout("r", nil)
	p := model.MustPolicy(nr.Spec)
	objs := cluster(fixture.OldHash, "n1", "n2")
	nodeIn(objs, "n1").Annotations = recordOf(nr, v1alpha1.NodeSoak)
	kured := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "kured", Namespace: "kube-system",
		Annotations: map[string]string{locks.AnnotationKured: `{"nodeID":"n2"}`}}}
	objs = append(objs, kured)
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "x"}, "", errors.New("RBAC"))
	broken := apierrors.NewInternalError(errors.New("etcd down"))
	fail := func(verb, resource string, match func(k8stesting.Action) bool, err error) func(*fake.Clientset) {
		return func(c *fake.Clientset) {
			c.PrependReactor(verb, resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
				if match == nil || match(a) {
					return true, nil, err
				}
				return false, nil, nil
			})
		}
	}
	allNS := func(a k8stesting.Action) bool { return a.GetNamespace() == "" }
	inNS := func(a k8stesting.Action) bool { return a.GetNamespace() == istioNS }
	for _, tc := range []struct {
		name    string
		react   func(*fake.Clientset)
		want    string // error
		kuredOK bool   // the Kured lock was read
		dsOK    bool   // the targets' DaemonSets were read
	}{
		{"all readable", nil, "", true, true},
		// Refused cluster-wide, the targets are listed in their namespace.
		{"daemonsets forbidden", fail("list", "daemonsets", allNS, forbidden), "", false, true},
		{"daemonsets forbidden, then broken in the namespace", func(c *fake.Clientset) {
			fail("list", "daemonsets", inNS, broken)(c)
			fail("list", "daemonsets", allNS, forbidden)(c)
		}, "listing DaemonSets in istio-system", false, false},
		{"suc pods forbidden", fail("list", "pods", allNS, forbidden), "", true, true},
		{"nodes", fail("list", "nodes", nil, broken), "listing nodes", false, false},
		{"daemonsets", fail("list", "daemonsets", nil, broken), "listing DaemonSets for Kured's lock", false, false},
		{"suc pods", fail("list", "pods", allNS, broken), "listing system-upgrade-controller pods", false, false},
		{"target pods", fail("list", "pods", inNS, broken), "listing pods in istio-system", false, false},
		{"revisions", fail("list", "controllerrevisions", nil, broken), "listing ControllerRevisions in istio-system", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kobjs []runtime.Object
			for _, o := range objs {
				kobjs = append(kobjs, o.DeepCopyObject())
			}
			kube := fake.NewClientset(kobjs...)
			if tc.react != nil {
				tc.react(kube)
			}
			s, err := fleet.SnapshotFromAPI(t.Context(), kube, nr, p)
			if tc.want != "" {
				if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q wrapping the API's error", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Nodes) != 2 || len(s.Targets) != 2 {
				t.Fatalf("snapshot %d nodes, %d targets, want 2 and 2", len(s.Nodes), len(s.Targets))
			}
			n1, n2 := nodeView(t, s, "n1"), nodeView(t, s, "n2")
			if n1.State != v1alpha1.NodeSoak {
				t.Errorf("n1 %s, want Soak from its record", n1.State)
			}
			if tc.dsOK && (s.Targets[0].NewestHash != fixture.NewHash || n1.Pods[istioNS+"/ztunnel"].Hash != fixture.OldHash) {
				t.Errorf("targets %+v, n1 pods %+v: want the targets at %s and n1's old ztunnel pod", s.Targets, n1.Pods, fixture.NewHash)
			}
			if (n2.HeldBy != "") != tc.kuredOK {
				t.Errorf("n2 held by %q, want Kured's lock read: %v", n2.HeldBy, tc.kuredOK)
			}
		})
	}
}

// TestOverlappingNeedsTwoRollouts: one rollout alone never reads the nodes
// for an overlap.
func TestOverlappingNeedsTwoRollouts(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", nil))...)
	e.ex.observer.Nodes = failingNodes{e.ex.nodes}
	if err := e.ex.observer.Overlapping(e.stored("r"), model.MustPolicy(e.stored("r").Spec)); err != nil {
		t.Fatalf("err %v, want none without a second rollout", err)
	}
}

// TestPreflightSkewIsWired: the worker's Skew is preflight's,
// over the executor's DaemonSet cache and clientset: a target missing from
// the cache halts the node, and an API that refuses to show the control
// plane halts it with the refusal.
func TestPreflightSkewIsWired(t *testing.T) {
	p := model.MustPolicy(v1alpha1.NodeRolloutSpec{})
	t.Run("target gone", func(t *testing.T) {
		e := newEnv(t)
		var se *nodestep.StepError
		if err := e.ex.worker.Skew.Check(e.ctx, p, "n1"); !errors.As(err, &se) || !strings.Contains(se.Reason, "DaemonSet istio-system/istio-cni-node disappeared") {
			t.Fatalf("err %v, want a halt: the DaemonSet disappeared", err)
		}
	})
	t.Run("control plane forbidden", func(t *testing.T) {
		e := newEnv(t, cluster(fixture.OldHash)...)
		e.kube.PrependReactor("list", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "mutatingwebhookconfigurations"}, "", errors.New("RBAC"))
		})
		var se *nodestep.StepError
		if err := e.ex.worker.Skew.Check(e.ctx, p, "n1"); !errors.As(err, &se) || !strings.Contains(se.Reason, "cannot check the version skew") {
			t.Fatalf("err %v, want a halt: cannot check the version skew", err)
		}
	})
	t.Run("api error", func(t *testing.T) {
		e := newEnv(t, cluster(fixture.OldHash)...)
		e.kube.PrependReactor("list", "mutatingwebhookconfigurations", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "mutatingwebhookconfigurations"}, "list", 1)
		})
		var se *nodestep.StepError
		err := e.ex.worker.Skew.Check(e.ctx, p, "n1")
		if errors.As(err, &se) || !apierrors.IsServerTimeout(err) {
			t.Fatalf("err %v, want the timeout returned for a retry, not a halt", err)
		}
	})
}

// TestExecutorWakeups: poke, slotFreed and changed never block, and each
// leaves one wakeup for the loop however often it is called; changed also
// wakes the steps waiting on the caches.
func TestExecutorWakeups(t *testing.T) {
	e := newEnv(t)
	waiting := e.ex.changes.Wait()
	for range 3 {
		e.ex.poke()
		e.ex.slotFreed("a")
	}
	if len(e.ex.kick) != 1 || len(e.ex.freed) != 1 {
		t.Errorf("kick %d freed %d, want one of each pending", len(e.ex.kick), len(e.ex.freed))
	}
	<-e.ex.kick
	e.ex.changed()
	select {
	case <-waiting:
	default:
		t.Error("changed did not wake a step waiting on the caches")
	}
	if len(e.ex.kick) != 1 {
		t.Error("changed did not kick the loop")
	}
}
