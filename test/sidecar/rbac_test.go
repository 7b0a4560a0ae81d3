package sidecar

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// revisionsSA is the revisions controller's ServiceAccount (deploy/sidecar).
const revisionsSA = "system:serviceaccount:nodewise-system:nodewise-revisions"

// asRevisionsServiceAccount applies deploy/'s namespace and deploy/sidecar's
// RBAC and admission policy (allowing the test injector's injection URL, as
// the operator of a remote istiod allows theirs), waits until the policy is
// enforced, and returns a config that impersonates the controller's
// ServiceAccount.
func (e *env) asRevisionsServiceAccount() *rest.Config {
	t := e.t
	t.Helper()
	for _, f := range []string{"orchestrator/namespace.yaml", "sidecar/rbac.yaml", "sidecar/admission.yaml"} {
		raw, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		manifest := string(raw)
		if f == "sidecar/admission.yaml" {
			manifest = allowInjectionURLs(t, manifest, e.injectorURLPrefix())
		}
		applyYAML(t, e.c.Kubeconfig, manifest)
	}
	sa := rest.CopyConfig(e.c.Config)
	sa.Impersonate = rest.ImpersonationConfig{UserName: revisionsSA, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:nodewise-system", "system:authenticated"}}
	kube := kubernetes.NewForConfigOrDie(sa)
	// The policy is enforced a moment after it is created: wait until an
	// arbitrary webhook is refused (dry run: nothing is written either way).
	probe := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "nodewise-policy-probe"}}
	testkit.WaitFor(t, 30*time.Second, "the admission policy to be enforced", func() (bool, error) {
		_, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(e.ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "istio-revision-tag-"), nil
	})
	return sa
}

// injectorURLPrefix is the test injector's injection URL up to /inject/:
// the prefix its revisions' webhooks (and so their tags) call.
func (e *env) injectorURLPrefix() string {
	u := e.inj.URL("x")
	i := strings.Index(u, "/inject/")
	if i < 0 {
		e.t.Fatalf("injector URL %s has no /inject/", u)
	}
	return u[:i+len("/inject/")]
}

// allowInjectionURLs is the policy manifest (deploy/sidecar/admission.yaml)
// with prefixes as its allow-list of injection URLs, as the operator of a
// remote istiod sets it (the chart's revisions.injectionURLs): the test
// injector serves outside the cluster, at a URL, as a remote istiod does.
func allowInjectionURLs(t *testing.T, manifest string, prefixes ...string) string {
	t.Helper()
	list, err := json.Marshal(prefixes)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	found := 0
	for _, doc := range strings.Split(manifest, "\n---\n") {
		var p admissionv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatal(err)
		}
		if p.Kind != "ValidatingAdmissionPolicy" {
			out = append(out, doc)
			continue
		}
		for i, v := range p.Spec.Variables {
			if v.Name == "injectionURLs" {
				p.Spec.Variables[i].Expression = string(list)
				found++
			}
		}
		j, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(j))
	}
	if found != 1 {
		t.Fatalf("the policy has %d variables injectionURLs, want 1", found)
	}
	return strings.Join(out, "\n---\n")
}

