package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/chart"
)

// TestDeployServerSideApply builds deploy/ with kustomize and applies every
// object with server-side apply; the API server must accept all of them.
func TestDeployServerSideApply(t *testing.T) {
	t.Parallel()
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
// what the orchestrator's ServiceAccount may do: no DaemonSet writes but
// Kured's lock on kube-system/kured (nodewise never edits a template), evictions, node patches, pod reads cluster-wide,
// and, in the Istio namespace (the targets') only, pod deletes, istiod's
// Deployments and pod create for the surge swap's bridge (no pod patch). Then it
// acts as that ServiceAccount (impersonation) against the real API server.
func TestOrchestratorRBACLeastPrivilege(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{Nodes: 2})
	createVictims(t, c)
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
		{"apps", "deployments", "", "list", "", false}, // not cluster-wide: only istiod's namespace
		{"apps", "deployments", "", "watch", "", false},
		{"apps", "deployments", "", "list", "default", false},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "list", "", true}, // revision tags
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "watch", "", true},
		{"admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "update", "", false},
		{"", "namespaces", "", "list", "", true}, // the precheck before a rollout's first node: revision labels
		{"", "namespaces", "", "update", "", false},
		{"security.istio.io", "authorizationpolicies", "", "list", "", true}, // the precheck: dry-run policies
		{"security.istio.io", "authorizationpolicies", "", "update", "", false},
		{"", "pods", "", "delete", "istio-system", true}, // the targets' old pods
		{"", "pods", "", "delete", "default", false},     // nobody else's
		{"", "pods", "", "delete", "kube-system", false},
		{"", "pods", "", "deletecollection", "istio-system", false},
		{"", "pods", "", "list", "", true}, // the informer, and the drain's view of a node
		{"", "pods", "", "watch", "", true},
		// Added for the surge swap, in the Istio namespace only: create the
		// bridge pod (the old pod's deletion hands it over, no patch). Fenced
		// by the ValidatingAdmissionPolicy nodewise-surge-bridge-only
		// (TestSurgePolicyFencesOrchestratorPodWrites).
		{"", "pods", "", "create", "istio-system", true},
		{"", "pods", "", "patch", "istio-system", false},
		{"", "pods", "", "update", "istio-system", false},
		{"", "pods", "", "create", "default", false},
		{"", "pods", "", "patch", "default", false},
		{"", "pods", "", "create", "kube-system", false},
		{"", "pods", "eviction", "create", "default", true},
		{"", "nodes", "", "patch", "", true},
		{"", "nodes", "status", "patch", "", true}, // the lifecycle conditions (fenced: nodewise-orchestrator-node-conditions)
		{"", "nodes", "status", "update", "", false},
		{"", "nodes", "", "delete", "", false},
		{"nodewise.io", "noderollouts", "status", "update", "", true},
		{"coordination.k8s.io", "leases", "", "update", "nodewise-system", true},
		{"coordination.k8s.io", "leases", "", "update", "kube-system", false},
		// spec.gates.conformance, in its own namespace only: the Job, its
		// pods' logs, and the pod create its dry run needs.
		{"batch", "jobs", "", "create", "nodewise-system", true},
		{"batch", "jobs", "", "delete", "nodewise-system", true},
		{"batch", "jobs", "", "create", "default", false},
		{"batch", "jobs", "", "update", "nodewise-system", false},
		{"", "pods", "log", "get", "nodewise-system", true},
		{"", "pods", "log", "get", "default", false},
		{"", "pods", "", "create", "nodewise-system", true},
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
	// The standby watches its own Leases, named in a field selector, and no
	// other Lease.
	for _, tc := range []struct {
		verb, name string
		want       bool
	}{
		{"watch", "nodewise-orchestrator", true},
		{"list", "nodewise-orchestrator", true},
		{"watch", "nodewise-notify", true},
		{"watch", "nodewise-revisions", false},
		{"watch", "", false},
		{"list", "", false},
	} {
		sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{User: sa, Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authv1.ResourceAttributes{Group: "coordination.k8s.io", Resource: "leases", Verb: tc.verb, Namespace: "nodewise-system", Name: tc.name}}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.want {
			t.Errorf("%s leases %q in nodewise-system: allowed %v, want %v", tc.verb, tc.name, got.Status.Allowed, tc.want)
		}
	}
	// Kured's lock: get and update on Kured's DaemonSet (kube-system/kured) only.
	for _, tc := range []struct {
		verb, ns, name string
		want           bool
	}{
		{"update", "kube-system", "kured", true},
		{"get", "kube-system", "kured", true},
		{"patch", "kube-system", "kured", false},
		{"delete", "kube-system", "kured", false},
		{"update", "kube-system", "kube-proxy", false},
		{"update", "kube-system", "", false},
		{"update", "istio-system", "kured", false},
	} {
		sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{User: sa, Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authv1.ResourceAttributes{Group: "apps", Resource: "daemonsets", Verb: tc.verb, Namespace: tc.ns, Name: tc.name}}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.want {
			t.Errorf("%s daemonsets %q in %s: allowed %v, want %v", tc.verb, tc.name, tc.ns, got.Status.Allowed, tc.want)
		}
	}
	actAsOrchestrator(t, c)
}

