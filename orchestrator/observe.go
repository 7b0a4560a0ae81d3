package orchestrator

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
)

// Snapshot builds the planner's snapshot from the caches plus what this
// process wrote (claims, and the Nodes its patches returned: newestNode).
func (e *executor) Snapshot(nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, error) {
	s, _, err := e.observe(nr, p)
	return s, err
}

// viewInputs are what a node's view is built from besides the node and the
// pods bound to it, read once per full pass (the rollout's, the fleet's),
// and kept with its views (views.go) to rebuild one node's view alone.
type viewInputs struct {
	rollout     string
	uid         types.UID
	targets     []model.TargetView
	opportunist bool
	// held: why another tool holds each node (otherMaintenance).
	held map[string]string
	// blocking is spec.blocking.podSelector (nil: none).
	blocking labels.Selector
	// prepullWant: the targets with images to pre-pull, by key.
	prepullWant map[string]bool
	// status is each node's state in the rollout's status.
	status map[string]v1alpha1.NodeState
}

// nodePods are a node's pods as its view reads them.
type nodePods struct {
	targets map[string]model.PodView // by target key
	blocked string
	prepull model.PrepullView
}

// observe builds the snapshot and returns the inputs its node views were
// built from.
func (e *executor) observe(nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, *viewInputs, error) {
	s := model.Snapshot{Status: nr.Status, ResumeRequested: model.ResumeRequested(nr.Annotations)}
	for _, ref := range p.Targets {
		tv, err := e.targets.Target(ref)
		if err != nil {
			return s, nil, err
		}
		s.Targets = append(s.Targets, tv)
	}
	nodes, err := e.nodes.List(labels.Everything())
	if err != nil {
		return s, nil, fmt.Errorf("listing nodes: %w", err)
	}
	in := &viewInputs{rollout: nr.Name, uid: nr.UID, targets: s.Targets, opportunist: p.Opportunistic, blocking: p.Blocking.Pods, prepullWant: prepull.Want(s.Targets)}
	byNode := map[string]*nodePods{}
	at := func(node string) *nodePods {
		np := byNode[node]
		if np == nil {
			np = &nodePods{}
			byNode[node] = np
		}
		return np
	}
	for _, ns := range targetNamespaces(s.Targets) {
		pods, err := e.pods.Pods(ns).List(labels.Everything())
		if err != nil {
			return s, nil, fmt.Errorf("listing pods in %s: %w", ns, err)
		}
		for _, pod := range pods {
			if pod.Spec.NodeName != "" {
				addTargetPod(at(pod.Spec.NodeName), pod, s.Targets)
			}
		}
	}
	var unreadable []string
	in.held, unreadable, err = e.otherMaintenance()
	if err != nil {
		return s, nil, err
	}
	s.UnreadableLocks = unreadable
	blocked, err := e.blockingPods(p.Blocking)
	if err != nil {
		return s, nil, err
	}
	for node, why := range blocked {
		at(node).blocked = why
	}
	prepulls, err := e.prepullPods(nr.Name, s.Targets)
	if err != nil {
		return s, nil, err
	}
	for node, pv := range prepulls {
		at(node).prepull = pv
	}
	in.status = make(map[string]v1alpha1.NodeState, len(nr.Status.Nodes))
	for _, ns := range nr.Status.Nodes {
		in.status[ns.Name] = ns.State
	}
	none := &nodePods{}
	for _, n := range nodes {
		np := byNode[n.Name]
		if np == nil {
			np = none
		}
		nv, err := e.nodeView(n, np, in)
		if err != nil {
			return s, nil, err
		}
		s.Nodes = append(s.Nodes, nv)
	}
	return s, in, nil
}

// addTargetPod puts pod in np if a target owns it, preferring the live pod
// over one that is terminating.
func addTargetPod(np *nodePods, pod *corev1.Pod, targets []model.TargetView) {
	for _, tv := range targets {
		if !tv.Found || !observe.OwnedBy(pod, tv) {
			continue
		}
		pv := observe.PodView(pod)
		if np.targets == nil {
			np.targets = map[string]model.PodView{}
		}
		if old, ok := np.targets[tv.Key()]; !ok || (old.Terminating && !pv.Terminating) {
			np.targets[tv.Key()] = pv
		}
	}
}

// nodeView is one node's view from the node, its pods and the pass's inputs.
func (e *executor) nodeView(n *corev1.Node, np *nodePods, in *viewInputs) (model.NodeView, error) {
	nv := model.NodeView{
		Name: n.Name, Zone: n.Labels[model.LabelZone], Labels: n.Labels,
		Unschedulable: n.Spec.Unschedulable, Ready: model.NodeReady(n), Pods: np.targets,
		HeldBy: in.held[n.Name], Blocked: np.blocked, Prepull: np.prepull,
	}
	if ready, since := model.NodeReadyCondition(n); !ready {
		nv.NotReadySince = since
		if since.IsZero() {
			nv.NotReadySince = n.CreationTimestamp.Time // never reported Ready
		}
	}
	if in.opportunist && n.Spec.Unschedulable {
		var err error
		if nv.Drained, err = e.drained(n.Name); err != nil {
			return nv, err
		}
	}
	rec := n.Annotations
	if w := e.nodeWrites.Newest(n.Name); w != nil {
		rec = w.Annotations
	}
	var fromRecord bool
	step := nodestep.ParseStep(rec)
	nv.State, fromRecord = nodestep.NodeState(e.claims.Claimed(in.rollout, n.Name), step, in.uid, in.status[n.Name])
	nv.Retried = fromRecord && nv.State == v1alpha1.NodePending
	if nv.HeldBy == "" {
		nv.HeldBy = step.HeldByAnother(in.uid, e.rolloutLives)
	}
	return nv, nil
}

// rolloutLives says the rollout cache holds a NodeRollout of that name
// and UID.
func (e *executor) rolloutLives(name string, uid types.UID) bool {
	obj, ok, err := e.rolloutStore.GetByKey(name)
	return err == nil && ok && obj.(*v1alpha1.NodeRollout).UID == uid
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
	held, unreadable := locks.KuredHolders(dss, e.kuredClock.Now(e.cfg.Now())) // Kured wrote its lock by its clock: the API server's, best known
	pods, err := e.pods.List(locks.SUCPodSelector())
	if err != nil {
		return nil, nil, fmt.Errorf("listing system-upgrade-controller pods: %w", err)
	}
	for n, why := range locks.SUCHolders(pods) {
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

// typeTargets reads the targets from the DaemonSet cache.
func (e *executor) typeTargets(p model.Policy) (model.Policy, error) {
	return model.TypeTargets(p, func(ns, name string) (*appsv1.DaemonSet, error) { return e.dss.DaemonSets(ns).Get(name) })
}
