package orchestrator

import (
	"context"
	"maps"
	"slices"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
)

// A pass an informer event starts is O(change) in what it observes: it
// rebuilds the views of the nodes the events named (observe.Dirty) from the
// inputs the rollout's last full pass read (viewInputs). When none of them
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

// fleetView is what a rollout's last full pass planned from.
type fleetView struct {
	uid types.UID
	// finished: the pass returned before observing (a finished rollout):
	// no node's change wakes it.
	finished bool
	in       *viewInputs
	nodes    map[string]model.NodeView
	// names are the nodes in the order the full pass listed them, so
	// that a views pass plans over them in the same order.
	names []string
	// unreadable are the other tools' locks the full pass could not read.
	unreadable []string
}

// snapshot is the planner's snapshot from the kept views: what observe
// would build, without observing the fleet again.
func (fv *fleetView) snapshot(nr *v1alpha1.NodeRollout) model.Snapshot {
	s := model.Snapshot{Status: nr.Status, ResumeRequested: model.ResumeRequested(nr.Annotations), Targets: fv.in.targets, UnreadableLocks: fv.unreadable}
	s.Nodes = make([]model.NodeView, 0, len(fv.names))
	for _, name := range fv.names {
		s.Nodes = append(s.Nodes, fv.nodes[name])
	}
	return s
}

// keepViews remembers what nr's full pass planned from; dropViews forgets
// it, so that the next event's pass is full.
func (e *executor) keepViews(nr *v1alpha1.NodeRollout, fv *fleetView) {
	if e.views == nil {
		e.views = map[string]*fleetView{}
	}
	fv.uid = nr.UID
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
		fv   *fleetView
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
		case fv == nil || fv.uid != nr.UID:
			full()
			return
		case fv.finished:
			continue
		}
		moved := false
		for _, name := range nodes {
			was, had := fv.nodes[name]
			n, err := e.nodes.Get(name)
			if err != nil || !had {
				full() // a node new or gone (or unreadable)
				return
			}
			nv, err := e.viewOf(n, fv.in)
			built++
			if err != nil {
				full()
				return
			}
			moved = moved || !planner.Unmoved(was, nv)
			views = append(views, update{fv, nv})
		}
		if moved || plan {
			replan = append(replan, nr)
		}
	}
	for _, u := range views {
		u.fv.nodes[u.node.Name] = u.node
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
		if err := e.reconcileFrom(ctx, nr.DeepCopy(), e.views[nr.Name]); err != nil && ctx.Err() == nil {
			e.log.Warn("reconciling", zap.String("rollout", nr.Name), zap.Error(err))
		}
	}
}

// viewOf is one node's view from its own pods alone: the inputs of the
// fleet-wide ones (observe) narrowed to the pods bound to the node.
func (e *executor) viewOf(n *corev1.Node, in *viewInputs) (model.NodeView, error) {
	pods, err := e.pods.OnNode(n.Name)
	if err != nil {
		return model.NodeView{}, err
	}
	np := &nodePods{}
	namespaces := targetNamespaces(in.targets)
	var blocking, pulls []*corev1.Pod
	for _, p := range pods {
		addTargetPod(np, p, in.targets)
		if in.blocking != nil {
			blocking = append(blocking, p)
		}
		if p.Labels[model.LabelPrepull] == in.rollout && slices.Contains(namespaces, p.Namespace) && p.DeletionTimestamp == nil {
			pulls = append(pulls, p)
		}
	}
	np.blocked = planner.BlockingPods(blocking, in.blocking)[n.Name]
	if len(pulls) > 0 {
		np.prepull = prepull.View(pulls, in.prepullWant)
	}
	return e.nodeView(n, np, in)
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
