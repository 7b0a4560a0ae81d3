package revtag

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	admv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/istio"
)

var (
	// ErrUnknownRevision: no injector webhook carries the revision.
	ErrUnknownRevision = errors.New("unknown revision")
	// ErrTagExists: the tag exists and --overwrite was not given.
	ErrTagExists = errors.New("revision tag already exists")
	// ErrUnknownTag: no webhook carries the tag.
	ErrUnknownTag = errors.New("unknown revision tag")
	// ErrTagIsRevision: the tag name is taken by a revision.
	ErrTagIsRevision = errors.New("tag name collides with a revision")
)

// Tag is a revision tag and the namespaces that use it.
type Tag struct {
	Name       string   `json:"tag"`
	Revision   string   `json:"revision"`
	Namespaces []string `json:"namespaces"`
}

// List returns every tag (from istio.io/tag webhooks and tag Services), sorted
// by revision then name, with the namespaces labelled istio.io/rev=<tag>.
func List(ctx context.Context, client kubernetes.Interface, istioNamespace string) ([]Tag, error) {
	tags := map[string]string{}
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelTag})
	if err != nil {
		return nil, fmt.Errorf("listing tag webhooks: %w", err)
	}
	for _, wh := range whs.Items {
		tags[wh.Labels[istio.LabelTag]] = wh.Labels[istio.LabelRev]
	}
	svcs, err := client.CoreV1().Services(istioNamespace).List(ctx, metav1.ListOptions{LabelSelector: istio.LabelTag})
	if err != nil {
		return nil, fmt.Errorf("listing tag services in %s: %w", istioNamespace, err)
	}
	for _, s := range svcs.Items {
		if _, ok := tags[s.Labels[istio.LabelTag]]; !ok {
			tags[s.Labels[istio.LabelTag]] = s.Labels[istio.LabelRev]
		}
	}
	var out []Tag
	for name, rev := range tags {
		nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelRev + "=" + name})
		if err != nil {
			return nil, fmt.Errorf("listing namespaces of tag %s: %w", name, err)
		}
		t := Tag{Name: name, Revision: rev, Namespaces: []string{}}
		for _, ns := range nss.Items {
			t.Namespaces = append(t.Namespaces, ns.Name)
		}
		sort.Strings(t.Namespaces)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Revision != out[j].Revision {
			return out[i].Revision < out[j].Revision
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Get returns the revision a tag points at.
func Get(ctx context.Context, client kubernetes.Interface, tag string) (string, error) {
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelTag + "=" + tag})
	if err != nil {
		return "", fmt.Errorf("looking up tag %s: %w", tag, err)
	}
	if len(whs.Items) == 0 {
		return "", fmt.Errorf("%w %q", ErrUnknownTag, tag)
	}
	return whs.Items[0].Labels[istio.LabelRev], nil
}

// RevisionWebhook returns the revision's own injector webhook: labelled
// istio.io/rev=<rev> and not istio.io/tag.
func RevisionWebhook(ctx context.Context, client kubernetes.Interface, rev string) (*admv1.MutatingWebhookConfiguration, error) {
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelRev + "=" + rev + ",!" + istio.LabelTag})
	if err != nil {
		return nil, fmt.Errorf("looking up revision %s: %w", rev, err)
	}
	switch len(whs.Items) {
	case 0:
		known, _ := Revisions(ctx, client)
		return nil, fmt.Errorf("%w %q: no MutatingWebhookConfiguration is labelled %s=%s (installed revisions: %s)",
			ErrUnknownRevision, rev, istio.LabelRev, rev, strings.Join(known, ", "))
	case 1:
		return &whs.Items[0], nil
	default:
		return nil, fmt.Errorf("revision %q has %d injector webhooks; expected one", rev, len(whs.Items))
	}
}

// Revisions lists the revisions that have an injector webhook.
func Revisions(ctx context.Context, client kubernetes.Interface) ([]string, error) {
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelRev + ",!" + istio.LabelTag})
	if err != nil {
		return nil, fmt.Errorf("listing revision webhooks: %w", err)
	}
	var revs []string
	for _, wh := range whs.Items {
		revs = append(revs, wh.Labels[istio.LabelRev])
	}
	sort.Strings(revs)
	return revs, nil
}

// SetOptions say which tag points where.
type SetOptions struct {
	Tag            string
	Revision       string
	IstioNamespace string
	// Overwrite allows moving an existing tag.
	Overwrite bool
	// FieldManager names the writes in managedFields (empty: the client's
	// default, from its user agent).
	FieldManager string
}

