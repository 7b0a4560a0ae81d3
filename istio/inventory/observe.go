package inventory

import (
	"context"
	"fmt"
	"sort"

	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio"
)

// DefaultIstiodSelector selects istiod Deployments unless Options say otherwise.
const DefaultIstiodSelector = "app=istiod"

// Options say where the Istio control plane and node agents live.
type Options struct {
	// IstioNamespace holds istiod, ztunnel and istio-cni (default istio-system).
	IstioNamespace string
	// IstiodSelector selects istiod Deployments (default app=istiod).
	IstiodSelector string
	// ZtunnelSelector selects ztunnel pods (default app=ztunnel).
	ZtunnelSelector string
	// CNISelector selects istio-cni pods (default k8s-app=istio-cni-node).
	CNISelector string
}

func (o Options) withDefaults() Options {
	if o.IstioNamespace == "" {
		o.IstioNamespace = istio.DefaultNamespace
	}
	if o.IstiodSelector == "" {
		o.IstiodSelector = DefaultIstiodSelector
	}
	if o.ZtunnelSelector == "" {
		o.ZtunnelSelector = "app=ztunnel"
	}
	if o.CNISelector == "" {
		o.CNISelector = "k8s-app=istio-cni-node"
	}
	return o
}

// Observe lists the cluster once and returns its inventory.
func Observe(ctx context.Context, client kubernetes.Interface, opts Options) (Inventory, error) {
	o, err := List(ctx, client, opts)
	if err != nil {
		return Inventory{}, err
	}
	return Build(opts, o)
}

// List reads what an inventory is built from: the tag webhooks, the istiod
// Deployments, every namespace and every pod. Namespaces and pods are
// served from the API server's watch cache (resourceVersion 0).
func List(ctx context.Context, client kubernetes.Interface, opts Options) (Objects, error) {
	opts = opts.withDefaults()
	cached := metav1.ListOptions{ResourceVersion: "0"}
	var o Objects
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelTag})
	if err != nil {
		return o, fmt.Errorf("listing revision tags: %w", err)
	}
	o.Webhooks = whs.Items
	deps, err := client.AppsV1().Deployments(opts.IstioNamespace).List(ctx, metav1.ListOptions{LabelSelector: opts.IstiodSelector})
	if err != nil {
		return o, fmt.Errorf("listing istiod deployments in %s: %w", opts.IstioNamespace, err)
	}
	o.Deployments = deps.Items
	nsList, err := client.CoreV1().Namespaces().List(ctx, cached)
	if err != nil {
		return o, fmt.Errorf("listing namespaces: %w", err)
	}
	o.Namespaces = nsList.Items
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return o, fmt.Errorf("listing pods: %w", err)
	}
	o.Pods = pods.Items
	return o, nil
}

// Objects are what an inventory is built from: read by Observe from the API,
// or by a controller from its informer caches.
type Objects struct {
	// Webhooks are the MutatingWebhookConfigurations; only tag webhooks
	// (labelled istio.io/tag) count.
	Webhooks []admv1.MutatingWebhookConfiguration
	// Deployments: only the istiod ones (in the Istio namespace, matching
	// Options.IstiodSelector) count.
	Deployments []appsv1.Deployment
	Namespaces  []corev1.Namespace
	// Pods of every namespace: the Istio namespace's give the nodes' ztunnel
	// and istio-cni, the others the meshed pods.
	Pods []corev1.Pod
}