// createVictims creates, as the admin, a pod named victim in default and in
// the Istio namespace, for actAsOrchestrator to delete. The Istio namespace's
// victim is shaped as a surge bridge of ztunnel (its label, controlled by an
// older pod), one of the pods the admission policy
// nodewise-orchestrator-pod-deletes lets the orchestrator delete there.
func createVictims(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	if err := chart.EnsureNamespace(ctx, c.Client, cluster.IstioNamespace); err != nil {
		t.Fatal(err)
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}}
	anchor, err := c.Client.CoreV1().Pods(cluster.IstioNamespace).Create(ctx,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim-anchor", Namespace: cluster.IstioNamespace}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s/victim-anchor as the admin: %v", cluster.IstioNamespace, err)
	}
	for _, ns := range []string{"default", cluster.IstioNamespace} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim", Namespace: ns}, Spec: spec}
		if ns == cluster.IstioNamespace {
			p.Labels = map[string]string{"nodewise.io/surge-bridge": "ztunnel"}
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: anchor.Name, UID: anchor.UID, Controller: ptr.To(true)}}
		}
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s/victim as the admin: %v", ns, err)
		}
	}
}

// actAsOrchestrator impersonates the orchestrator's ServiceAccount and makes
// the calls the RBAC must allow or refuse: deleting a pod in the targets'
// namespace and listing its Deployments work; deleting a pod elsewhere and
// listing Deployments cluster-wide are Forbidden (and the pod is still there).
func actAsOrchestrator(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	as := asOrchestrator(t, c)
	zero := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	if err := as.CoreV1().Pods("default").Delete(ctx, "victim", del); !apierrors.IsForbidden(err) {
		t.Errorf("orchestrator deleting pod default/victim: %v, want Forbidden", err)
	}
	if _, err := c.Client.CoreV1().Pods("default").Get(ctx, "victim", metav1.GetOptions{}); err != nil {
		t.Errorf("pod default/victim after the refused delete: %v", err)
	}
	if err := as.CoreV1().Pods(cluster.IstioNamespace).Delete(ctx, "victim", del); err != nil {
		t.Errorf("orchestrator deleting pod %s/victim (the targets' namespace): %v", cluster.IstioNamespace, err)
	}
	if _, err := as.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("orchestrator listing Deployments cluster-wide: %v, want Forbidden", err)
	}
	if _, err := as.AppsV1().Deployments(cluster.IstioNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("orchestrator listing Deployments in %s: %v", cluster.IstioNamespace, err)
	}
	if _, err := as.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.Errorf("orchestrator listing pods cluster-wide: %v", err)
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

