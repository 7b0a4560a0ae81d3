package orchestrator

import (
	"context"
	"maps"
	"slices"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// A pass an informer event starts is O(change): it rebuilds the views of
// the nodes the events named (observe.Dirty) from the inputs the rollout's
// last full pass read (viewInputs), and when none of them moved
// (planner.Unmoved) it is done: the plan would decide the same, so nothing
// is planned, acted on or written. A node that moved, a node new or gone,
// a rollout without views (new, invalid, or its last pass acted or failed),
// and every change that may touch every node (a DaemonSet, a
// ControllerRevision, a rollout's spec or annotations) make the pass full,
// and so do a freed slot and every resync.

// fleetView is what a rollout's last full pass planned from.
type fleetView struct {
	uid types.UID
	// finished: the pass returned before observing (a finished rollout):
	// no node's change wakes it.
	finished bool
	in       *viewInputs
	nodes    map[string]model.NodeView
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
	nodes, all := e.dirty.Take()
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
	type moved struct {
		fv   *fleetView
		node model.NodeView
	}
	var views []moved
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
		for _, name := range nodes {
			was, had := fv.nodes[name]
			n, err := e.nodes.Get(name)
			if err != nil || !had {
				full() // a node new or gone (or unreadable)
				return
			}
			nv, err := e.viewOf(n, fv.in)
			built++
			if err != nil || !planner.Unmoved(was, nv) {
				full()
				return
			}
			views = append(views, moved{fv, nv})
		}
	}
	for _, m := range views {
		m.fv.nodes[m.node.Name] = m.node
	}
	e.metrics.NodeViews.Add(float64(built))
	e.metrics.Passes.WithLabelValues("skipped").Inc()
	e.log.Debug("reconcile pass skipped: the changed nodes cannot change the plan", zap.Strings("nodes", nodes))
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
	var blocking, prepull []*corev1.Pod
	for _, p := range pods {
		addTargetPod(np, p, in.targets)
		if in.blocking != nil {
			blocking = append(blocking, p)
		}
		if p.Labels[model.LabelPrepull] == in.rollout && slices.Contains(namespaces, p.Namespace) && p.DeletionTimestamp == nil {
			prepull = append(prepull, p)
		}
	}
	np.blocked = planner.BlockingPods(blocking, in.blocking)[n.Name]
	if len(prepull) > 0 {
		np.prepull = prepullView(prepull, in.prepullWant)
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
		if _, suc := p.Labels[planner.LabelSUCPlan]; suc {
			e.dirty.All()
			continue
		}
		e.dirty.Node(p.Spec.NodeName)
	}
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
