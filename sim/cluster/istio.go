package cluster

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/sim/simpki"
)

// IstioNamespace is where the fixtures install Istio's control and data plane.
const IstioNamespace = "istio-system"

// Names of the ambient data-plane DaemonSets, as Istio's charts name them.
const (
	ZtunnelName = "ztunnel"
	CNIName     = "istio-cni-node"
)

// IstioOptions describe one install (or upgrade) of the Istio fixtures.
type IstioOptions struct {
	// Version is an Istio version such as 1.27.3. A suffix after the patch
	// number (1.28.1-rst, 1.28.1-neverready) is kept in the image tags, which
	// is how tests inject faulty builds.
	Version string
	// UpdateStrategy of both DaemonSets: OnDelete or RollingUpdate (the charts'
	// default: ztunnel maxSurge 1 / maxUnavailable 0, istio-cni maxUnavailable 1).
	// Empty means OnDelete, which nodewise requires.
	UpdateStrategy appsv1.DaemonSetUpdateStrategyType
	// InjectorURL returns the URL of a revision's sidecar injector. Empty means
	// an unreachable loopback address with failurePolicy Ignore, so pods in
	// sidecar namespaces start without a sidecar until a test registers an
	// injector (see sim/injector).
	InjectorURL func(revision string) string
	// CABundle is the injector's CA when InjectorURL is set.
	CABundle []byte
	// SkipSamples leaves out the sample workloads.
	SkipSamples bool
	// ControlPlaneOnly leaves out the data-plane DaemonSets (ztunnel,
	// istio-cni-node): istiod, its injector and the revision tag only, for a
	// test that brings a data plane of its own (TestChartOnRealNode's ztunnel,
	// from an image a real node can pull). The simulated ones tolerate every
	// taint and would land on a real node with images nobody serves.
	ControlPlaneOnly bool
}

var versionRE = regexp.MustCompile(`^(\d+)\.(\d+)\.(\d+)(-[a-z0-9-]+)?$`)

// Revision is the Istio revision name of a version: 1.27.3 → 1-27.
func Revision(version string) (string, error) {
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		return "", fmt.Errorf("version %q is not of the form 1.27.3 (optionally with a -suffix)", version)
	}
	return m[1] + "-" + m[2], nil
}

// InstallIstio creates or updates the fixtures, as `helm upgrade --install`
// of Istio's base, istiod (revisioned), istio-cni and ztunnel charts would:
// istiod-<rev> and its injector webhook are added beside older revisions, the
// `default` tag is created once (pointing at the first revision installed),
// and the DaemonSet templates move to the new version.
func InstallIstio(ctx context.Context, client kubernetes.Interface, opts IstioOptions) error {
	rev, err := Revision(opts.Version)
	if err != nil {
		return err
	}
	switch opts.UpdateStrategy {
	case "":
		opts.UpdateStrategy = appsv1.OnDeleteDaemonSetStrategyType
	case appsv1.OnDeleteDaemonSetStrategyType, appsv1.RollingUpdateDaemonSetStrategyType:
	default:
		return fmt.Errorf("update strategy must be OnDelete or RollingUpdate, got %q", opts.UpdateStrategy)
	}
	in := installer{client: client, opts: opts, rev: rev}
	steps := []func(context.Context) error{in.namespace, in.serviceAccounts, in.istiod, in.injector, in.defaultTag}
	if !opts.ControlPlaneOnly {
		steps = append(steps,
			func(ctx context.Context) error { return in.daemonSet(ctx, cniDaemonSet(opts, rev)) },
			func(ctx context.Context) error { return in.daemonSet(ctx, ztunnelDaemonSet(opts, rev)) })
	}
	if !opts.SkipSamples {
		steps = append(steps, in.samples)
	}
	steps = append(steps, in.caRootCert) // last: into the samples' namespaces too
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return fmt.Errorf("installing Istio %s: %w", opts.Version, err)
		}
	}
	return nil
}

type installer struct {
	client kubernetes.Interface
	opts   IstioOptions
	rev    string
}

func (in installer) namespace(ctx context.Context) error {
	return createIfMissing(ctx, in.client.CoreV1().Namespaces().Create, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: IstioNamespace}})
}

func (in installer) serviceAccounts(ctx context.Context) error {
	for _, name := range []string{"ztunnel", "istio-cni", "istiod-" + in.rev} {
		err := createIfMissing(ctx, in.client.CoreV1().ServiceAccounts(IstioNamespace).Create, &corev1.ServiceAccount{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: IstioNamespace}})
		if err != nil {
			return err
		}
	}
	return nil
}

// caRootCertName is the ConfigMap istiod publishes in every namespace with
// the mesh's root certificate; Istio's charts mount it (ztunnel, gateways).
const caRootCertName = "istio-ca-root-cert"

