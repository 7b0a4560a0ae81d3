package preflight

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// controlPlaneTTL is how long one observation of the istiod revisions and
// tags serves the preflights that ask for it: the nodes of a wave start
// together and share one observation instead of two lists each.
const controlPlaneTTL = 2 * time.Second

// templateVersion is what a target's current (new) pod template will run on
// every node: the image tag of its first container and its istio.io/rev label.
type templateVersion struct {
	Ref      v1alpha1.TargetRef
	Image    string
	Revision string
}

// controlPlane is the istiod revisions and the revision tags.
type controlPlane struct {
	at        time.Time
	revisions []inventory.Revision
	tags      map[string]string
}

// checkSkew refuses a node's swap when the target templates would put
// ztunnel or istio-cni outside the supported skew with the istiod that
// serves them, as package skew defines it (the table `nodewise skew`
// prints). It is pure: the caller observes the templates and the control
// plane. A version that cannot be read from a template's image is refused
// too: a skew that cannot be shown legal is not assumed legal.
func checkSkew(policy skew.Policy, node string, targets []templateVersion, cp controlPlane) error {
	n := inventory.Node{Name: node}
	var cniRev string
	for _, t := range targets {
		var comp skew.Component
		switch nodestep.SwapState(t.Ref) {
		case v1alpha1.NodeSwapZtunnel:
			comp = skew.Ztunnel
		case v1alpha1.NodeSwapCNI:
			comp = skew.CNI
		default:
			continue // not a component the skew policy knows
		}
		tag := inventory.ImageTag(t.Image)
		if _, err := skew.ParseVersion(tag); err != nil {
			return fmt.Errorf("cannot check the version skew of %s/%s: its image %q has no readable version tag (%v)", t.Ref.Namespace, t.Ref.Name, t.Image, err)
		}
		if comp == skew.Ztunnel {
			n.Ztunnel, n.ZtunnelRevision = tag, t.Revision
		} else {
			n.CNI, cniRev = tag, t.Revision
		}
	}
	if n.Ztunnel == "" {
		// istio-cni alone: it follows the istiod of its own revision label.
		n.ZtunnelRevision = cniRev
	}
	obs, err := skew.FromInventory(inventory.Inventory{Revisions: cp.revisions, Tags: cp.tags, Nodes: []inventory.Node{n}})
	if err != nil {
		return err
	}
	v := skew.Check(policy, obs)
	if len(v) == 0 {
		return nil
	}
	reasons := make([]string, len(v))
	for i, x := range v {
		reasons[i] = x.Reason
	}
	return fmt.Errorf("the new templates break the supported version skew: %s", strings.Join(reasons, "; "))
}

// Skew is preflight's version-skew check of a node's new templates against
// the control plane that will serve them.
type Skew struct {
	Kube           kubernetes.Interface
	DaemonSets     appslisters.DaemonSetLister
	Policy         skew.Policy
	IstioNamespace string
	Now            func() time.Time
	// Cache serves the control plane from informers once synced (nil: listed, at most once per controlPlaneTTL).
	Cache *ControlPlaneCache

	mu sync.Mutex    // guards cp
	cp *controlPlane // the last observation listed
}

// Check observes the target templates and the control plane, then
// checks them. A skew outside the policy halts the node (it is uncordoned:
// nothing was swapped), and so does an API refusal to show the control plane
// (RBAC); another API error is returned for the worker to retry.
func (c *Skew) Check(ctx context.Context, p model.Policy, node string) error {
	var targets []templateVersion
	for _, ref := range p.Targets {
		ds, err := c.DaemonSets.DaemonSets(ref.Namespace).Get(ref.Name)
		if apierrors.IsNotFound(err) {
			return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: DaemonSet %s/%s disappeared", ref.Namespace, ref.Name)
		}
		if err != nil {
			return fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		t := templateVersion{Ref: ref, Revision: ds.Spec.Template.Labels[istio.LabelRev]}
		if cs := ds.Spec.Template.Spec.Containers; len(cs) > 0 {
			t.Image = cs[0].Image
		}
		targets = append(targets, t)
	}
	cp, err := c.controlPlane(ctx)
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: cannot check the version skew: %v", err)
	}
	if err != nil {
		return err
	}
	if err := checkSkew(c.Policy, node, targets, cp); err != nil {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: %v", err)
	}
	return nil
}

// controlPlane observes the istiod revisions and revision tags: from the
// informer caches once they have synced (no request on a node's critical
// path), else by listing them, at most once per controlPlaneTTL. The list is
// also what turns an RBAC refusal into a halt: a forbidden watch never syncs.
func (c *Skew) controlPlane(ctx context.Context) (controlPlane, error) {
	now := c.Now()
	if c.Cache != nil && c.Cache.Synced() {
		return c.Cache.observe(now)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cp != nil && now.Sub(c.cp.at) < controlPlaneTTL && !now.Before(c.cp.at) {
		return *c.cp, nil
	}
	cp := controlPlane{at: now, tags: map[string]string{}}
	whs, err := c.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelTag})
	if err != nil {
		return cp, fmt.Errorf("listing revision tags: %w", err)
	}
	for _, wh := range whs.Items {
		cp.tags[wh.Labels[istio.LabelTag]] = wh.Labels[istio.LabelRev]
	}
	if cp.revisions, err = inventory.Revisions(ctx, c.Kube, inventory.Options{IstioNamespace: c.IstioNamespace}, cp.tags); err != nil {
		return cp, err
	}
	c.cp = &cp
	return cp, nil
}
