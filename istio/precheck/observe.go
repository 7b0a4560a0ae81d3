package precheck

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio/inventory"
)

// AuthorizationPolicies is the resource of Istio's authorization policies.
var AuthorizationPolicies = schema.GroupVersionResource{Group: "security.istio.io", Version: "v1", Resource: "authorizationpolicies"}

// DestinationRules is the resource of Istio's destination rules.
var DestinationRules = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}

// List lists every object of one of Istio's resources (gvr) in every
// namespace: none when dyn is nil or the CRD is not installed.
func List(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource) ([]unstructured.Unstructured, error) {
	if dyn == nil {
		return nil, nil
	}
	l, err := dyn.Resource(gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing %s: %w", gvr.Resource, err)
	}
	return l.Items, nil
}

// Nodes lists every node, for the images each has (from the API server's
// watch cache).
func Nodes(ctx context.Context, client kubernetes.Interface) ([]corev1.Node, error) {
	l, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return l.Items, nil
}

// Observe reads the cluster once and builds the checks' input (all but the
// Pulls and the Connections, which the caller knows), with the objects its
// inventory was built from (for the caller's Pulls). A cluster without
// Istio's CRDs has no policies and no rules.
func Observe(ctx context.Context, client kubernetes.Interface, dyn dynamic.Interface, opts inventory.Options) (Input, inventory.Objects, error) {
	o, err := inventory.List(ctx, client, opts)
	if err != nil {
		return Input{}, o, err
	}
	inv, err := inventory.Build(opts, o)
	if err != nil {
		return Input{}, o, err
	}
	in := Input{Inventory: inv, Pods: o.Pods, MeshConfigs: map[string]*corev1.ConfigMap{}}
	if in.AuthorizationPolicies, err = List(ctx, dyn, AuthorizationPolicies); err != nil {
		return Input{}, o, err
	}
	if in.DestinationRules, err = List(ctx, dyn, DestinationRules); err != nil {
		return Input{}, o, err
	}
	if in.Nodes, err = Nodes(ctx, client); err != nil {
		return Input{}, o, err
	}
	ns := opts.IstioNamespace
	if ns == "" {
		ns = "istio-system"
	}
	in.RootNamespace = ns
	cms, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return Input{}, o, fmt.Errorf("listing istiod's mesh config in %s: %w", ns, err)
	}
	for i := range cms.Items {
		cm := &cms.Items[i]
		if _, ok := cm.Data["mesh"]; ok && (cm.Name == "istio" || strings.HasPrefix(cm.Name, "istio-")) {
			in.MeshConfigs[cm.Name] = cm
		}
	}
	return in, o, nil
}
