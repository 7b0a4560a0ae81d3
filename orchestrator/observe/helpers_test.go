package observe

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// newIndexer is an informer-like indexer holding objs, indexed by namespace
// and (pods) by node, as the orchestrator's informers are.
func newIndexer(objs ...any) cache.Indexer {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, podNodeIndex: podNodeIndexFunc})
	for _, o := range objs {
		if err := idx.Add(o); err != nil {
			panic(err)
		}
	}
	return idx
}

// The failing listers answer every read with err: a cache read that fails
// (listers built on an indexer never do, but the code must not assume it).
type failingDaemonSets struct {
	appslisters.DaemonSetLister
	err error
}

func (f failingDaemonSets) DaemonSets(string) appslisters.DaemonSetNamespaceLister {
	return failingDaemonSetsNS{err: f.err}
}

type failingDaemonSetsNS struct {
	appslisters.DaemonSetNamespaceLister
	err error
}

func (f failingDaemonSetsNS) Get(string) (*appsv1.DaemonSet, error) { return nil, f.err }

type failingRevisions struct {
	appslisters.ControllerRevisionLister
	err error
}

func (f failingRevisions) ControllerRevisions(string) appslisters.ControllerRevisionNamespaceLister {
	return failingRevisionsNS{err: f.err}
}

type failingRevisionsNS struct {
	appslisters.ControllerRevisionNamespaceLister
	err error
}

func (f failingRevisionsNS) List(labels.Selector) ([]*appsv1.ControllerRevision, error) {
	return nil, f.err
}

type failingPods struct {
	corelisters.PodLister
	err error
}

func (f failingPods) List(labels.Selector) ([]*corev1.Pod, error) { return nil, f.err }

type failingNodes struct {
	corelisters.NodeLister
	err error
}

func (f failingNodes) List(labels.Selector) ([]*corev1.Node, error) { return nil, f.err }
