package e2e

import (
	"context"
	"path/filepath"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/nodewise/nodewise/test/cluster"
)

// TestDeployServerSideApply builds deploy/ with kustomize and applies every
// object with server-side apply; the API server must accept all of them.
func TestDeployServerSideApply(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Nodes: 2})
	applyDeploy(t, c)
	dep, err := c.Client.AppsV1().Deployments("nodewise-system").Get(context.Background(), "nodewise-orchestrator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *dep.Spec.Replicas != 2 {
		t.Errorf("orchestrator replicas %d, want 2", *dep.Spec.Replicas)
	}
}

// TestOrchestratorRBACLeastPrivilege applies deploy/ and asks the API server
// what the orchestrator's ServiceAccount may do: no DaemonSet writes (nodewise
// never edits a template), pod deletes and evictions, node patches, and, in
// the Istio namespace only, pod create and patch for the surge swap's bridge.
func TestOrchestratorRBACLeastPrivilege(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Nodes: 2})
	applyDeploy(t, c)
	ctx := context.Background()
	sa := "system:serviceaccount:nodewise-system:nodewise-orchestrator"
	for _, tc := range []struct {
		group, resource, sub, verb, ns string
		want                           bool
	}{
		{"apps", "daemonsets", "", "update", "istio-system", false},
		{"apps", "daemonsets", "", "patch", "istio-system", false},
		{"apps", "daemonsets", "", "delete", "istio-system", false},
		{"apps", "daemonsets", "", "list", "istio-system", true},
		{"apps", "deployments", "", "list", "istio-system", true},  // preflight skew: istiod versions
		{"apps", "deployments", "", "watch", "istio-system", true}, // from an informer
		{"apps", "deployments", "", "update", "istio-system", false},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "list", "", true}, // revision tags
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "watch", "", true},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "update", "", false},
		{"", "pods", "", "delete", "istio-system", true},
		// Added for the surge swap, in the Istio namespace only: create the
		// bridge pod, patch it to hand it over to the DaemonSet. Fenced by the
		// ValidatingAdmissionPolicy nodewise-surge-bridge-only
		// (TestSurgePolicyFencesOrchestratorPodWrites).
		{"", "pods", "", "create", "istio-system", true},
		{"", "pods", "", "patch", "istio-system", true},
		{"", "pods", "", "update", "istio-system", false},
		{"", "pods", "", "create", "default", false},
		{"", "pods", "", "patch", "default", false},
		{"", "pods", "", "create", "kube-system", false},
		{"", "pods", "eviction", "create", "default", true},
		{"", "nodes", "", "patch", "", true},
		{"", "nodes", "", "delete", "", false},
		{"nodewise.io", "noderollouts", "status", "update", "", true},
		{"coordination.k8s.io", "leases", "", "update", "nodewise-system", true},
		{"coordination.k8s.io", "leases", "", "update", "kube-system", false},
	} {
		sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{User: sa, Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authv1.ResourceAttributes{Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Verb: tc.verb, Namespace: tc.ns}}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.want {
			t.Errorf("%s %s/%s %s in %q: allowed %v, want %v", tc.verb, tc.resource, tc.sub, tc.group, tc.ns, got.Status.Allowed, tc.want)
		}
	}
}

// applyDeploy server-side-applies everything `kustomize build deploy/` yields.
func applyDeploy(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	// The surge Role lives in the Istio namespace, which Istio's install creates.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster.IstioNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(repoRoot(), "deploy"))
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	force := true
	// CRDs and namespaces first, so the rest can be mapped and placed.
	for pass := 0; pass < 2; pass++ {
		for _, r := range resMap.Resources() {
			kind := r.GetKind()
			first := kind == "CustomResourceDefinition" || kind == "Namespace"
			if first != (pass == 0) {
				continue
			}
			data, err := r.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			gvk := r.GetGvk()
			m, err := mapper.RESTMapping(schemaGK(gvk.Group, gvk.Kind), gvk.Version)
			if err != nil {
				mapper.Reset()
				if m, err = mapper.RESTMapping(schemaGK(gvk.Group, gvk.Kind), gvk.Version); err != nil {
					t.Fatalf("mapping %s: %v", kind, err)
				}
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				ri = dyn.Resource(m.Resource).Namespace(r.GetNamespace())
			}
			if _, err := ri.Patch(ctx, r.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "e2e", Force: &force}); err != nil {
				t.Errorf("server-side apply of %s %s: %v", kind, r.GetName(), err)
			}
		}
		mapper.Reset()
	}
}

func schemaGK(group, kind string) schema.GroupKind { return schema.GroupKind{Group: group, Kind: kind} }
