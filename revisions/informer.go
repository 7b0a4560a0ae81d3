package revisions

import (
	"context"
	"errors"
	"fmt"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
)

// caches are the informers the controller reads instead of listing the API:
// every event wakes the live migrations, and a reconcile reads only memory.
type caches struct {
	factory    informers.SharedInformerFactory
	migrations cache.SharedIndexInformer
	informers  []cache.SharedIndexInformer
}

func newCaches(c *Controller) *caches {
	f := informers.NewSharedInformerFactory(c.cfg.Kube, 0)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.cfg.Migrations.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.cfg.Migrations.Watch(ctx, opts)
		},
	}
	cs := &caches{factory: f, migrations: cache.NewSharedIndexInformer(lw, &v1alpha1.RevisionMigration{}, 0, cache.Indexers{})}
	cs.informers = []cache.SharedIndexInformer{
		f.Core().V1().Namespaces().Informer(),
		f.Core().V1().Pods().Informer(),
		f.Apps().V1().Deployments().Informer(),
		f.Apps().V1().StatefulSets().Informer(),
		f.Apps().V1().DaemonSets().Informer(),
		f.Policy().V1().PodDisruptionBudgets().Informer(),
		f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer(),
	}
	return cs
}

// start runs the informers until ctx ends and waits for them to sync.
func (cs *caches) start(ctx context.Context) error {
	cs.factory.Start(ctx.Done())
	go cs.migrations.Run(ctx.Done())
	for typ, ok := range cs.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing the %v cache", typ)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), cs.migrations.HasSynced) {
		return errors.New("syncing the RevisionMigration cache")
	}
	return nil
}

// migration returns a copy of the cached RevisionMigration (nil when gone).
func (cs *caches) migration(name string) *v1alpha1.RevisionMigration {
	obj, ok, err := cs.migrations.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*v1alpha1.RevisionMigration).DeepCopy()
}

// migrationNames lists the cached RevisionMigrations' names.
func (cs *caches) migrationNames() []string { return cs.migrations.GetStore().ListKeys() }

// snapshot reads what one reconcile needs out of the caches. The objects are
// shallow copies, shared with the cache: a reconcile reads them and never
// writes to them.
func (cs *caches) snapshot(opts inventory.Options) (*snapshot, error) {
	f := cs.factory
	all := labels.Everything()
	deps, err := f.Apps().V1().Deployments().Lister().List(all)
	if err != nil {
		return nil, fmt.Errorf("listing cached deployments: %w", err)
	}
	sts, err := f.Apps().V1().StatefulSets().Lister().List(all)
	if err != nil {
		return nil, fmt.Errorf("listing cached statefulsets: %w", err)
	}
	dss, err := f.Apps().V1().DaemonSets().Lister().List(all)
	if err != nil {
		return nil, fmt.Errorf("listing cached daemonsets: %w", err)
	}
	pdbs, err := f.Policy().V1().PodDisruptionBudgets().Lister().List(all)
	if err != nil {
		return nil, fmt.Errorf("listing cached PDBs: %w", err)
	}
	pods, err := f.Core().V1().Pods().Lister().List(all)
	if err != nil {
		return nil, fmt.Errorf("listing cached pods: %w", err)
	}
	nss, err := f.Core().V1().Namespaces().Lister().List(all)
	if err != nil {
		return nil, fmt.Errorf("listing cached namespaces: %w", err)
	}
	whs, err := f.Admissionregistration().V1().MutatingWebhookConfigurations().Lister().List(all)
	if err != nil {
		return nil, fmt.Errorf("listing cached webhooks: %w", err)
	}
	o := inventory.Objects{
		Webhooks:    values[admv1.MutatingWebhookConfiguration](whs),
		Deployments: values[appsv1.Deployment](deps),
		Namespaces:  values[corev1.Namespace](nss),
		Pods:        values[corev1.Pod](pods),
	}
	return buildSnapshot(opts, o, values[appsv1.StatefulSet](sts), values[appsv1.DaemonSet](dss), values[policyv1.PodDisruptionBudget](pdbs))
}

// values dereferences cached objects (shallow copies: read only).
func values[T any, P interface{ *T }](in []P) []T {
	out := make([]T, len(in))
	for i, p := range in {
		out[i] = *p
	}
	return out
}
