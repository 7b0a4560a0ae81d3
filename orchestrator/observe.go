package orchestrator

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// observe builds the planner's snapshot from the caches plus what this
// process wrote (claims, and the Nodes its patches returned: newestNode).
func (e *executor) observe(nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, error) {
	s := model.Snapshot{Status: nr.Status}
	s.ResumeRequested = nr.Annotations[model.AnnotationResumeToken] != "" && nr.Annotations[model.AnnotationResumeToken] != nr.Annotations[model.AnnotationAckedResumeToken]
	for _, ref := range p.Targets {
		tv, err := e.target(ref)
		if err != nil {
			return s, err
		}
		s.Targets = append(s.Targets, tv)
	}
	nodes, err := e.nodes.List(labels.Everything())
	if err != nil {
		return s, fmt.Errorf("listing nodes: %w", err)
	}
	byNode := map[string]map[string]model.PodView{}
	for _, tv := range s.Targets {
		if !tv.Found {
			continue
		}
		pods, err := e.pods.Pods(tv.Ref.Namespace).List(labels.Everything())
		if err != nil {
			return s, fmt.Errorf("listing pods in %s: %w", tv.Ref.Namespace, err)
		}
		for _, pod := range pods {
			if !ownedBy(pod, tv) || pod.Spec.NodeName == "" {
				continue
			}
			pv := podView(pod)
			m := byNode[pod.Spec.NodeName]
			if m == nil {
				m = map[string]model.PodView{}
				byNode[pod.Spec.NodeName] = m
			}
			// Prefer the live pod over one that is terminating.
			if old, ok := m[tv.Key()]; !ok || (old.Terminating && !pv.Terminating) {
				m[tv.Key()] = pv
			}
		}
	}
	held, unreadable, err := e.otherMaintenance()
	if err != nil {
		return s, err
	}
	s.UnreadableLocks = unreadable
	prepulls, err := e.prepullPods(nr.Name, p.Targets)
	if err != nil {
		return s, err
	}
	statusState := map[string]v1alpha1.NodeState{}
	for _, ns := range nr.Status.Nodes {
		statusState[ns.Name] = ns.State
	}
	for _, n := range nodes {
		nv := model.NodeView{
			Name: n.Name, Zone: n.Labels[model.LabelZone], Labels: n.Labels,
			Unschedulable: n.Spec.Unschedulable, Ready: model.NodeReady(n), Pods: byNode[n.Name],
			HeldBy: held[n.Name], Prepull: prepulls[n.Name],
		}
		rec := n.Annotations
		if w := e.newestNode(n.Name); w != nil {
			rec = w.Annotations
		}
		var fromRecord bool
		nv.State, fromRecord = nodestep.NodeState(e.claimedBy(nr.Name, n.Name), nodestep.ParseStep(rec), nr.UID, statusState[n.Name])
		nv.Retried = fromRecord && nv.State == v1alpha1.NodePending
		s.Nodes = append(s.Nodes, nv)
	}
	return s, nil
}

// target reads one DaemonSet and its newest ControllerRevision (by owner UID).
func (e *executor) target(ref v1alpha1.TargetRef) (model.TargetView, error) {
	tv := model.TargetView{Ref: ref}
	ds, err := e.dss.DaemonSets(ref.Namespace).Get(ref.Name)
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
	revs, err := e.revs.ControllerRevisions(ref.Namespace).List(labels.Everything())
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

func ownedBy(p *corev1.Pod, tv model.TargetView) bool {
	for _, o := range p.OwnerReferences {
		if o.UID == tv.UID {
			return true
		}
	}
	return false
}

func podView(p *corev1.Pod) model.PodView {
	ready, _ := model.PodReadyCondition(p)
	return model.PodView{Name: p.Name, UID: p.UID, Hash: p.Labels[model.LabelControllerRevisionHash], Ready: ready, Terminating: p.DeletionTimestamp != nil}
}

// targetPods returns the live and terminating pods of a target on a node.
func (e *executor) targetPods(tv model.TargetView, node string) (live []*corev1.Pod, terminating int, err error) {
	pods, err := e.pods.OnNode(node)
	if err != nil {
		return nil, 0, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	for _, p := range pods {
		if p.Namespace != tv.Ref.Namespace || !ownedBy(p, tv) {
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

// otherMaintenance is, per node, why another tool holds it (Kured's lock,
// an SUC plan's job), from the caches.
func (e *executor) otherMaintenance() (map[string]string, []string, error) {
	dss, err := e.dss.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("listing DaemonSets for Kured's lock: %w", err)
	}
	held, unreadable := planner.KuredHolders(dss)
	pods, err := e.pods.List(planner.SUCPodSelector())
	if err != nil {
		return nil, nil, fmt.Errorf("listing system-upgrade-controller pods: %w", err)
	}
	for n, why := range planner.SUCHolders(pods) {
		if _, ok := held[n]; !ok {
			held[n] = why
		}
	}
	return held, unreadable, nil
}

// overlapping reads every NodeRollout and node from the caches.
func (e *executor) overlapping(nr *v1alpha1.NodeRollout, p model.Policy) error {
	var all []*v1alpha1.NodeRollout
	for _, obj := range e.rolloutStore.List() {
		all = append(all, obj.(*v1alpha1.NodeRollout))
	}
	if len(all) < 2 {
		return nil
	}
	nodes, err := e.nodes.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	return planner.Overlapping(nr, p, all, nodes)
}
