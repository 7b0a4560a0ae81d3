package revtag

import (
	"fmt"
	"strings"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/istio"
)

// Names of the objects a tag is made of.
const (
	// WebhookPrefix + tag is a tag webhook's name.
	WebhookPrefix = "istio-revision-tag-"
	// ServicePrefix + tag is a tag Service's name.
	ServicePrefix = "istiod-revision-tag-"
	// injectorSuffix ends the name of every sidecar-injector webhook entry.
	injectorSuffix = "sidecar-injector.istio.io"
)

// WebhookName is the MutatingWebhookConfiguration name of a tag.
func WebhookName(tag string) string { return WebhookPrefix + tag }

// BuildWebhook derives a tag's MutatingWebhookConfiguration from a revision's
// injector webhook: the revision's client config, rules and policies, under
// the namespace and object selectors that make istio.io/rev=<tag> inject from
// that revision. It is pure.
func BuildWebhook(revision *admv1.MutatingWebhookConfiguration, tag string) (*admv1.MutatingWebhookConfiguration, error) {
	rev := revision.Labels[istio.LabelRev]
	if rev == "" {
		return nil, fmt.Errorf("webhook %s has no %s label", revision.Name, istio.LabelRev)
	}
	var base *admv1.MutatingWebhook
	for i := range revision.Webhooks {
		if strings.HasSuffix(revision.Webhooks[i].Name, injectorSuffix) {
			base = &revision.Webhooks[i]
			break
		}
	}
	if base == nil {
		return nil, fmt.Errorf("webhook %s has no *%s entry to derive the tag from", revision.Name, injectorSuffix)
	}
	labels := map[string]string{}
	for k, v := range revision.Labels {
		// Like istioctl's user-managed tags: drop the revision's app label and
		// the installer's ownership labels, so an installer never prunes the tag.
		if k == "app" || strings.Contains(k, "operator.istio.io") {
			continue
		}
		labels[k] = v
	}
	labels["app"] = "sidecar-injector"
	labels["app.kubernetes.io/name"] = "istiod"
	labels[istio.LabelTag] = tag
	labels[istio.LabelRev] = rev
	annotations := map[string]string{}
	for k, v := range revision.Annotations {
		annotations[k] = v
	}

	entry := func(prefix string, ns, obj *metav1.LabelSelector) admv1.MutatingWebhook {
		w := *base.DeepCopy()
		w.Name = prefix + injectorSuffix
		w.NamespaceSelector = ns
		w.ObjectSelector = obj
		return w
	}
	absent := func(k string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpDoesNotExist}
	}
	in := func(k, v string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}}
	}
	notIn := func(k, v string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpNotIn, Values: []string{v}}
	}
	sel := func(rs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: rs}
	}
	hooks := []admv1.MutatingWebhook{
		// Namespaces labelled istio.io/rev=<tag>.
		entry("rev.namespace.", sel(in(istio.LabelRev, tag), absent(istio.LabelInjection)), sel(notIn(istio.LabelInject, "false"))),
		// Unlabelled namespaces, pods labelled istio.io/rev=<tag>.
		entry("rev.object.", sel(absent(istio.LabelRev), absent(istio.LabelInjection)), sel(notIn(istio.LabelInject, "false"), in(istio.LabelRev, tag))),
	}
	if tag == istio.DefaultTag {
		hooks = append(hooks,
			entry("namespace.", sel(in(istio.LabelInjection, "enabled")), sel(notIn(istio.LabelInject, "false"))),
			entry("object.", sel(absent(istio.LabelInjection), absent(istio.LabelRev)), sel(in(istio.LabelInject, "true"), absent(istio.LabelRev))),
		)
	}
	return &admv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: WebhookName(tag), Labels: labels, Annotations: annotations},
		Webhooks:   hooks,
	}, nil
}

// BuildService derives the tag's istiod Service from the revision's istiod
// Service: same ports, selecting the revision's istiod pods.
func BuildService(revision *corev1.Service, tag string) *corev1.Service {
	rev := revision.Labels[istio.LabelRev]
	labels := map[string]string{}
	for k, v := range revision.Labels {
		if strings.Contains(k, "operator.istio.io") {
			continue
		}
		labels[k] = v
	}
	labels[istio.LabelTag] = tag
	labels[istio.LabelRev] = rev
	labels["app"] = "istiod"
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: revision.Namespace, Name: ServicePrefix + tag, Labels: labels},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "istiod", istio.LabelRev: rev},
		},
	}
	for _, p := range revision.Spec.Ports {
		p.NodePort = 0
		svc.Spec.Ports = append(svc.Spec.Ports, p)
	}
	return svc
}
