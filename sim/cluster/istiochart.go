package cluster

import (
	"context"
	"fmt"
	"sort"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// applyOrder ranks kinds so that what an object needs exists before it: the
// CRDs, the identities and their RBAC, the configuration, then the
// Deployment (its pods need their ServiceAccount) and the webhooks last.
var applyOrder = map[string]int{
	"CustomResourceDefinition": 0, "Namespace": 0, "ServiceAccount": 1,
	"ClusterRole": 2, "Role": 2, "ClusterRoleBinding": 3, "RoleBinding": 3,
	"ConfigMap": 4, "Secret": 4, "Service": 4, "Deployment": 6,
	"MutatingWebhookConfiguration": 7, "ValidatingWebhookConfiguration": 7,
}

func rank(kind string) int {
	if r, ok := applyOrder[kind]; ok {
		return r
	}
	return 5
}

// applyRendered creates each object a chart rendered, in dependency order
// (applyOrder); one that exists already (a CRD the previous revision's
// chart created) is left as it is. Its CRDs go through installCRD, which
// waits until each is served.
func applyRendered(ctx context.Context, cfg *rest.Config, objs []unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	objs = append([]unstructured.Unstructured(nil), objs...)
	sort.SliceStable(objs, func(i, j int) bool { return rank(objs[i].GetKind()) < rank(objs[j].GetKind()) })
	for i := range objs {
		u := &objs[i]
		gvk := u.GroupVersionKind()
		if gvk.Kind == "CustomResourceDefinition" {
			crd := &apiextv1.CustomResourceDefinition{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd); err != nil {
				return fmt.Errorf("CRD %s: %w", u.GetName(), err)
			}
			if err := installCRD(ctx, cfg, crd); err != nil {
				return err
			}
			continue
		}
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if meta.IsNoMatchError(err) {
			mapper.Reset() // a kind of a CRD created just now
			m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		}
		if err != nil {
			return fmt.Errorf("mapping %s %s: %w", gvk, u.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			if u.GetNamespace() == "" {
				u.SetNamespace(IstioNamespace)
			}
			ri = dyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", gvk.Kind, u.GetName(), err)
		}
	}
	return nil
}
