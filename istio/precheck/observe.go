package precheck

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio/inventory"
)

// AuthorizationPolicies is the resource of Istio's authorization policies.
var AuthorizationPolicies = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}

// Observe reads the cluster once and builds the checks' input. A cluster
// without Istio's AuthorizationPolicy CRD has no policies.
func Observe(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, opts inventory.Options) (Input, error) {
	o, err := inventory.List(ctx, client, opts)
	if err != nil {
		return Input{}, err
	}
	inv, err := inventory.Build(opts, o)
	if err != nil {
		return Input{}, err
	}
	in := Input{Inventory: inv, Pods: o.Pods, MeshConfigs: map[string]*corev1.ConfigMap{}}
	aps, err := dyn.Resource(AuthorizationPolicies).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Input{}, fmt.Errorf("listing authorization policies: %w", err)
	default:
		in.AuthorizationPolicies = aps.Items
	}
	ns := opts.IstioNamespace
	if ns == "" {
		ns = "istio-system"
	}
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Input{}, fmt.Errorf("listing istiod's mesh config in %s: %w", ns, err)
	}
	for i := range cms.Items {
		cm := &cms.Items[i]
		if _, ok := cm.Data["mesh"]; ok && (cm.Name == "istio" || strings.HasPrefix(cm.Name, "istio-")) {
			in.MeshConfigs[cm.Name] = cm
		}
	}
	return in, nil
}
