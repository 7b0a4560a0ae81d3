package orchestrator

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

var ztunnelTarget = v1alpha1.TargetRef{Namespace: "istio-system", Name: "ztunnel", Kind: v1alpha1.TargetZtunnel}

// outOfCPU is the bridge as the kubelet leaves a pod it rejects at admission.
func outOfCPU(p *corev1.Pod) {
	p.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfcpu",
		Message: "Pod was rejected: Node didn't have enough resource: cpu, requested: 200, used: 3900, capacity: 4000"}
}

// TestSurgeFailedBridgeHalts: #27 finding 2. A bridge the kubelet rejects
// (phase Failed, OutOfcpu) ends the swap with ErrSurgeBridgeFailed and its
// reason, at once and well within the swap timeout, and the failed bridge
// is deleted; the old pod is never touched. Both views: one that shows the
// Failed pod, and one that drops it (the create then meets AlreadyExists,
// which used to count as success: one create a second, forever).
func TestSurgeFailedBridgeHalts(t *testing.T) {
	for _, hide := range []bool{false, true} {
		name := map[bool]string{false: "the view shows the Failed bridge", true: "the view drops Failed pods"}[hide]
		t.Run(name, func(t *testing.T) {
			old := surgePod("old", "old", 0)
			b := BridgePod(surgeDS, surgeRev, "n1", old)
			b.UID, b.CreationTimestamp = "b-uid", metav1.NewTime(surgeT0.Add(time.Minute))
			outOfCPU(b)
			kube := fake.NewClientset(old.DeepCopy(), b.DeepCopy())
			observe := func(ctx context.Context) (SurgeInput, error) {
				pl, err := kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{})
				if err != nil {
					return SurgeInput{}, err
				}
				var pods []*corev1.Pod
				for i := range pl.Items {
					if hide && pl.Items[i].Status.Phase == corev1.PodFailed {
						continue
					}
					pods = append(pods, &pl.Items[i])
				}
				return SurgeInput{DaemonSet: surgeDS, Revision: surgeRev, Node: "n1", Pods: pods}, nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s := Surger{Kube: kube, Poll: time.Millisecond, Observe: observe, BridgeTimeout: 5 * time.Minute}
			_, err := s.Swap(ctx, ztunnelTarget, "n1", time.Now().Add(5*time.Minute))
			if !errors.Is(err, ErrSurgeBridgeFailed) || !strings.Contains(err.Error(), "OutOfcpu") {
				t.Fatalf("swap with a rejected bridge: %v; want ErrSurgeBridgeFailed naming OutOfcpu", err)
			}
			if _, gerr := kube.CoreV1().Pods("istio-system").Get(ctx, b.Name, metav1.GetOptions{}); !apierrors.IsNotFound(gerr) {
				t.Errorf("the failed bridge is still there: %v", gerr)
			}
			if _, gerr := kube.CoreV1().Pods("istio-system").Get(ctx, "old", metav1.GetOptions{}); gerr != nil {
				t.Errorf("the old pod: %v", gerr)
			}
			if got := SurgeLeftovers(SurgeInput{DaemonSet: surgeDS, Revision: surgeRev, Node: "n1", Pods: []*corev1.Pod{old, b}}); len(got) != 1 || got[0].Name != b.Name {
				t.Errorf("leftovers %v; want the Failed bridge", got)
			}
		})
	}
}

// TestSurgeRepeatedCreatePastTheDeadlineTimesOut: a bridge this swap
// created that the view never shows is not waited for forever: the
// deadline holds on the create branch too.
func TestSurgeRepeatedCreatePastTheDeadlineTimesOut(t *testing.T) {
	old := surgePod("old", "old", 0)
	kube := fake.NewClientset(old.DeepCopy())
	now := surgeT0.Add(time.Hour)
	s := Surger{Kube: kube, Poll: time.Millisecond, Now: func() time.Time { return now },
		Observe: func(context.Context) (SurgeInput, error) {
			return SurgeInput{DaemonSet: surgeDS, Revision: surgeRev, Node: "n1", Pods: []*corev1.Pod{old}}, nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		<-time.After(50 * time.Millisecond)
		now = now.Add(ownWriteWait + time.Minute) // past the deadline and the wait for its own write
	}()
	_, err := s.Swap(ctx, ztunnelTarget, "n1", now.Add(time.Second))
	if !errors.Is(err, ErrSurgeTimeout) {
		t.Fatalf("swap whose bridge never shows: %v; want ErrSurgeTimeout", err)
	}
}

// swapExecutor is an executor over caches holding ds, its newest revision
// (hash "new") and pods, writing through kube.
func swapExecutor(t *testing.T, kube *fake.Clientset, ds *appsv1.DaemonSet, pods ...*corev1.Pod) *executor {
	t.Helper()
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	podIdx, dss, revs, nodes := idx(), idx(), idx(), idx()
	_ = dss.Add(ds)
	rev := surgeRev.DeepCopy()
	rev.Namespace = ds.Namespace
	rev.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: nodestep.Ptr(true)}}
	_ = revs.Add(rev)
	for _, p := range pods {
		_ = podIdx.Add(p)
	}
	return &executor{
		o:     &Orchestrator{cfg: Config{Now: time.Now}, log: zap.NewNop(), kube: kube},
		nodes: corelisters.NewNodeLister(nodes), pods: PodCache{PodLister: corelisters.NewPodLister(podIdx)},
		dss: appslisters.NewDaemonSetLister(dss), revs: appslisters.NewControllerRevisionLister(revs),
	}
}

// TestSwapForbiddenDeleteHalts: #27 finding 3. A pod delete the API server
// refuses (403 Forbidden: RBAC, an admission policy) during a swap ends the
// node's step with a halt that carries the API's reason, for both swap
// kinds; it used to be a plain error, the worker retried on every pass and
// the node read Progressing forever.
func TestSwapForbiddenDeleteHalts(t *testing.T) {
	forbid := func(kube *fake.Clientset) {
		kube.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, a.(k8stesting.DeleteAction).GetName(),
				errors.New(`ValidatingAdmissionPolicy 'guard' denied request`))
		})
	}
	t.Run("replace", func(t *testing.T) {
		old := surgePod("old", "old", 0)
		kube := fake.NewClientset(old.DeepCopy())
		forbid(kube)
		e := swapExecutor(t, kube, surgeDS, old)
		err := e.swap(context.Background(), ztunnelTarget, model.SwapReplace, "n1", time.Now().Add(time.Minute), time.Minute)
		var se *nodestep.StepError
		if !errors.As(err, &se) || se.Halt != nodestep.HaltSwapFailed || !strings.Contains(se.Reason, "denied") {
			t.Fatalf("replace swap with a forbidden delete: %v; want a %s halt with the API's reason", err, nodestep.HaltSwapFailed)
		}
	})
	t.Run("surge", func(t *testing.T) {
		old, b := surgePod("old", "old", 0), surgePod("b", "new", time.Hour, bridged)
		kube := fake.NewClientset(old.DeepCopy(), b.DeepCopy())
		forbid(kube)
		e := swapExecutor(t, kube, surgeDS, old, b)
		err := e.swap(context.Background(), ztunnelTarget, model.SwapSurge, "n1", time.Now().Add(time.Minute), time.Minute)
		var se *nodestep.StepError
		if !errors.As(err, &se) || se.Halt != nodestep.HaltSwapFailed || !strings.Contains(se.Reason, "denied") {
			t.Fatalf("surge swap with a forbidden delete: %v; want a %s halt with the API's reason", err, nodestep.HaltSwapFailed)
		}
	})
}