// Build makes the inventory of the objects. It is pure.
func Build(opts Options, o Objects) (Inventory, error) {
	opts = opts.withDefaults()
	inv := Inventory{Tags: map[string]string{}}
	for _, wh := range o.Webhooks {
		if tag, ok := wh.Labels[istio.LabelTag]; ok {
			inv.Tags[tag] = wh.Labels[istio.LabelRev]
		}
	}
	istiodSel, err := labels.Parse(opts.IstiodSelector)
	if err != nil {
		return inv, fmt.Errorf("istiod selector %q: %w", opts.IstiodSelector, err)
	}
	var istiods []appsv1.Deployment
	for _, d := range o.Deployments {
		if d.Namespace == opts.IstioNamespace && istiodSel.Matches(labels.Set(d.Labels)) {
			istiods = append(istiods, d)
		}
	}
	inv.Revisions = RevisionsOf(istiods, inv.Tags)

	nodes := map[string]Node{}
	for _, sel := range []struct {
		selector string
		set      func(n *Node, p *corev1.Pod)
	}{
		{opts.ZtunnelSelector, func(n *Node, p *corev1.Pod) {
			n.Ztunnel = ImageTag(p.Spec.Containers[0].Image)
			n.ZtunnelRevision = p.Labels[istio.LabelRev]
		}},
		{opts.CNISelector, func(n *Node, p *corev1.Pod) { n.CNI = ImageTag(p.Spec.Containers[0].Image) }},
	} {
		ls, err := labels.Parse(sel.selector)
		if err != nil {
			return inv, fmt.Errorf("selector %q: %w", sel.selector, err)
		}
		for i := range o.Pods {
			p := &o.Pods[i]
			if p.Namespace != opts.IstioNamespace || !ls.Matches(labels.Set(p.Labels)) || p.Spec.NodeName == "" || len(p.Spec.Containers) == 0 || p.DeletionTimestamp != nil {
				continue
			}
			n := nodes[p.Spec.NodeName]
			n.Name = p.Spec.NodeName
			sel.set(&n, p)
			nodes[n.Name] = n
		}
	}
	for _, n := range nodes {
		inv.Nodes = append(inv.Nodes, n)
	}
	sort.Slice(inv.Nodes, func(i, j int) bool { return inv.Nodes[i].Name < inv.Nodes[j].Name })

	namespaces := map[string]Namespace{}
	for i := range o.Namespaces {
		ns := ClassifyNamespace(&o.Namespaces[i], inv.Tags)
		namespaces[ns.Name] = ns
		if ns.Mode != "" || ns.Injection != "" {
			inv.Namespaces = append(inv.Namespaces, ns)
		}
	}

	for i := range o.Pods {
		p := &o.Pods[i]
		if p.Namespace == opts.IstioNamespace || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if cp, ok := ClassifyPod(p, namespaces[p.Namespace], inv.Tags, nodes); ok {
			inv.Pods = append(inv.Pods, cp)
			// An unlabelled namespace whose pods run sidecars uses the
			// default tag's revision implicitly.
			if ns := namespaces[p.Namespace]; cp.Mode == ModeSidecar && ns.Mode == "" && ns.Injection == "" && ns.Name != "" {
				ns.Mode, ns.Implicit, ns.Revision = ModeSidecar, "unlabelled", resolve(istio.DefaultTag, inv.Tags)
				namespaces[p.Namespace] = ns
				inv.Namespaces = append(inv.Namespaces, ns)
			}
		}
	}
	sort.Slice(inv.Namespaces, func(i, j int) bool { return inv.Namespaces[i].Name < inv.Namespaces[j].Name })
	sort.Slice(inv.Pods, func(i, j int) bool {
		if inv.Pods[i].Namespace != inv.Pods[j].Namespace {
			return inv.Pods[i].Namespace < inv.Pods[j].Namespace
		}
		return inv.Pods[i].Name < inv.Pods[j].Name
	})
	inv.Waypoints = WaypointsOf(inv.Pods)
	return inv, nil
}

// WaypointsOf groups the waypoint pods by waypoint, sorted by namespace and
// name. Each waypoint takes its oldest pod's version and revision.
func WaypointsOf(pods []Pod) []Waypoint {
	type key struct{ ns, name string }
	at := map[key]int{}
	var out []Waypoint
	for _, p := range pods {
		if p.Mode != ModeWaypoint {
			continue
		}
		k := key{p.Namespace, p.Waypoint}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, Waypoint{Namespace: p.Namespace, Name: p.Waypoint, Revision: p.Revision, Version: p.Version})
		}
		w := &out[i]
		w.Pods++
		if p.Ready {
			w.Ready++
		}
		if p.Revision != w.Revision || p.Version != w.Version {
			w.Rolling = true
			if older(p.Version, w.Version) {
				w.Revision, w.Version = p.Revision, p.Version
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ref() < out[j].Ref() })
	return out
}

// Revisions lists the istiod revisions with their versions, readiness and
// (given the tag map) tags, sorted by name.
func Revisions(ctx context.Context, client kubernetes.Interface, opts Options, tags map[string]string) ([]Revision, error) {
	opts = opts.withDefaults()
	deps, err := client.AppsV1().Deployments(opts.IstioNamespace).List(ctx, metav1.ListOptions{LabelSelector: opts.IstiodSelector})
	if err != nil {
		return nil, fmt.Errorf("listing istiod deployments in %s: %w", opts.IstioNamespace, err)
	}
	return RevisionsOf(deps.Items, tags), nil
}

// RevisionsOf is Revisions given the istiod Deployments already observed
// (from a list or an informer cache).
func RevisionsOf(deps []appsv1.Deployment, tags map[string]string) []Revision {
	var out []Revision
	for _, d := range deps {
		r := Revision{Name: d.Labels[istio.LabelRev], Version: Unknown}
		if r.Name == "" {
			r.Name = istio.DefaultRevision
		}
		cs := d.Spec.Template.Spec.Containers
		for i, c := range cs {
			if c.Name == "discovery" || i == len(cs)-1 {
				r.Version = ImageTag(c.Image)
				break
			}
		}
		r.Ready = d.Status.ReadyReplicas > 0
		for tag, rev := range tags {
			if rev == r.Name {
				r.Tags = append(r.Tags, tag)
			}
		}
		sort.Strings(r.Tags)
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