// caRootCert publishes istio-ca-root-cert, as istiod does, in every
// namespace that exists now (one root for the whole simulated mesh).
func (in installer) caRootCert(ctx context.Context) error {
	nsl, err := in.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	var root string
	for _, ns := range nsl.Items {
		if ns.DeletionTimestamp != nil {
			continue
		}
		if _, err := in.client.CoreV1().ConfigMaps(ns.Name).Get(ctx, caRootCertName, metav1.GetOptions{}); err == nil {
			continue
		}
		if root == "" {
			ca, err := simpki.NewCA("simulated mesh root", 10*365*24*time.Hour)
			if err != nil {
				return fmt.Errorf("making the mesh root: %w", err)
			}
			root = string(ca.CertPEM())
		}
		err := createIfMissing(ctx, in.client.CoreV1().ConfigMaps(ns.Name).Create, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: caRootCertName, Namespace: ns.Name, Labels: map[string]string{"istio.io/config": "true"}},
			Data:       map[string]string{"root-cert.pem": root},
		})
		if err != nil {
			return fmt.Errorf("publishing %s in %s: %w", caRootCertName, ns.Name, err)
		}
	}
	return nil
}

func (in installer) istiod(ctx context.Context) error {
	labels := map[string]string{"app": "istiod", "istio": "pilot", "istio.io/rev": in.rev}
	one := int32(1)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "istiod-" + in.rev, Namespace: IstioNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "istiod", "istio.io/rev": in.rev}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{"sidecar.istio.io/inject": "false"}},
				Spec: corev1.PodSpec{
					ServiceAccountName: "istiod-" + in.rev,
					Containers: []corev1.Container{{
						Name: "discovery", Image: "docker.io/istio/pilot:" + in.opts.Version,
						Args: []string{"discovery", "--monitoringAddr=:15014", "--log_output_level=default:info"},
						Ports: []corev1.ContainerPort{
							{Name: "http-debug", ContainerPort: 8080}, {Name: "grpc-xds", ContainerPort: 15010},
							{Name: "tls-xds", ContainerPort: 15012}, {Name: "https-webhooks", ContainerPort: 15017},
							{Name: "http-monitoring", ContainerPort: 15014},
						},
						Env: []corev1.EnvVar{{Name: "REVISION", Value: in.rev}, {Name: "PILOT_ENABLE_AMBIENT", Value: "true"}},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/ready", Port: intstr.FromInt32(8080)}}},
					}},
				},
			},
		},
	}
	return createIfMissing(ctx, in.client.AppsV1().Deployments(IstioNamespace).Create, d)
}

// injectorConfig is the revision's own injector webhook configuration,
// istio-sidecar-injector-<rev>, which revision tags are derived from.
func (in installer) injector(ctx context.Context) error {
	return createIfMissing(ctx, in.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create,
		injectorWebhook("istio-sidecar-injector-"+in.rev, in.rev, "", in.opts))
}

// defaultTag creates the `default` revision tag for the first revision
// installed; later installs leave it where it points.
func (in installer) defaultTag(ctx context.Context) error {
	return createIfMissing(ctx, in.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create,
		injectorWebhook("istio-revision-tag-default", in.rev, "default", in.opts))
}

// injectorWebhook builds an injector configuration shaped like Istio's: one
// webhook for namespaces labelled istio.io/rev=<rev or tag>, one for pods so
// labelled in unlabelled namespaces; the default tag also answers the legacy
// istio-injection=enabled label.
func injectorWebhook(name, rev, tag string, opts IstioOptions) *admissionregistrationv1.MutatingWebhookConfiguration {
	selectorValue := rev
	labels := map[string]string{"app": "sidecar-injector", "istio.io/rev": rev}
	if tag != "" {
		selectorValue = tag
		labels["istio.io/tag"] = tag
	}
	url := fmt.Sprintf("https://127.0.0.1:1/inject/cluster/Kubernetes/net/network1/rev/%s", rev)
	policy := admissionregistrationv1.Ignore
	if opts.InjectorURL != nil {
		url, policy = opts.InjectorURL(rev), admissionregistrationv1.Fail
	}
	none := admissionregistrationv1.SideEffectClassNone
	timeout := int32(10)
	hook := func(hookName string, ns, obj *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
		u := url
		return admissionregistrationv1.MutatingWebhook{
			Name:                    hookName,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: opts.CABundle},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}},
			FailurePolicy:           &policy,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1beta1", "v1"},
			TimeoutSeconds:          &timeout,
			NamespaceSelector:       ns,
			ObjectSelector:          obj,
			ReinvocationPolicy:      ptrTo(admissionregistrationv1.NeverReinvocationPolicy),
			MatchPolicy:             ptrTo(admissionregistrationv1.Equivalent),
		}
	}
	notDisabled := metav1.LabelSelectorRequirement{Key: "sidecar.istio.io/inject", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}}
	hooks := []admissionregistrationv1.MutatingWebhook{
		hook("rev.namespace.sidecar-injector.istio.io",
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "istio.io/rev", Operator: metav1.LabelSelectorOpIn, Values: []string{selectorValue}},
				{Key: "istio-injection", Operator: metav1.LabelSelectorOpDoesNotExist}}},
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notDisabled}}),
		hook("rev.object.sidecar-injector.istio.io",
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "istio.io/rev", Operator: metav1.LabelSelectorOpDoesNotExist},
				{Key: "istio-injection", Operator: metav1.LabelSelectorOpDoesNotExist}}},
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notDisabled,
				{Key: "istio.io/rev", Operator: metav1.LabelSelectorOpIn, Values: []string{selectorValue}}}}),
	}
	if tag == "default" {
		hooks = append(hooks, hook("namespace.sidecar-injector.istio.io",
			&metav1.LabelSelector{MatchLabels: map[string]string{"istio-injection": "enabled"}},
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{notDisabled}}))
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Webhooks:   hooks,
	}
}

