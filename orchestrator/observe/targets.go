package observe

import (
	"encoding/json"
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
	if newest == nil {
		// A DaemonSet just created: its controller has not written its
		// first revision (or the cache does not have it yet). Nothing is
		// newest until it has; the plan waits, it does not refuse.
		tv.Settled = false
	} else {
		tv.NewestHash = newest.Labels[model.LabelControllerRevisionHash]
		if !revisionHasTemplate(newest, ds) {
			// The cache holds the DaemonSet's status for its new template
			// but not yet the revision the controller made for it (two
			// watches, no order between them): the newest revision known
			// is the old template's, and every pod would look up to date.
			tv.Settled = false
		}
	}
	return tv, nil
}

// revisionHasTemplate says a ControllerRevision is of the DaemonSet's current
// template, by its containers' names and images. The DaemonSet controller
// stores the template as {"spec":{"template":…}}; a revision without data
// (written by hand) is taken as it is.
func revisionHasTemplate(r *appsv1.ControllerRevision, ds *appsv1.DaemonSet) bool {
	if len(r.Data.Raw) == 0 {
		return true
	}
	var stored struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(r.Data.Raw, &stored); err != nil {
		return true
	}
	want, got := ds.Spec.Template.Spec.Containers, stored.Spec.Template.Spec.Containers
	return slices.EqualFunc(want, got, func(a, b corev1.Container) bool { return a.Name == b.Name && a.Image == b.Image })
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
