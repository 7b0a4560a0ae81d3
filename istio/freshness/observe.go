package freshness

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// Observe lists the cluster once (from the API server's watch cache) and
// builds the report at now.
func Observe(ctx context.Context, client kubernetes.Interface, opts inventory.Options, t Target, keys Keys, now time.Time) (Report, error) {
	cached := metav1.ListOptions{ResourceVersion: "0"}
	var o Objects
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelTag})
	if err != nil {
		return Report{}, fmt.Errorf("listing revision tags: %w", err)
	}
	o.Webhooks = whs.Items
	nss, err := client.CoreV1().Namespaces().List(ctx, cached)
	if err != nil {
		return Report{}, fmt.Errorf("listing namespaces: %w", err)
	}
	o.Namespaces = nss.Items
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Report{}, fmt.Errorf("listing pods: %w", err)
	}
	o.Pods = pods.Items
	apps := client.AppsV1()
	deps, err := apps.Deployments(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Report{}, fmt.Errorf("listing deployments: %w", err)
	}
	o.Deployments = deps.Items
	rss, err := apps.ReplicaSets(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Report{}, fmt.Errorf("listing replicasets: %w", err)
	}
	o.ReplicaSets = rss.Items
	stss, err := apps.StatefulSets(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Report{}, fmt.Errorf("listing statefulsets: %w", err)
	}
	o.StatefulSets = stss.Items
	// DaemonSets give only their own team and owner keys; a cluster that
	// does not let nodewise read them (their role is optional) reads their
	// namespace's instead.
	dss, err := apps.DaemonSets(metav1.NamespaceAll).List(ctx, cached)
	if err != nil && !apierrors.IsForbidden(err) {
		return Report{}, fmt.Errorf("listing daemonsets: %w", err)
	}
	if err == nil {
		o.DaemonSets = dss.Items
	}
	crs, err := apps.ControllerRevisions(metav1.NamespaceAll).List(ctx, cached)
	if err != nil {
		return Report{}, fmt.Errorf("listing controllerrevisions: %w", err)
	}
	o.ControllerRevisions = crs.Items
	return Build(opts, o, t, keys, now)
}
