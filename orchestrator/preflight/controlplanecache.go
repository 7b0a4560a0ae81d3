package preflight

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	admissioninformers "k8s.io/client-go/informers/admissionregistration/v1"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	"k8s.io/client-go/kubernetes"
	admissionlisters "k8s.io/client-go/listers/admissionregistration/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// ControlPlaneCache watches what preflight's skew check reads: the istiod
// Deployments in the Istio namespace and the revision-tag webhooks. It is
// not part of the caches the reconcile loop waits for, so an RBAC that
// refuses the watch does not stall the orchestrator: preflight then lists,
// and the refusal halts the node with its reason.
type ControlPlaneCache struct {
	istiods  cache.SharedIndexInformer
	webhooks cache.SharedIndexInformer
	deps     appslisters.DeploymentLister
	tags     admissionlisters.MutatingWebhookConfigurationLister
	ns       string
}

func NewControlPlaneCache(kube kubernetes.Interface, istioNamespace string) *ControlPlaneCache {
	c := &ControlPlaneCache{ns: istioNamespace}
	c.istiods = appsinformers.NewFilteredDeploymentInformer(kube, istioNamespace, 0,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(o *metav1.ListOptions) { o.LabelSelector = inventory.DefaultIstiodSelector })
	c.webhooks = admissioninformers.NewFilteredMutatingWebhookConfigurationInformer(kube, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = istio.LabelTag })
	c.deps = appslisters.NewDeploymentLister(c.istiods.GetIndexer())
	c.tags = admissionlisters.NewMutatingWebhookConfigurationLister(c.webhooks.GetIndexer())
	return c
}

// Run starts both informers; they stop with stop.
func (c *ControlPlaneCache) Run(stop <-chan struct{}) {
	go c.istiods.Run(stop)
	go c.webhooks.Run(stop)
}

// Synced says whether both informers have synced: the control plane is then read from them, with no request.
func (c *ControlPlaneCache) Synced() bool {
	return c.istiods.HasSynced() && c.webhooks.HasSynced()
}

// observe builds the control plane from the caches.
func (c *ControlPlaneCache) observe(now time.Time) (controlPlane, error) {
	cp := controlPlane{at: now, tags: map[string]string{}}
	whs, err := c.tags.List(labels.Everything())
	if err != nil {
		return cp, fmt.Errorf("reading revision tags from the cache: %w", err)
	}
	for _, wh := range whs {
		cp.tags[wh.Labels[istio.LabelTag]] = wh.Labels[istio.LabelRev]
	}
	ptrs, err := c.deps.Deployments(c.ns).List(labels.Everything())
	if err != nil {
		return cp, fmt.Errorf("reading istiod deployments from the cache: %w", err)
	}
	deps := make([]appsv1.Deployment, len(ptrs))
	for i, d := range ptrs {
		deps[i] = *d
	}
	cp.revisions = inventory.RevisionsOf(deps, cp.tags)
	return cp, nil
}
