package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// refusedByPolicy checks that a write the revisions controller's token
// attempted (what) was refused by its admission policy.
func refusedByPolicy(t *testing.T) func(what string, err error) {
	return func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed, want refused by the policy", what)
		} else if !strings.Contains(err.Error(), "nodewise-revisions") {
			t.Errorf("%s: %v, want refused by the policy", what, err)
		}
	}
}

// allowedAsMigration checks that a write a migration makes (what) passed.
func allowedAsMigration(t *testing.T) func(what string, err error) {
	return func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v, want allowed (a migration does it)", what, err)
		}
	}
}

// TestRevisionsPolicyPinsWhatATagIs: the revisions controller's token may
// write a tag webhook only as a tag is (Istio's injector entries for pod
// creates, under the tag's own selectors) and a tag Service only as
// revtag.BuildService makes it (in the Istio
// namespace, selecting the revision's istiod pods, a ClusterIP), and may not
// change a workload's update strategy. A tag Service pointing elsewhere is
// refused; the one nodewise builds passes.
func TestRevisionsPolicyPinsWhatATagIs(t *testing.T) {
	e := start(t, 3, "1.27.3")
	ctx := context.Background()
	e.namespace("shop", map[string]string{"istio.io/rev": "1-27"}, app{name: "web", replicas: 1})
	kube := kubernetes.NewForConfigOrDie(e.asRevisionsServiceAccount())
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	refused := refusedByPolicy(t)

	hooks := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	rev, err := e.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector-1-27", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	build := func(tag string) *admissionv1.MutatingWebhookConfiguration {
		w, err := revtag.BuildWebhook(rev, tag)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	every := build("x")
	every.Webhooks[0].NamespaceSelector, every.Webhooks[0].ObjectSelector = &metav1.LabelSelector{}, &metav1.LabelSelector{}
	_, err = hooks.Create(ctx, every, dry)
	refused("a tag webhook matching every pod", err)
	rules := build("x")
	rules.Webhooks[0].Rules[0].Resources = []string{"*"}
	rules.Webhooks[0].Rules[0].Operations = []admissionv1.OperationType{admissionv1.OperationAll}
	_, err = hooks.Create(ctx, rules, dry)
	refused("a tag webhook for every resource and operation", err)
	otherTag := build("x")
	otherTag.Name = revtag.WebhookName("y") // x's selectors under y's name
	_, err = hooks.Create(ctx, otherTag, dry)
	refused("a tag webhook selecting another tag's pods", err)
	if _, err := hooks.Create(ctx, build("x"), dry); err != nil {
		t.Errorf("the tag x nodewise builds: %v, want allowed", err)
	}
	cur, err := hooks.Get(ctx, revtag.WebhookName("default"), metav1.GetOptions{}) // the install's default tag
	if err != nil {
		t.Fatal(err)
	}
	def := build("default")
	def.ResourceVersion = cur.ResourceVersion
	if _, err := hooks.Update(ctx, def, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the default tag nodewise builds, over the install's: %v, want allowed", err)
	}

	svc := revtag.BuildService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "istiod-1-27", Namespace: cluster.IstioNamespace,
		Labels: map[string]string{"istio.io/rev": "1-27"}}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https-webhook", Port: 443}}}}, "x")
	services := kube.CoreV1().Services(cluster.IstioNamespace)
	if _, err := services.Create(ctx, svc, dry); err != nil {
		t.Errorf("the tag Service nodewise builds: %v, want allowed", err)
	}
	elsewhere := svc.DeepCopy()
	elsewhere.Spec.Selector = map[string]string{"app": "evil"}
	_, err = services.Create(ctx, elsewhere, dry)
	refused("a tag Service selecting other pods", err)
	external := svc.DeepCopy()
	external.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "evil.example"}
	_, err = services.Create(ctx, external, dry)
	refused("a tag Service pointing outside", err)

	strategy := `{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}`
	_, err = kube.AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(strategy), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	refused("changing Deployment shop/web's update strategy", err)
}

