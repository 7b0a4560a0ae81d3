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

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// swapExecutor is an executor over caches holding ds, its newest revision
// (hash "new") and pods, writing through kube.
func swapExecutor(t *testing.T, kube *fake.Clientset, ds *appsv1.DaemonSet, pods ...*corev1.Pod) *executor {
	t.Helper()
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	podIdx, dss, revs, nodes := idx(), idx(), idx(), idx()
	_ = dss.Add(ds)
	rev := fixture.SurgeRev.DeepCopy()
	rev.Namespace = ds.Namespace
	rev.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: nodestep.Ptr(true)}}
	_ = revs.Add(rev)
	for _, p := range pods {
		_ = podIdx.Add(p)
	}
	e := &executor{
		o:     &Orchestrator{cfg: Config{Now: time.Now}, log: zap.NewNop(), kube: kube},
		nodes: corelisters.NewNodeLister(nodes), pods: observe.PodCache{PodLister: corelisters.NewPodLister(podIdx)},
		dss: appslisters.NewDaemonSetLister(dss), revs: appslisters.NewControllerRevisionLister(revs),
	}
	e.targets = observe.Targets{DaemonSets: e.dss, Revisions: e.revs, Pods: e.pods}
	e.nodeWrites = &write.Nodes{Kube: e.o.kube, Cache: e.nodes, Changes: &e.changes, Now: e.o.cfg.Now, Log: zap.NewNop()}
	return e
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
		old := fixture.SurgePod("old", "old", 0)
		kube := fake.NewClientset(old.DeepCopy())
		forbid(kube)
		e := swapExecutor(t, kube, fixture.SurgeDS, old)
		err := e.swap(context.Background(), fixture.ZtunnelTarget, model.SwapReplace, "n1", time.Now().Add(time.Minute), time.Minute)
		var se *nodestep.StepError
		if !errors.As(err, &se) || se.Halt != nodestep.HaltSwapFailed || !strings.Contains(se.Reason, "denied") {
			t.Fatalf("replace swap with a forbidden delete: %v; want a %s halt with the API's reason", err, nodestep.HaltSwapFailed)
		}
	})
	t.Run("surge", func(t *testing.T) {
		old, b := fixture.SurgePod("old", "old", 0), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)
		kube := fake.NewClientset(old.DeepCopy(), b.DeepCopy())
		forbid(kube)
		e := swapExecutor(t, kube, fixture.SurgeDS, old, b)
		err := e.swap(context.Background(), fixture.ZtunnelTarget, model.SwapSurge, "n1", time.Now().Add(time.Minute), time.Minute)
		var se *nodestep.StepError
		if !errors.As(err, &se) || se.Halt != nodestep.HaltSwapFailed || !strings.Contains(se.Reason, "denied") {
			t.Fatalf("surge swap with a forbidden delete: %v; want a %s halt with the API's reason", err, nodestep.HaltSwapFailed)
		}
	})
}
