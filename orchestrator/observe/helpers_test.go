package observe

import (
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
