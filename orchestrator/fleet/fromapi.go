package fleet

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// SnapshotFromAPI builds the planner's snapshot with plain List calls (for
// the CLI's plan, which reads but never writes).
func SnapshotFromAPI(ctx context.Context, kube kubernetes.Interface, nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, error) {
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	nodes, pods, dss, revs := idx(), idx(), idx(), idx()
	nl, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return model.Snapshot{}, fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nl.Items {
		_ = nodes.Add(&nl.Items[i])
	}
	// Other tools' locks (locks.go): DaemonSets anywhere, SUC job pods. A
	// user the cluster lets read only the targets' namespaces gets a plan
	// without them (the orchestrator reads them cluster-wide), its targets
	// read in their namespaces.
	dl, err := kube.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	dsWide := err == nil // else the targets' DaemonSets are listed in their namespaces below
	switch {
	case apierrors.IsForbidden(err):
	case err != nil:
		return model.Snapshot{}, fmt.Errorf("listing DaemonSets for Kured's lock: %w", err)
	default:
		for i := range dl.Items {
			_ = dss.Add(&dl.Items[i])
		}
	}
	sl, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: locks.SUCPodSelector().String()})
	switch {
	case apierrors.IsForbidden(err):
	case err != nil:
		return model.Snapshot{}, fmt.Errorf("listing system-upgrade-controller pods: %w", err)
	default:
		for i := range sl.Items {
			_ = pods.Add(&sl.Items[i])
		}
	}
	seen := map[string]bool{}
	for _, t := range p.Targets {
		if seen[t.Namespace] {
			continue
		}
		seen[t.Namespace] = true
		if !dsWide {
			dl, err := kube.AppsV1().DaemonSets(t.Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return model.Snapshot{}, fmt.Errorf("listing DaemonSets in %s: %w", t.Namespace, err)
			}
			for i := range dl.Items {
				_ = dss.Add(&dl.Items[i])
			}
		}
		pl, err := kube.CoreV1().Pods(t.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return model.Snapshot{}, fmt.Errorf("listing pods in %s: %w", t.Namespace, err)
		}
		for i := range pl.Items {
			_ = pods.Add(&pl.Items[i])
		}
		rl, err := kube.AppsV1().ControllerRevisions(t.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return model.Snapshot{}, fmt.Errorf("listing ControllerRevisions in %s: %w", t.Namespace, err)
		}
		for i := range rl.Items {
			_ = revs.Add(&rl.Items[i])
		}
	}
	nodeLister, podCache := corelisters.NewNodeLister(nodes), observe.PodCache{PodLister: corelisters.NewPodLister(pods)}
	dsLister := appslisters.NewDaemonSetLister(dss)
	o := &Observer{
		Nodes: nodeLister, Pods: podCache, DaemonSets: dsLister,
		Targets: observe.Targets{DaemonSets: dsLister, Revisions: appslisters.NewControllerRevisionLister(revs), Pods: podCache},
		Claims:  &observe.Claims{}, Written: nothingWritten{},
		KuredClock: &observe.ServerClock{}, Now: time.Now,
	}
	return o.Snapshot(nr, p)
}

// nothingWritten is the CLI's: it writes no node, so every record is the
// one the API returned.
type nothingWritten struct{}

func (nothingWritten) Newest(string) *corev1.Node { return nil }
