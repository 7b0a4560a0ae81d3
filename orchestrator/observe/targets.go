package observe

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	appslisters "k8s.io/client-go/listers/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Targets reads the target DaemonSets, their revisions and pods from the caches.
type Targets struct {
	DaemonSets appslisters.DaemonSetLister
	Revisions  appslisters.ControllerRevisionLister
	Pods       PodCache
}

// Target reads one DaemonSet and its newest ControllerRevision (by owner UID).
func (t Targets) Target(ref v1alpha1.TargetRef) (model.TargetView, error) {
	tv := model.TargetView{Ref: ref}
	ds, err := t.DaemonSets.DaemonSets(ref.Namespace).Get(ref.Name)
	if apierrors.IsNotFound(err) {
		return tv, nil
	}
	if err != nil {
		return tv, fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	tv.Found, tv.UID, tv.Strategy = true, ds.UID, ds.Spec.UpdateStrategy.Type
	tv.Settled = ds.Status.ObservedGeneration >= ds.Generation
	for _, c := range ds.Spec.Template.Spec.Containers {
		tv.Images = append(tv.Images, c.Image)
	}
	tv.ImagePullSecrets = slices.Clone(ds.Spec.Template.Spec.ImagePullSecrets)
	revs, err := t.Revisions.ControllerRevisions(ref.Namespace).List(labels.Everything())
	if err != nil {
		return tv, fmt.Errorf("listing ControllerRevisions in %s: %w", ref.Namespace, err)
	}
	var newest *appsv1.ControllerRevision
	for _, r := range revs {
		for _, o := range r.OwnerReferences {
			if o.UID == ds.UID && (newest == nil || r.Revision > newest.Revision) {
				newest = r
			}
		}
	}
	if newest != nil {
		tv.NewestHash = newest.Labels[model.LabelControllerRevisionHash]
	}
	return tv, nil
}

// OnNode returns the live and terminating pods of a target on a node.
func (t Targets) OnNode(tv model.TargetView, node string) (live []*corev1.Pod, terminating int, err error) {
	pods, err := t.Pods.OnNode(node)
	if err != nil {
		return nil, 0, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	for _, p := range pods {
		if p.Namespace != tv.Ref.Namespace || !OwnedBy(p, tv) {
			continue
		}
		if p.DeletionTimestamp != nil {
			terminating++
			continue
		}
		live = append(live, p)
	}
	return live, terminating, nil
}

// OwnedBy says the pod belongs to the target's DaemonSet.
func OwnedBy(p *corev1.Pod, tv model.TargetView) bool {
	for _, o := range p.OwnerReferences {
		if o.UID == tv.UID {
			return true
		}
	}
	return false
}

// PodView is the planner's view of a target's pod.
func PodView(p *corev1.Pod) model.PodView {
	ready, _ := model.PodReadyCondition(p)
	return model.PodView{Name: p.Name, UID: p.UID, Hash: p.Labels[model.LabelControllerRevisionHash], Ready: ready, Terminating: p.DeletionTimestamp != nil}
}