// TestRolloutUnderDeployedRBAC runs a whole rollout (istio-cni replaced,
// ztunnel surged, every node drained) with the orchestrator acting as its
// ServiceAccount under deploy/'s RBAC, so every call it makes (informers,
// the istiod Deployments' namespaced informer, pod deletes and bridge writes
// in the Istio namespace, evictions, its Lease) is one the RBAC grants.
func TestRolloutUnderDeployedRBAC(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	applyDeploy(t, e.c)
	cfg := rest.CopyConfig(e.c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nodewise-system:nodewise-orchestrator",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nodewise-system", "system:authenticated"}}
	e.upgrade("1.28.1")
	e.apply(rollout("rbac", func(s *v1alpha1.NodeRolloutSpec) {
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways}
	}))
	_, reg := e.runInProcessWith("as-sa", func(c *orchestrator.Config) { c.RESTConfig, c.Namespace = cfg, "nodewise-system" })
	nr := e.waitPhase("rbac", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Done != nodes {
		t.Fatalf("rollout under the deployed RBAC: phase %s (%s %s), counts %+v", nr.Status.Phase, nr.Status.HaltReason, conditionMessage(nr, "Valid"), nr.Status.Counts)
	}
	// The Lease's watch is allowed: the lock never fell back to reading it
	// (client-go's informers start a watch with its initial events, no list).
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	if r := leaseReads(byName); r != 0 {
		t.Errorf("the orchestrator read its Lease %v times with GET or LIST, want none: it watches it", r)
	}
}

// TestDeployBeforeIstio installs nodewise first and Istio second, the order a
// new cluster gets them in. The surge policy's parameter, the ztunnel
// DaemonSet, is missing until Istio's last chart, so the policy must leave
// everyone else's pods in the Istio namespace alone meanwhile (istiod's
// ReplicaSet, which `helm install istiod --wait` waits for before ztunnel
// comes) while still refusing every pod the orchestrator creates there.
func TestDeployBeforeIstio(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	applyDeploy(t, c)
	ctx := context.Background()
	as := asOrchestrator(t, c)
	bridge := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bridge", Namespace: cluster.IstioNamespace, Labels: map[string]string{model.LabelSurgeBridge: cluster.ZtunnelName}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	// The policies reach the admission chain within a few seconds: until
	// then the orchestrator's RBAC alone would admit the bridge.
	var denied error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var made *corev1.Pod
		if made, denied = as.CoreV1().Pods(cluster.IstioNamespace).Create(ctx, bridge, metav1.CreateOptions{}); denied == nil {
			zero := int64(0)
			_ = c.Client.CoreV1().Pods(cluster.IstioNamespace).Delete(ctx, made.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		return denied != nil && strings.Contains(denied.Error(), "no params found"), nil
	})
	if err != nil {
		t.Fatalf("the orchestrator's bridge with no ztunnel DaemonSet was never refused: last %v", denied)
	}
	plain := bridge.DeepCopy()
	plain.Name, plain.Labels = "plain", nil
	// The second policy reaches the admission chain on its own, as the
	// first did: poll for it the same way.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var made *corev1.Pod
		if made, denied = as.CoreV1().Pods(cluster.IstioNamespace).Create(ctx, plain, metav1.CreateOptions{}); denied == nil {
			zero := int64(0)
			_ = c.Client.CoreV1().Pods(cluster.IstioNamespace).Delete(ctx, made.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		return denied != nil && strings.Contains(denied.Error(), "only create surge bridge pods"), nil
	})
	if err != nil {
		t.Errorf("the orchestrator creating a pod that is no bridge: last %v; want refused by nodewise-surge-bridge-labelled", denied)
	}
	// The admin's create below needs the name free again (a pod deleted
	// with grace 0 can linger a moment).
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods(cluster.IstioNamespace).Get(ctx, plain.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	// Anyone else's pod (here the admin's, as istiod's ReplicaSet's would be) is admitted.
	if _, err := c.Client.CoreV1().Pods(cluster.IstioNamespace).Create(ctx, plain, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating a pod in %s before Istio, with nodewise installed: %v", cluster.IstioNamespace, err)
	}
	if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := c.Client.AppsV1().Deployments(cluster.IstioNamespace).Get(ctx, "istiod-1-27", metav1.GetOptions{})
		return err == nil && d.Status.ReadyReplicas == 1, nil
	})
	if err != nil {
		t.Fatalf("istiod not Ready after Istio was installed over nodewise: %v", err)
	}
}

// asOrchestrator is a client that impersonates the orchestrator's ServiceAccount.
func asOrchestrator(t *testing.T, c *cluster.Cluster) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nodewise-system:nodewise-orchestrator",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nodewise-system", "system:authenticated"}}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return as
}