// Set creates the tag, or moves it when Overwrite is set. It validates
// everything before writing anything.
func Set(ctx context.Context, client kubernetes.Interface, o SetOptions) error {
	if o.Tag == "" || o.Revision == "" {
		return errors.New("tag and revision are required")
	}
	if o.IstioNamespace == "" {
		o.IstioNamespace = istio.DefaultNamespace
	}
	revWH, err := RevisionWebhook(ctx, client, o.Revision)
	if err != nil {
		return err
	}
	if !o.Overwrite {
		if _, err := RevisionWebhook(ctx, client, o.Tag); err == nil {
			return fmt.Errorf("%w: %q is an installed revision; pick another tag name", ErrTagIsRevision, o.Tag)
		}
		if cur, err := Get(ctx, client, o.Tag); err == nil {
			return fmt.Errorf("%w: %q points at %s; pass --overwrite to move it to %s", ErrTagExists, o.Tag, cur, o.Revision)
		}
	}
	want, err := BuildWebhook(revWH, o.Tag)
	if err != nil {
		return err
	}
	if err := applyWebhook(ctx, client, want, o.FieldManager); err != nil {
		return err
	}
	return applyService(ctx, client, o)
}

func applyWebhook(ctx context.Context, client kubernetes.Interface, want *admv1.MutatingWebhookConfiguration, manager string) error {
	api := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, want, metav1.CreateOptions{FieldManager: manager})
			if err != nil {
				return fmt.Errorf("creating %s: %w", want.Name, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", want.Name, err)
		}
		next := cur.DeepCopy()
		next.Labels, next.Annotations, next.Webhooks = want.Labels, want.Annotations, want.Webhooks
		if _, err := api.Update(ctx, next, metav1.UpdateOptions{FieldManager: manager}); err != nil {
			return fmt.Errorf("moving %s: %w", want.Name, err)
		}
		return nil
	})
}

// applyService keeps istioctl's tag Service in step: created when the
// revision has an istiod Service, moved whenever one exists.
func applyService(ctx context.Context, client kubernetes.Interface, o SetOptions) error {
	api := client.CoreV1().Services(o.IstioNamespace)
	revSvcs, err := api.List(ctx, metav1.ListOptions{LabelSelector: istio.LabelRev + "=" + o.Revision + ",!" + istio.LabelTag + ",app=istiod"})
	if err != nil {
		return fmt.Errorf("listing istiod services of %s: %w", o.Revision, err)
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, ServicePrefix+o.Tag, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if len(revSvcs.Items) == 0 {
				return nil
			}
			if _, err := api.Create(ctx, BuildService(&revSvcs.Items[0], o.Tag), metav1.CreateOptions{FieldManager: o.FieldManager}); err != nil {
				return fmt.Errorf("creating tag service %s: %w", ServicePrefix+o.Tag, err)
			}
			return nil
		case err != nil:
			return fmt.Errorf("reading tag service: %w", err)
		}
		next := cur.DeepCopy()
		if len(revSvcs.Items) > 0 {
			want := BuildService(&revSvcs.Items[0], o.Tag)
			next.Labels, next.Spec.Selector, next.Spec.Ports = want.Labels, want.Spec.Selector, want.Spec.Ports
		} else {
			next.Labels[istio.LabelRev] = o.Revision
			next.Spec.Selector = map[string]string{"app": "istiod", istio.LabelRev: o.Revision}
		}
		if _, err := api.Update(ctx, next, metav1.UpdateOptions{FieldManager: o.FieldManager}); err != nil {
			return fmt.Errorf("moving tag service %s: %w", next.Name, err)
		}
		return nil
	})
}

// Remove deletes a tag's webhooks and Service. It refuses while namespaces use the tag.
func Remove(ctx context.Context, client kubernetes.Interface, tag, istioNamespace string) error {
	if _, err := Get(ctx, client, tag); err != nil {
		return err
	}
	nss, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelRev + "=" + tag})
	if err != nil {
		return fmt.Errorf("listing namespaces of tag %s: %w", tag, err)
	}
	if len(nss.Items) > 0 {
		var names []string
		for _, ns := range nss.Items {
			names = append(names, ns.Name)
		}
		return fmt.Errorf("tag %q is still used by namespaces %s; relabel them first", tag, strings.Join(names, ","))
	}
	whs, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{LabelSelector: istio.LabelTag + "=" + tag})
	if err != nil {
		return fmt.Errorf("listing tag webhooks: %w", err)
	}
	for _, wh := range whs.Items {
		if err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, wh.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s: %w", wh.Name, err)
		}
	}
	err = client.CoreV1().Services(istioNamespace).Delete(ctx, ServicePrefix+tag, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting tag service: %w", err)
	}
	return nil
}