// TestRevisionsServiceAccountLimits: the revisions controller's ServiceAccount
// with deploy/sidecar's RBAC and admission policy cannot register an
// arbitrary webhook, change a Deployment's image, relabel a namespace's
// other labels, repoint a Service, create a Gateway other than a canary
// waypoint or delete one it did not make, and can still do what a migration
// does (a revision-tag webhook, the restart annotation, istio.io/rev, a
// waypoint canary's keys on namespaces and Services, a canary waypoint).
func TestRevisionsServiceAccountLimits(t *testing.T) {
	e := start(t, 3, "1.27.3")
	ctx := context.Background()
	e.namespace("shop", map[string]string{"istio.io/rev": "1-27", "team": "payments"}, app{name: "web", replicas: 1})
	wp := e.waypoints(nil)
	saConfig := e.asRevisionsServiceAccount()
	kube := kubernetes.NewForConfigOrDie(saConfig)

	refused := func(what string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed, want refused", what)
		} else if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: refused with %q, want mention of %q", what, err, want)
		}
	}
	allowed := allowedAsMigration(t)

	evil := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "mutate-every-pod"}}
	_, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, evil, metav1.CreateOptions{})
	refused("creating webhook mutate-every-pod", err, "only the revision-tag webhooks")
	tag := &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-revision-tag-probe"}}
	_, err = kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, tag, metav1.CreateOptions{})
	allowed("creating webhook istio-revision-tag-probe", err)

	image := `{"spec":{"template":{"spec":{"containers":[{"name":"app","image":"evil.example/backdoor:1"}]}}}}`
	_, err = kube.AppsV1().Deployments("shop").Patch(ctx, "web", types.StrategicMergePatchType, []byte(image), metav1.PatchOptions{})
	refused("patching Deployment shop/web's image", err, "only the pod template's kubectl.kubernetes.io/restartedAt")
	_, err = kube.AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{})
	refused("scaling Deployment shop/web to 0", err, "may not scale")
	restart := `{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"2026-12-01T10:00:00Z"}}}}}`
	_, err = kube.AppsV1().Deployments("shop").Patch(ctx, "web", types.StrategicMergePatchType, []byte(restart), metav1.PatchOptions{})
	allowed("stamping Deployment shop/web's restartedAt", err)

	_, err = kube.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"attacker"}}}`), metav1.PatchOptions{})
	refused("relabelling namespace shop's team label", err, "only a namespace's istio.io/rev and istio-injection labels")
	_, err = kube.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":"1-28"}}}`), metav1.PatchOptions{})
	allowed("retagging namespace shop", err)

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "intercept", Namespace: cluster.IstioNamespace}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 443}}}}
	_, err = kube.CoreV1().Services(cluster.IstioNamespace).Create(ctx, svc, metav1.CreateOptions{})
	refused("creating Service istio-system/intercept", err, "only the revision-tag Services")

	// A waypoint canary: its keys on namespaces and Services, its Gateway.
	canaryKeys := `{"metadata":{"labels":{"istio.io/use-waypoint-canary":"waypoint-1-28"},"annotations":{"istio.io/use-waypoint-canary-weight":"10"}}}`
	_, err = kube.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(canaryKeys), metav1.PatchOptions{})
	allowed("pointing namespace shop at a canary waypoint", err)
	_, err = kube.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"annotations":{"team":"attacker"}}}`), metav1.PatchOptions{})
	refused("annotating namespace shop", err, "waypoint canary keys")
	user := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "reviews", Namespace: "shop", Labels: map[string]string{"istio.io/use-waypoint": "waypoint"}}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 9080}}}}
	if _, err := e.c.Client.CoreV1().Services("shop").Create(ctx, user, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = kube.CoreV1().Services("shop").Patch(ctx, "reviews", types.MergePatchType, []byte(canaryKeys), metav1.PatchOptions{})
	allowed("pointing Service shop/reviews at a canary waypoint", err)
	_, err = kube.CoreV1().Services("shop").Patch(ctx, "reviews", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/use-waypoint":"evil"}}}`), metav1.PatchOptions{})
	refused("repointing Service shop/reviews's waypoint", err, "only the revision-tag Services")
	_, err = kube.CoreV1().Services("shop").Patch(ctx, "reviews", types.MergePatchType, []byte(`{"spec":{"ports":[{"port":22}]}}`), metav1.PatchOptions{})
	refused("changing Service shop/reviews's ports", err, "only the revision-tag Services")
	gws := dynamic.NewForConfigOrDie(saConfig).Resource(gatewaysGVR).Namespace("shop")
	gateway := func(name, class string, labels map[string]string, owned bool) *unstructured.Unstructured {
		g := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
			"metadata": map[string]any{"namespace": "shop", "name": name},
			"spec":     map[string]any{"gatewayClassName": class, "listeners": []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}}}}}
		g.SetLabels(labels)
		if owned {
			g.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Name: "waypoint", UID: "00000000-0000-0000-0000-000000000001"}})
		}
		return g
	}
	ours := map[string]string{"app.kubernetes.io/managed-by": "nodewise-revisions", "istio.io/rev": "1-28"}
	_, err = gws.Create(ctx, gateway("ingress", "istio", ours, true), metav1.CreateOptions{})
	refused("creating an ingress Gateway", err, "only canary waypoints")
	_, err = gws.Create(ctx, gateway("unowned", istio.WaypointGatewayClass, ours, false), metav1.CreateOptions{})
	refused("creating a waypoint Gateway owned by none", err, "only canary waypoints")
	_, err = gws.Create(ctx, gateway("waypoint-1-28", istio.WaypointGatewayClass, ours, true), metav1.CreateOptions{})
	allowed("creating canary waypoint shop/waypoint-1-28", err)
	if _, err := wp.dyn.Resource(gatewaysGVR).Namespace("shop").Create(ctx, gateway("theirs", istio.WaypointGatewayClass, nil, false), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("deleting Gateway shop/theirs", gws.Delete(ctx, "theirs", metav1.DeleteOptions{}), "only the canary waypoints it created")
	allowed("deleting canary waypoint shop/waypoint-1-28", gws.Delete(ctx, "waypoint-1-28", metav1.DeleteOptions{}))

	// The cluster's admin is not limited by the policy.
	dep, err := e.c.Client.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; strings.Contains(got, "evil") {
		t.Errorf("image changed to %s", got)
	}
}
