package freshness

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio/inventory"
)

// Observe lists the cluster once (from the API server's watch cache) and
// builds the report at now.
func Observe(ctx context.Context, client kubernetes.Interface, opts inventory.Options, t Target, keys Keys, now time.Time) (Report, error) {
	o, err := List(ctx, client, opts)
	if err != nil {
		return Report{}, err
	}
	return Build(opts, o, t, keys, now)
}

// List reads the objects a report is built from, once, from the API
// server's watch cache.
func List(ctx context.Context, client kubernetes.Interface, opts inventory.Options) (Objects, error) {
	cached := metav1.ListOptions{ResourceVersion: "0"}
	base, err := inventory.List(ctx, client, opts)
	if err != nil {
		return Objects{}, err
	}
	o := Objects{Objects: base}
	apps := client.AppsV1()
	// Every Deployment, for the workloads' team and owner keys (the
	// inventory picks the istiod ones out of them).
	deps, err := apps.Deployments(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Objects{}, fmt.Errorf("listing deployments: %w", err)
	}
	o.Deployments = deps.Items
	rss, err := apps.ReplicaSets(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Objects{}, fmt.Errorf("listing replicasets: %w", err)
	}
	o.ReplicaSets = rss.Items
	stss, err := apps.StatefulSets(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Objects{}, fmt.Errorf("listing statefulsets: %w", err)
	}
	o.StatefulSets = stss.Items
	// DaemonSets give only their own team and owner keys; a cluster that
	// does not let nodewise read them (their role is optional) reads their
	// namespace's instead.
	dss, err := apps.DaemonSets(metav1.NamespaceAll).List(ctx, cached)
	if err != nil && !apierrors.IsForbidden(err) {
		return Objects{}, fmt.Errorf("listing daemonsets: %w", err)
	}
	if err == nil {
		o.DaemonSets = dss.Items
	}
	crs, err := apps.ControllerRevisions(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Objects{}, fmt.Errorf("listing controllerrevisions: %w", err)
	}
	o.ControllerRevisions = crs.Items
	return o, nil
}