// TestRevisionsPolicyFencesWhereATagPoints: with the revisions controller's
// token, a tag webhook may call only istiod's Service in the Istio namespace
// or an injection URL the operator allowed (here the test injector's, as a
// remote istiod's), a tag Service lives only in the Istio namespace, and the
// injection labels of kube-*, the Istio namespace and nodewise's own stay as
// they are: no webhook to an outside URL with kube-system labelled onto its
// tag. What a migration writes still passes.
func TestRevisionsPolicyFencesWhereATagPoints(t *testing.T) {
	e := start(t, 3, "1.27.3")
	ctx := context.Background()
	e.namespace("shop", map[string]string{"istio.io/rev": "1-27"}, app{name: "web", replicas: 1})
	e.namespace("attacker", nil)
	kube := kubernetes.NewForConfigOrDie(e.asRevisionsServiceAccount())
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	refused := refusedByPolicy(t)
	allowed := allowedAsMigration(t)

	hooks := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	rev, err := e.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-sidecar-injector-1-27", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// calling builds tag x as nodewise does, each webhook calling cc.
	calling := func(cc admissionv1.WebhookClientConfig) *admissionv1.MutatingWebhookConfiguration {
		w, err := revtag.BuildWebhook(rev, "x")
		if err != nil {
			t.Fatal(err)
		}
		for i := range w.Webhooks {
			w.Webhooks[i].ClientConfig = cc
		}
		return w
	}
	url := func(u string) admissionv1.WebhookClientConfig { return admissionv1.WebhookClientConfig{URL: &u} }
	service := func(ns, name, path string) admissionv1.WebhookClientConfig {
		return admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: ns, Name: name, Path: &path}}
	}
	prefix := e.injectorURLPrefix() // https://127.0.0.1:PORT/inject/
	host := strings.TrimSuffix(prefix, "inject/")
	for what, cc := range map[string]admissionv1.WebhookClientConfig{
		"a tag webhook calling https://evil.example/inject":                    url("https://evil.example/inject"),
		"a tag webhook calling https://evil.example/inject/rev/1-27":           url("https://evil.example/inject/rev/1-27"),
		"a tag webhook calling the allowed host outside its path":              url(host + "mutate/rev/1-27"),
		"a tag webhook calling Service attacker/istiod":                        service("attacker", "istiod", "/inject"),
		"a tag webhook calling Service attacker/istiod-1-27":                   service("attacker", "istiod-1-27", "/inject/rev/1-27"),
		"a tag webhook calling Service istio-system/istiodx":                   service(cluster.IstioNamespace, "istiodx", "/inject"),
		"a tag webhook calling istiod's Service outside its /inject":           service(cluster.IstioNamespace, "istiod", "/debug/configz"),
		"a tag webhook calling istiod's Service at a path /inject only begins": service(cluster.IstioNamespace, "istiod", "/injectx"),
	} {
		_, err := hooks.Create(ctx, calling(cc), dry)
		refused(what, err)
	}
	for what, cc := range map[string]admissionv1.WebhookClientConfig{
		"a tag webhook calling the allowed injector":  url(prefix + "rev/1-27"),
		"a tag webhook calling istiod's Service":      service(cluster.IstioNamespace, "istiod", "/inject"),
		"a tag webhook calling istiod-1-27's Service": service(cluster.IstioNamespace, "istiod-1-27", "/inject/cluster/west/net/network1"),
	} {
		_, err := hooks.Create(ctx, calling(cc), dry)
		allowed(what, err)
	}

	svc := revtag.BuildService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "istiod-1-27", Namespace: cluster.IstioNamespace,
		Labels: map[string]string{"istio.io/rev": "1-27"}}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https-webhook", Port: 443}}}}, "x")
	outside := svc.DeepCopy()
	outside.Namespace = "attacker"
	_, err = kube.CoreV1().Services("attacker").Create(ctx, outside, dry)
	refused("the tag Service nodewise builds, in namespace attacker", err)
	_, err = kube.CoreV1().Services(cluster.IstioNamespace).Create(ctx, svc, dry)
	allowed("the tag Service nodewise builds, in the Istio namespace", err)

	e.namespace("nodewise-system-probe", nil) // a namespace merely named like nodewise's
	for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease", cluster.IstioNamespace, "nodewise-system"} {
		for _, label := range []string{`{"istio.io/rev":"x"}`, `{"istio-injection":"enabled"}`} {
			_, err := kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":`+label+`}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			refused("labelling namespace "+ns+" "+label, err)
		}
	}
	_, err = kube.CoreV1().Namespaces().Patch(ctx, "nodewise-system-probe", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":"x"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	allowed("labelling namespace nodewise-system-probe istio.io/rev=x", err)
	_, err = kube.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":"x"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	allowed("retagging namespace shop", err)
	_, err = kube.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":null}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	allowed("removing namespace shop's istio.io/rev", err)

	// A prefix without a slash after its host allows nothing: it would let
	// https://127.0.0.1.evil.example/ pass. The marker prefix says when the
	// API server enforces the new list.
	raw, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "deploy", "sidecar", "admission.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, e.c.Kubeconfig, allowInjectionURLs(t, string(raw), prefix, "https://127.0.0.1", "https://marker.example/inject/"))
	testkit.WaitFor(t, 30*time.Second, "the policy's new allow-list to be enforced", func() (bool, error) {
		_, err := hooks.Create(ctx, calling(url("https://marker.example/inject/rev/1-27")), dry)
		return err == nil, nil
	})
	_, err = hooks.Create(ctx, calling(url("https://127.0.0.1.evil.example/inject/rev/1-27")), dry)
	refused("a tag webhook calling https://127.0.0.1.evil.example/inject/ under the allowed prefix https://127.0.0.1", err)

	// The allow-list and the Istio namespace are the policy's own variables:
	// the token can neither widen them nor unbind the policy.
	widen := `{"spec":{"variables":[{"name":"istioNamespace","expression":"'attacker'"},{"name":"injectionURLs","expression":"['https://evil.example/']"}]}}`
	_, err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Patch(ctx, "nodewise-revisions", types.MergePatchType, []byte(widen), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("widening the policy's variables: %v, want Forbidden by RBAC", err)
	}
	err = kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, "nodewise-revisions", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) {
		t.Errorf("deleting the policy's binding: %v, want Forbidden by RBAC", err)
	}
}
