package orchestrator

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// Snapshot builds the planner's snapshot from the caches plus what this
// process wrote (claims, and the Nodes its patches returned: newestNode).
func (e *executor) Snapshot(nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, error) {
	s := model.Snapshot{Status: nr.Status}
	s.ResumeRequested = nr.Annotations[model.AnnotationResumeToken] != "" && nr.Annotations[model.AnnotationResumeToken] != nr.Annotations[model.AnnotationAckedResumeToken]
	for _, ref := range p.Targets {
		tv, err := e.targets.Target(ref)
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
			if !observe.OwnedBy(pod, tv) || pod.Spec.NodeName == "" {
				continue
			}
			pv := observe.PodView(pod)
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
	blocked, err := e.blockingPods(p.Blocking)
	if err != nil {
		return s, err
	}
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
			HeldBy: held[n.Name], Blocked: blocked[n.Name], Prepull: prepulls[n.Name],
		}
		if ready, since := model.NodeReadyCondition(n); !ready {
			nv.NotReadySince = since
			if since.IsZero() {
				nv.NotReadySince = n.CreationTimestamp.Time // never reported Ready
			}
		}
		if p.Opportunistic && n.Spec.Unschedulable {
			if nv.Drained, err = e.drained(n.Name); err != nil {
				return s, err
			}
		}
		rec := n.Annotations
		if w := e.nodeWrites.Newest(n.Name); w != nil {
			rec = w.Annotations
		}
		var fromRecord bool
		nv.State, fromRecord = nodestep.NodeState(e.claims.Claimed(nr.Name, n.Name), nodestep.ParseStep(rec), nr.UID, statusState[n.Name])
		nv.Retried = fromRecord && nv.State == v1alpha1.NodePending
		s.Nodes = append(s.Nodes, nv)
	}
	return s, nil
}

// drained: the cordoned node runs nothing a drain would evict (nodewise's
// own pre-pull pod aside), so someone else drained it.
func (e *executor) drained(node string) (bool, error) {
	pods, err := e.pods.OnNode(node)
	if err != nil {
		return false, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	for _, p := range nodestep.MovablePods(pods) {
		if _, prepull := p.Labels[model.LabelPrepull]; !prepull {
			return false, nil
		}
	}
	return true, nil
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
