package orchestrator

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// newRolloutInformer watches NodeRollouts through the typed client.
func newRolloutInformer(c v1alpha1.NodeRolloutInterface) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &v1alpha1.NodeRollout{}, 0, cache.Indexers{})
	_ = inf.SetTransform(trimCached) // only fails once started
	return inf
}

// trimCached is the transform of every informer the orchestrator runs: a
// cached copy drops its managedFields, which the orchestrator never reads
// and which are a large share of a pod's or node's size; a cache of a
// thousand nodes holds twelve thousand pods or more.
func trimCached(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}
