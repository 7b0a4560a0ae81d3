package revtag

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// gatewaysGVR is Gateway API's Gateway, the object a waypoint is.
var gatewaysGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// servedWaypoints names the waypoint Gateways istiod serves from rev (see
// istio.WaypointRevision), whether or not a pod runs them: a waypoint
// scaled to zero comes back on rev. None when dyn is nil or the cluster
// has no Gateway API.
func servedWaypoints(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, tags map[string]string, rev string) ([]string, error) {
	if dyn == nil {
		return nil, nil
	}
	list, err := dyn.Resource(gatewaysGVR).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing waypoint Gateways (gateway.networking.k8s.io/v1): %w", err)
	}
	nsLabels := map[string]map[string]string{}
	var out []string
	for _, g := range list.Items {
		if class, _, _ := unstructured.NestedString(g.Object, "spec", "gatewayClassName"); class != istio.WaypointGatewayClass {
			continue
		}
		labels, ok := nsLabels[g.GetNamespace()]
		if !ok {
			ns, err := client.CoreV1().Namespaces().Get(ctx, g.GetNamespace(), metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("reading namespace %s of waypoint %s: %w", g.GetNamespace(), g.GetName(), err)
			}
			if ns != nil {
				labels = ns.Labels
			}
			nsLabels[g.GetNamespace()] = labels
		}
		if istio.WaypointRevision(g.GetLabels(), labels, tags) == rev {
			out = append(out, g.GetNamespace()+"/"+g.GetName())
		}
	}
	return out, nil
}

// ErrRevisionInUse means proxies, tags or namespaces still use the revision.
var ErrRevisionInUse = errors.New("revision still in use")

// RemovalBlockers lists what still uses a revision, worst first: the
// waypoints running it or served from it (removing it breaks L7 for every
// workload behind them; served names the waypoint Gateways istiod serves
// from rev, those scaled to zero included), running proxies (the point of
// no return), tags pointing at it, namespaces labelled with it. Empty
// means the revision can go. It is pure.
func RemovalBlockers(inv inventory.Inventory, rev string, served []string) []string {
	var out []string
	seen := map[string]bool{}
	var waypoints []string
	for _, w := range inv.Waypoints {
		if w.Revision == rev && !seen[w.Ref()] {
			seen[w.Ref()] = true
			waypoints = append(waypoints, w.Ref())
		}
	}
	for _, ref := range served {
		if !seen[ref] {
			seen[ref] = true
			waypoints = append(waypoints, ref)
		}
	}
	sort.Strings(waypoints)
	if len(waypoints) > 0 {
		out = append(out, fmt.Sprintf("waypoints %s use it (move them first: a RevisionMigration with waypoints: Only)", strings.Join(waypoints, ", ")))
	}
	byNS := map[string]int{}
	for _, p := range inv.Pods {
		if p.Revision == rev && p.Mode != inventory.ModeWaypoint {
			byNS[p.Namespace]++
		}
	}
	var nss []string
	for ns := range byNS {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		out = append(out, fmt.Sprintf("%d proxies in namespace %s", byNS[ns], ns))
	}
	var tags []string
	for tag, r := range inv.Tags {
		if r == rev {
			tags = append(tags, tag)
		}
	}
	sort.Strings(tags)
	for _, t := range tags {
		out = append(out, "tag "+t)
	}
	for _, ns := range inv.Namespaces {
		if ns.Rev == rev {
			out = append(out, "namespace "+ns.Name+" is labelled "+istio.LabelRev+"="+rev)
		}
	}
	return out
}

// RemoveRevision deletes a revision's injector webhook and its istio.io/rev
// labelled Deployments, Services and ConfigMaps in the Istio namespace. It
// refuses, changing nothing, while RemovalBlockers lists anything. With
// dryRun it only returns the objects it would delete.
func RemoveRevision(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, rev string, opts inventory.Options, dryRun bool) ([]string, error) {
	if _, err := RevisionWebhook(ctx, client, rev); err != nil {
		return nil, err
	}
	inv, err := inventory.Observe(ctx, client, opts)
	if err != nil {
		return nil, err
	}
	served, err := servedWaypoints(ctx, client, dyn, inv.Tags, rev)
	if err != nil {
		return nil, err
	}
	if b := RemovalBlockers(inv, rev, served); len(b) > 0 {
		return nil, fmt.Errorf("%w: refusing to remove %s while %s", ErrRevisionInUse, rev, strings.Join(b, "; "))
	}
	ns := opts.IstioNamespace
	if ns == "" {
		ns = istio.DefaultNamespace
	}
	sel := metav1.ListOptions{LabelSelector: istio.LabelRev + "=" + rev + ",!" + istio.LabelTag}
	var deleted []string
	del := func(kind, name string, f func() error) error {
		deleted = append(deleted, kind+"/"+name)
		if dryRun {
			return nil
		}
		if err := f(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s/%s: %w", kind, name, err)
		}
		return nil
	}
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing webhooks of %s: %w", rev, err)
	}
	for _, w := range whs.Items {
		if err := del("mutatingwebhookconfiguration", w.Name, func() error {
			return client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, w.Name, metav1.DeleteOptions{})
		}); err != nil {
			return deleted, err
		}
	}
	deps, err := client.AppsV1().Deployments(ns).List(ctx, sel)
	if err != nil {
		return deleted, fmt.Errorf("listing deployments of %s: %w", rev, err)
	}
	for _, d := range deps.Items {
		if err := del("deployment", d.Name, func() error {
			return client.AppsV1().Deployments(ns).Delete(ctx, d.Name, metav1.DeleteOptions{})
		}); err != nil {
			return deleted, err
		}
	}
	svcs, err := client.CoreV1().Services(ns).List(ctx, sel)
	if err != nil {
		return deleted, fmt.Errorf("listing services of %s: %w", rev, err)
	}
	for _, s := range svcs.Items {
		if err := del("service", s.Name, func() error { return client.CoreV1().Services(ns).Delete(ctx, s.Name, metav1.DeleteOptions{}) }); err != nil {
			return deleted, err
		}
	}
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, sel)
	if err != nil {
		return deleted, fmt.Errorf("listing configmaps of %s: %w", rev, err)
	}
	for _, c := range cms.Items {
		if err := del("configmap", c.Name, func() error { return client.CoreV1().ConfigMaps(ns).Delete(ctx, c.Name, metav1.DeleteOptions{}) }); err != nil {
			return deleted, err
		}
	}
	return deleted, nil
}
