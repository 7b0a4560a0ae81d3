package cluster

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListWatch is a ListWatch over a typed client's list and watch with
// opts' selectors applied to both: the simulator's and the demo's waits
// follow a watch of what they wait for, not a poll.
func ListWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), opts metav1.ListOptions) *cache.ListWatch {
	with := func(o metav1.ListOptions) metav1.ListOptions {
		o.LabelSelector, o.FieldSelector = opts.LabelSelector, opts.FieldSelector
		return o
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(ctx, with(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return watchFn(ctx, with(o))
		},
	}
}

// ByName selects one object by name.
func ByName(name string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
}
