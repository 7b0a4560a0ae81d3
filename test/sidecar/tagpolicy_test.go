package sidecar

import (
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/sim/cluster"
)

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
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed, want refused by the policy", what)
		} else if !strings.Contains(err.Error(), "nodewise-revisions") {
			t.Errorf("%s: %v, want refused by the policy", what, err)
		}
	}

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
