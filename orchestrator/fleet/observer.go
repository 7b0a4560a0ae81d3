// Package fleet is a reconcile pass's read side: it observes a
// NodeRollout's fleet (the planner's snapshot, from the informer caches and
// what this process wrote), and decides the pass's effects from it (Pass).
// It holds no writer: the orchestrator's applier carries the effects out.
package fleet

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/prepull"
)

// Observer reads what a pass plans from: the informer caches, the nodes
// this process claimed and the Nodes its patches returned, and (to decide
// a pass) the API server's copy of the target DaemonSets and the gate's
// Prometheus. Every field is a reader.
type Observer struct {
	Nodes      corelisters.NodeLister
	Pods       observe.PodCache
	DaemonSets appslisters.DaemonSetLister
	Targets    observe.Targets
	// Rollouts is the NodeRollout cache (overlaps, whose records are
	// alive); nil: none is known.
	Rollouts cache.Store
	Claims   *observe.Claims
	// Written is the newest copy of each node this process wrote
	// (write.Nodes): a node's record as this process last left it.
	Written interface {
		Newest(node string) *corev1.Node
	}
	// KuredClock is the API server's clock, which Kured's lock is written by.
	KuredClock *observe.ServerClock
	Now        func() time.Time
	// Live reads a DaemonSet from the API server, not the cache (Pass: a
	// rollout completes only once the cache has its targets' templates).
	Live func(ctx context.Context, namespace, name string) (*appsv1.DaemonSet, error)
	// Alerts reads the labels of the alerts firing at a Prometheus address
	// (the gate's FiringAlerts, whose error holds every start when the gate
	// reads no Prometheus); Pass needs it, Snapshot does not.
	Alerts func(ctx context.Context, address string) ([]map[string]string, error)
	// Promotion says what spec.promotion's upstream clusters still lack
	// for the targets' images (promotion.Reader.Hold); Pass asks it until
	// the rollout has started. Nil: a rollout that asks for promotion is
	// held, since its upstreams cannot be read.
	Promotion func(ctx context.Context, nr *v1alpha1.NodeRollout, targets []model.TargetView) string
	// Precheck says what nodewise precheck's checks find against nr's
	// start on nodes, the nodes it selects (upgradecheck.Reader.Hold), ""
	// when nothing; Pass asks it until the rollout has started. Nil: no
	// precheck.
	Precheck func(ctx context.Context, nr *v1alpha1.NodeRollout, targets []model.TargetView, nodes []string) string
	// IstioNamespace is where the targets must live.
	IstioNamespace string
	// ZtunnelSwap is how ztunnel is swapped on each node (Config.ZtunnelSwap).
	ZtunnelSwap model.SwapKind
}

// Snapshot is the planner's snapshot of nr's fleet, observed anew.
func (o *Observer) Snapshot(nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, error) {
	s, _, err := o.Observe(nr, p)
	return s, err
}

// Inputs are what a node's view is built from besides the node and the
// pods bound to it, read once per full pass (the rollout's, the fleet's),
// and kept with its views (View) to rebuild one node's view alone.
type Inputs struct {
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

// Observe builds the snapshot and returns the inputs its node views were
// built from.
func (o *Observer) Observe(nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, *Inputs, error) {
	s := model.Snapshot{Status: nr.Status, ResumeRequested: model.ResumeRequested(nr.Annotations)}
	for _, ref := range p.Targets {
		tv, err := o.Targets.Target(ref)
		if err != nil {
			return s, nil, err
		}
		s.Targets = append(s.Targets, tv)
	}
	nodes, err := o.Nodes.List(labels.Everything())
	if err != nil {
		return s, nil, fmt.Errorf("listing nodes: %w", err)
	}
	in := &Inputs{rollout: nr.Name, uid: nr.UID, targets: s.Targets, opportunist: p.Opportunistic, blocking: p.Blocking.Pods, prepullWant: prepull.Want(s.Targets)}
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
		pods, err := o.Pods.Pods(ns).List(labels.Everything())
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
	in.held, unreadable, err = o.otherMaintenance()
	if err != nil {
		return s, nil, err
	}
	s.UnreadableLocks = unreadable
	blocked, err := o.blockingPods(p.Blocking)
	if err != nil {
		return s, nil, err
	}
	for node, why := range blocked {
		at(node).blocked = why
	}
	prepulls, err := o.prepullPods(nr.Name, s.Targets)
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
		nv, err := o.nodeView(n, np, in)
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
func (o *Observer) nodeView(n *corev1.Node, np *nodePods, in *Inputs) (model.NodeView, error) {
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
		if nv.Drained, err = o.drained(n.Name); err != nil {
			return nv, err
		}
	}
	rec := n.Annotations
	if w := o.Written.Newest(n.Name); w != nil {
		rec = w.Annotations
	}
	var fromRecord bool
	step := nodestep.ParseStep(rec)
	nv.State, fromRecord = nodestep.NodeState(o.Claims.Claimed(in.rollout, n.Name), step, in.uid, in.status[n.Name])
	nv.Retried = fromRecord && nv.State == v1alpha1.NodePending
	if nv.HeldBy == "" {
		nv.HeldBy = locks.ConditionHolder(n) // another writer's MaintenanceInProgress or DrainInProgress
	}
	if nv.HeldBy == "" {
		nv.HeldBy = step.HeldByAnother(in.uid, o.RolloutLives)
	}
	return nv, nil
}

// RolloutLives says the rollout cache holds a NodeRollout of that name
// and UID. Without a cache (the CLI's plan) every rollout is taken to live:
// a node another rollout's record holds shows held.
func (o *Observer) RolloutLives(name string, uid types.UID) bool {
	if o.Rollouts == nil {
		return true
	}
	obj, ok, err := o.Rollouts.GetByKey(name)
	return err == nil && ok && obj.(*v1alpha1.NodeRollout).UID == uid
}

// drained: the cordoned node runs nothing a drain would evict (nodewise's
// own pre-pull pod aside), so someone else drained it.
func (o *Observer) drained(node string) (bool, error) {
	pods, err := o.Pods.OnNode(node)
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
func (o *Observer) otherMaintenance() (map[string]string, []string, error) {
	dss, err := o.DaemonSets.List(labels.Everything())
	if err != nil {
		return nil, nil, fmt.Errorf("listing DaemonSets for Kured's lock: %w", err)
	}
	held, unreadable := locks.KuredHolders(dss, o.KuredClock.Now(o.Now())) // Kured wrote its lock by its clock: the API server's, best known
	pods, err := o.Pods.List(locks.SUCPodSelector())
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
