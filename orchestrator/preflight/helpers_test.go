package preflight

import (
	"errors"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// dep is a Deployment whose first container (discovery) runs image.
func dep(ns, name string, lbl map[string]string, image string, ready int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbl},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "discovery", Image: image}}}}},
		Status: appsv1.DeploymentStatus{ReadyReplicas: ready},
	}
}

// istiod is a ready istiod Deployment of revision rev in istio-system.
func istiod(rev, version string) *appsv1.Deployment {
	return dep("istio-system", "istiod-"+rev, map[string]string{"app": "istiod", istio.LabelRev: rev}, "istio/pilot:"+version, 1)
}

// wh is a MutatingWebhookConfiguration with labels lbl.
func wh(name string, lbl map[string]string) *admissionv1.MutatingWebhookConfiguration {
	return &admissionv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}
}

// tagWebhook is the revision-tag webhook pointing tag at rev.
func tagWebhook(tag, rev string) *admissionv1.MutatingWebhookConfiguration {
	return wh("istio-revision-tag-"+tag, map[string]string{istio.LabelTag: tag, istio.LabelRev: rev})
}

// targetDS is a target DaemonSet in istio-system whose template runs image
// at revision rev (no container when image is empty).
func targetDS(name, image, rev string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: name}}
	ds.Spec.Template.Labels = map[string]string{"app": name, istio.LabelRev: rev}
	if image != "" {
		ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: name, Image: image}}
	}
	return ds
}

// daemonSets is a DaemonSet lister over dss, as the informer cache is.
func daemonSets(dss ...*appsv1.DaemonSet) appslisters.DaemonSetLister {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, ds := range dss {
		if err := idx.Add(ds); err != nil {
			panic(err)
		}
	}
	return appslisters.NewDaemonSetLister(idx)
}

// haltOf is the halt err carries, if it is one.
func haltOf(err error) (*nodestep.StepError, bool) {
	var se *nodestep.StepError
	return se, errors.As(err, &se)
}
