package orchestrator

import (
	"context"
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// A pass an informer event starts is O(change) in what it observes: it
// rebuilds the views of the nodes the events named (observe.Dirty) from the
// inputs the rollout's last full pass read (fleet.Inputs). When none of them
// moved (planner.Unmoved) it is done: the plan would decide the same, so
// nothing is planned, acted on or written. When one moved, the rollout is
// planned again from its kept views, the moved ones brought up to date,
// without observing the fleet again (a views pass); so is the pass a
// worker's end starts (observe.Dirty.Ended: its slot is free), moved or
// not. A node new or gone, a rollout without views (new, invalid, or its
// last pass failed or created or deleted pre-pull pods: viewsAfter), and
// every change that may touch every node (a DaemonSet's spec, annotations
// or observed generation: daemonSetEvent; a ControllerRevision; a
// rollout's spec or annotations) make the pass full, and so does every
// resync.

// keepViews remembers what nr's full pass planned from (nil: nothing);
// dropViews forgets it, so that the next event's pass is full.
func (e *executor) keepViews(nr *v1alpha1.NodeRollout, fv *fleet.View) {
	if fv == nil {
		e.dropViews(nr.Name)
		return
	}
	if e.views == nil {
		e.views = map[string]*fleet.View{}
	}
	fv.UID = nr.UID
	e.views[nr.Name] = fv
}

func (e *executor) dropViews(name string) { delete(e.views, name) }

// reconcileChanged is the pass an informer event starts (see above).
func (e *executor) reconcileChanged(ctx context.Context) {
	nodes, all, plan := e.dirty.Take()
	if all {
		e.reconcileAll(ctx)
		return
	}
	if len(nodes) == 0 {
		return
	}
	if e.fence != nil && e.fence() != nil {
		return // reconcileAll says why
	}
	type update struct {
		fv   *fleet.View
		node model.NodeView
	}
	var (
		views  []update
		replan []*v1alpha1.NodeRollout
	)
	built := 0
	full := func() {
		e.metrics.NodeViews.Add(float64(built))
		e.reconcileAll(ctx)
	}
	for _, obj := range e.rolloutStore.List() {
		nr := obj.(*v1alpha1.NodeRollout)
		fv := e.views[nr.Name]
		switch {
		case fv == nil || fv.UID != nr.UID:
			full()
			return
		case fv.Finished:
			continue
		}
		moved := false
		for _, name := range nodes {
			at, had := fv.Roster.Index(name)
			n, err := e.nodes.Get(name)
			if err != nil || !had {
				full() // a node new or gone (or unreadable)
				return
			}
			nv, err := e.observer.ViewOf(n, fv.In)
			built++
			if err != nil {
				full()
				return
			}
			moved = moved || !planner.Unmoved(*fv.Roster.Node(at), nv)
			views = append(views, update{fv, nv})
		}
		if moved || plan {
			replan = append(replan, nr)
		}
	}
	for _, u := range views {
		u.fv.Update(u.node)
	}
	e.metrics.NodeViews.Add(float64(built))
	if len(replan) == 0 {
		e.metrics.Passes.WithLabelValues("skipped").Inc()
		e.log.Debug("reconcile pass skipped: the changed nodes cannot change the plan", zap.Strings("nodes", nodes))
		return
	}
	sortByCreation(replan)
	for _, nr := range replan {
		e.metrics.Passes.WithLabelValues("views").Inc()
		if err := e.reconcileFrom(ctx, copyRollout(nr), e.views[nr.Name]); err != nil && ctx.Err() == nil {
			e.log.Warn("reconciling", zap.String("rollout", nr.Name), zap.Error(err))
		}
	}
}

// copyRollout is a copy of the cached nr for a pass but its status, shared
// with the cache (a pass reads the status, never changes it; it reads the
// status writer's when that has one: reconcileFrom).
func copyRollout(nr *v1alpha1.NodeRollout) *v1alpha1.NodeRollout {
	c := *nr
	c.Status = v1alpha1.NodeRolloutStatus{}
	out := c.DeepCopy()
	out.Status = nr.Status
	return out
}

// nodeEvent marks the node of a Node event changed.
func (e *executor) nodeEvent(_, obj any) {
	if n, ok := untombstone(obj).(*corev1.Node); ok {
		e.dirty.Node(n.Name)
	}
}

// podEvent marks the nodes a pod event changed: the node the pod is bound
// to (before and after), or every node for a system-upgrade-controller job
// pod, which names the node it holds in a label and may hold it unbound. A
// pod bound to no node is in no node's view.
func (e *executor) podEvent(old, obj any) {
	for _, o := range []any{old, obj} {
		p, ok := untombstone(o).(*corev1.Pod)
		if !ok {
			continue
		}
		if _, suc := p.Labels[locks.LabelSUCPlan]; suc {
			e.dirty.All()
			continue
		}
		e.dirty.Node(p.Spec.NodeName)
	}
}

// daemonSetEvent marks every rollout's nodes changed when a DaemonSet
// changed in what a pass reads of it: its spec (the targets' templates,
// strategy, images), how far its controller has observed that spec
// (status.observedGeneration: a target is Settled), its annotations (Kured's
// lock), or it came or went. The rest of its status (numberReady,
// updatedNumberScheduled, …) moves with every pod a swap replaces, and no
// pass reads it: such an update marks nothing (the steps that wait on a
// DaemonSet are woken by changed() anyway).
func (e *executor) daemonSetEvent(old, obj any) {
	a, ok1 := old.(*appsv1.DaemonSet)
	b, ok2 := obj.(*appsv1.DaemonSet)
	e.watchStrategy(a, obj)
	if ok1 && ok2 && a.UID == b.UID && a.Generation == b.Generation &&
		a.Status.ObservedGeneration == b.Status.ObservedGeneration &&
		maps.Equal(a.Annotations, b.Annotations) && equality.Semantic.DeepEqual(a.Spec, b.Spec) {
		return
	}
	e.dirty.All()
}

// rolloutChanged: a rollout's update changed more than its status. Only
// the leader writes status, through the status writer, whose own copy the
// passes read (write.Status.Current); what of it a plan reads moves with
// the node records and the passes that mark those nodes, so the echo of
// the leader's own status write starts no pass.
func rolloutChanged(old, obj any) bool {
	a, ok1 := old.(*v1alpha1.NodeRollout)
	b, ok2 := obj.(*v1alpha1.NodeRollout)
	if !ok1 || !ok2 {
		return true
	}
	return a.UID != b.UID || a.Generation != b.Generation || !a.DeletionTimestamp.Equal(b.DeletionTimestamp) ||
		!maps.Equal(a.Annotations, b.Annotations) || !maps.Equal(a.Labels, b.Labels) || !slices.Equal(a.Finalizers, b.Finalizers)
}

func untombstone(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// watchStrategy reports a data-plane DaemonSet (ztunnel or istio-cni, in
// the Istio namespace) that does not use OnDelete, whether or not a rollout
// runs: the metric on every event, and a Warning Event on the DaemonSet
// when it leaves OnDelete (a chart applied without updateStrategy.type=
// OnDelete, a GitOps sync that reverted it). A rollout that targets it goes
// Pending, saying so (planner.ValidateTargets). old is nil for an add or a
// delete; a DaemonSet the cache no longer holds was deleted.
func (e *executor) watchStrategy(old *appsv1.DaemonSet, obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	cur, ok := obj.(*appsv1.DaemonSet)
	if !ok || cur.Namespace != e.cfg.IstioNamespace || model.DetectKind(cur) == "" {
		return
	}
	l := prometheus.Labels{"namespace": cur.Namespace, "daemonset": cur.Name}
	if old == nil {
		if cached, err := e.dss.DaemonSets(cur.Namespace).Get(cur.Name); err != nil || cached.UID != cur.UID {
			e.metrics.NotOnDelete.Delete(l) // deleted
			return
		}
	}
	off := cur.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType
	e.metrics.NotOnDelete.With(l).Set(map[bool]float64{true: 1, false: 0}[off])
	if off && old != nil && old.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		e.recorder.Eventf(cur, corev1.EventTypeWarning, "LeftOnDelete",
			"updateStrategy changed from OnDelete to %s: the DaemonSet controller now replaces every node's %s pod itself, outside nodewise's judged node-by-node rollout; set updateStrategy.type=OnDelete again (Helm: --set updateStrategy.type=OnDelete)",
			cur.Spec.UpdateStrategy.Type, model.DetectKind(cur))
	}
}
