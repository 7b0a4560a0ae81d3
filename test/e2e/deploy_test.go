package e2e

import (
	"context"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/test/chart"
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
	if err := chart.EnsureNamespace(ctx, c.Client, cluster.IstioNamespace); err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Kustomize()
	if err != nil {
		t.Fatal(err)
	}
	if err := chart.Apply(ctx, c.Config, objs); err != nil {
		t.Fatal(err)
	}
}