// daemonSet creates ds, or moves an existing one to ds's template and
// strategy, as a chart upgrade would.
func (in installer) daemonSet(ctx context.Context, ds *appsv1.DaemonSet) error {
	api := in.client.AppsV1().DaemonSets(IstioNamespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, ds.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, ds, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		cur.Labels, cur.Spec.Template, cur.Spec.UpdateStrategy = ds.Labels, ds.Spec.Template, ds.Spec.UpdateStrategy
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func createIfMissing[T any](ctx context.Context, create func(context.Context, T, metav1.CreateOptions) (T, error), obj T) error {
	_, err := create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func ptrTo[T any](v T) *T { return &v }

// samples creates the sample workloads: ambient namespaces whose pods ztunnel
// serves, and sidecar namespaces that follow the `default` tag.
func (in installer) samples(ctx context.Context) error {
	type app struct {
		name     string
		replicas int32
	}
	for _, ns := range []struct {
		name   string
		labels map[string]string
		apps   []app
	}{
		{"shop", map[string]string{"istio.io/dataplane-mode": "ambient"}, []app{{"frontend", 2}, {"cart", 3}}},
		{"payments", map[string]string{"istio.io/dataplane-mode": "ambient"}, []app{{"api", 2}}},
		{"catalog", map[string]string{"istio.io/rev": "default"}, []app{{"search", 2}}},
		{"ledger", map[string]string{"istio.io/rev": "default"}, []app{{"books", 2}}},
	} {
		err := createIfMissing(ctx, in.client.CoreV1().Namespaces().Create, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: ns.name, Labels: ns.labels}})
		if err != nil {
			return err
		}
		for _, a := range ns.apps {
			if err := createIfMissing(ctx, in.client.AppsV1().Deployments(ns.name).Create, sampleDeployment(ns.name, a.name, a.replicas)); err != nil {
				return err
			}
			pdb := &policyv1.PodDisruptionBudget{
				ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: ns.name},
				Spec: policyv1.PodDisruptionBudgetSpec{
					MaxUnavailable: ptrTo(intstr.FromInt32(1)),
					Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": a.name}},
				},
			}
			if err := createIfMissing(ctx, in.client.PolicyV1().PodDisruptionBudgets(ns.name).Create, pdb); err != nil {
				return err
			}
		}
	}
	return nil
}

func sampleDeployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name, "version": "v1"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptrTo(int64(30)),
					Containers: []corev1.Container{{
						Name: name, Image: "docker.io/nodewise/sample-" + name + ":1.0",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					}},
				},
			},
		},
	}
}

// SetImageTag points every container of an Istio DaemonSet at another image
// tag, as a chart upgrade to that build would (OnDelete: no pod changes by
// itself). It retries on conflict.
func SetImageTag(ctx context.Context, c kubernetes.Interface, name, tag string) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		api := c.AppsV1().DaemonSets(IstioNamespace)
		ds, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for i := range ds.Spec.Template.Spec.Containers {
			img := ds.Spec.Template.Spec.Containers[i].Image
			if j := strings.LastIndex(img, ":"); j >= 0 {
				img = img[:j]
			}
			ds.Spec.Template.Spec.Containers[i].Image = img + ":" + tag
		}
		_, err = api.Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting the image tag of %s/%s to %s: %w", IstioNamespace, name, tag, err)
	}
	return nil
}
