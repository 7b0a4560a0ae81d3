package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/status"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// reconcileAll plans and acts on every NodeRollout, oldest first.
func (e *executor) reconcileAll(ctx context.Context) {
	if e.fence != nil {
		if err := e.fence(); err != nil {
			// Deposed (stopped past the lease) or not yet sure: plan
			// nothing, start nothing; the elector ends this leadership.
			e.log.Debug("not reconciling", zap.Error(err))
			return
		}
	}
	e.dirty.Take() // this pass reads every change made so far
	e.metrics.Passes.WithLabelValues("full").Inc()
	var nrs []*v1alpha1.NodeRollout
	for _, obj := range e.rolloutStore.List() {
		nrs = append(nrs, obj.(*v1alpha1.NodeRollout))
	}
	sortByCreation(nrs)
	live := make(map[string]bool, len(nrs))
	for _, nr := range nrs {
		live[nr.Name] = true
		if err := e.reconcile(ctx, nr.DeepCopy()); err != nil && ctx.Err() == nil {
			e.log.Warn("reconciling", zap.String("rollout", nr.Name), zap.Error(err))
		}
	}
	for name := range e.views {
		if !live[name] {
			e.dropViews(name)
		}
	}
	e.metrics.PruneRollouts(live) // a deleted rollout's series go with it
	e.kured().ReleaseGone(ctx, live)
}

// sortByCreation orders rollouts oldest first.
func sortByCreation(nrs []*v1alpha1.NodeRollout) {
	sort.Slice(nrs, func(i, j int) bool { return nrs[i].CreationTimestamp.Before(&nrs[j].CreationTimestamp) })
}

// reconcile is one observe → plan → act pass over a NodeRollout.
func (e *executor) reconcile(ctx context.Context, nr *v1alpha1.NodeRollout) error {
	return e.reconcileFrom(ctx, nr, nil)
}

// reconcileFrom is a pass over a NodeRollout that plans from its kept views
// (views.go) when given them, else from the fleet observed anew. A pass
// keeps what it planned from for the passes events start, with the nodes it
// acted on seen anew (viewsAfter); one that failed keeps nothing, so the
// next is full.
func (e *executor) reconcileFrom(ctx context.Context, nr *v1alpha1.NodeRollout, kept *fleetView) (err error) {
	var keep *fleetView
	defer func() {
		if err == nil && keep != nil {
			e.keepViews(nr, keep)
		} else {
			e.dropViews(nr.Name)
		}
	}()
	if cur, ok := e.status.Current(nr.Name, nr.UID); ok {
		nr.Status = cur // our own last write (and queued ones) are never older than the cache
	} else {
		e.status.Forget(nr.Name)
	}

	deleting := nr.DeletionTimestamp != nil
	switch nr.Status.Phase {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseAborted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseFailed:
		if nr.Status.ObservedGeneration == nr.Generation && !deleting {
			// finished; a spec change (e.g. rollback) wakes it. A crash
			// between its last node and the release left Kured's lock held.
			keep = &fleetView{finished: true}
			_, err := e.kured().Sync(ctx, locks.KuredHolder(nr.Name), nil)
			return err
		}
	}
	now := e.cfg.Now()
	if err := write.Requests(ctx, e.status, e.recorder, nr, model.DueRequests(nr, metav1.NewTime(now))); err != nil {
		return err // who asked is recorded before the pass acts on it
	}
	p, perr := model.NewPolicy(nr.Spec)
	p.ZtunnelSwap = e.cfg.ZtunnelSwap
	p, terr := e.typeTargets(p) // model.TypeTargets: the kinds name the steps of nodes in flight too
	if perr = errors.Join(perr, terr, planner.TargetsInNamespace(p.Targets, e.cfg.IstioNamespace)); perr == nil {
		perr = e.overlapping(nr, p) // see overlap.go
	}
	if perr != nil {
		p.Invalid = planner.OneLine(perr) // no node starts; those in flight are made safe
	} else if deleting {
		p.Abort = true // see finalizer.go; an invalid one's workers leave by its deletion too
	}
	var (
		snap model.Snapshot
		in   *viewInputs
	)
	if kept != nil && kept.in != nil {
		snap, in = kept.snapshot(nr), kept.in
	} else {
		kept = nil
		if snap, in, err = e.observe(nr, p); err != nil {
			return err
		}
		e.metrics.NodeViews.Add(float64(len(snap.Nodes)))
	}
	snap.AlertsBlock = e.alertsBlock(ctx, p.Blocking) // blocking.go: read here, not in the workers' snapshots
	if !deleting {
		if handled, err := e.nodeRequest(ctx, nr, p, snap); handled || err != nil {
			return err // noderequest.go: the next pass plans from the node's new state
		}
	}
	d := planner.Plan(snap, p, now)
	if d.Phase == v1alpha1.PhaseCompleted && nr.Status.Phase != v1alpha1.PhaseCompleted {
		// Completed is final: a rollout applied right after its template
		// changed can be planned before the DaemonSet cache has the new
		// template (the rollout's and the DaemonSet's watches have no order
		// between them), and would complete having swapped nothing.
		if behind, err := e.targetsBehind(ctx, p.Targets); err != nil || behind != "" {
			if behind != "" {
				e.log.Info("not completing yet", zap.String("rollout", nr.Name), zap.String("why", behind))
			}
			return err // the DaemonSet's event starts the next pass
		}
	}
	d = e.holdKuredLock(ctx, nr, p, snap, d) // kuredlock.go: before any node starts
	if !deleting && holdsNodes(d) && !slices.Contains(nr.Finalizers, model.FinalizerReleaseNodes) {
		if err := write.SetFinalizer(ctx, e.rollouts, e.recorder, nr, true); err != nil {
			return err // nothing started: the next pass tries again
		}
	}
	for _, a := range d.Actions {
		if err := e.actOn(ctx, nr, p, a); err != nil {
			return fmt.Errorf("%s node %s: %w", a.Kind, a.Node, err)
		}
	}
	if !snap.ResumeRequested && !deleting {
		keep = e.viewsAfter(kept, in, snap, d.Actions)
	}
	e.precheck(ctx, nr, p, planner.NextInLine(snap, p, d))
	if snap.ResumeRequested && d.Phase != v1alpha1.PhaseHalted && p.Invalid == "" {
		if err := e.ackResume(ctx, nr); err != nil {
			return err
		}
	}
	if err := e.writePhase(ctx, nr, d, snap.Targets, e.settledRecords(nr, snap.Nodes, d.Actions)); err != nil {
		return err
	}
	if deleting && slices.Contains(nr.Finalizers, model.FinalizerReleaseNodes) && e.releasable(nr, snap) {
		return write.SetFinalizer(ctx, e.rollouts, e.recorder, nr, false)
	}
	return nil
}

func (e *executor) actOn(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, a planner.Action) error {
	switch a.Kind {
	case planner.ActResume:
		e.worker.Start(ctx, nr, p, a.Node)
	case planner.ActPrepull, planner.ActPrepullDone:
		return e.prepull(ctx, nr, p, a)
	case planner.ActStart, planner.ActRollback:
		if e.claims.Working(nr.Name, a.Node) {
			return nil
		}
		// Claim the node in memory (it counts as in flight from now on); its
		// worker persists Preflight before acting, so the nodes of a wave
		// persist in parallel.
		e.claims.Claim(nr.Name, a.Node)
		e.worker.Start(ctx, nr, p, a.Node)
	case planner.ActMarkDone:
		return e.worker.PersistState(ctx, nr, a.Node, v1alpha1.NodeDone, a.Reason)
	case planner.ActMarkRolledBack:
		return e.worker.PersistState(ctx, nr, a.Node, v1alpha1.NodeRolledBack, a.Reason)
	case planner.ActRetry:
		return e.worker.PersistState(ctx, nr, a.Node, v1alpha1.NodePending, a.Reason)
	case planner.ActSkip:
		if err := e.worker.PersistState(ctx, nr, a.Node, v1alpha1.NodeSkipped, a.Reason); err != nil {
			return err
		}
		e.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeSkipped", "node %s skipped: %s", a.Node, a.Reason)
		e.log.Warn("node skipped", zap.String("rollout", nr.Name), zap.String("node", a.Node), zap.String("reason", a.Reason))
	case planner.ActForget:
		return e.forgetNode(ctx, nr, a.Node, a.Reason)
	}
	return nil
}

// forgetNode ends the status entry of a node deleted while in flight: there
// is no Node to record on or hand back. A worker still on it stops by
// itself first (whileNodeExists).
func (e *executor) forgetNode(ctx context.Context, nr *v1alpha1.NodeRollout, node, reason string) error {
	if e.claims.Working(nr.Name, node) {
		return nil
	}
	now := metav1.NewTime(e.cfg.Now())
	if err := e.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		ns := model.NodeEntry(s, node)
		if model.InFlight(ns.State) {
			ns.State, ns.Reason, ns.StateSince, ns.FinishTime = v1alpha1.NodeSkipped, reason, &now, &now
		}
	}); err != nil {
		return err
	}
	e.gate.Done(node)
	e.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeSkipped", "node %s skipped: %s", node, reason)
	e.log.Warn("node deleted while in flight", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("reason", reason))
	return nil
}

// settledRecords are the settled steps (Done, Skipped, Failed, RolledBack)
// of the nodes neither a worker of this process nor this pass's actions
// are on (a retry or a rollback moves the node on from the view), as their
// views read them: from the node's record when it has one of this rollout.
// The record (the node's annotations) is the truth; the status entry
// mirrors it, written behind in batches, so a leader that persisted a
// node's last steps and was gone before the batch was written leaves the
// entry behind (seen at 5,000 nodes: 94 entries still in flight or Pending
// under a Completed rollout). No worker resumes a settled node: writePhase
// brings the entry to the record.
func (e *executor) settledRecords(nr *v1alpha1.NodeRollout, nodes []model.NodeView, acted []planner.Action) map[string]v1alpha1.NodeState {
	out := map[string]v1alpha1.NodeState{}
	for _, n := range nodes {
		switch n.State {
		case v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeFailed, v1alpha1.NodeRolledBack:
			if !e.claims.Working(nr.Name, n.Name) {
				out[n.Name] = n.State
			}
		}
	}
	for _, a := range acted {
		delete(out, a.Node)
	}
	return out
}

// writePhase records the decision's phase, the plan's node list (each
// entry caught up with its node's settled record, given), counts, targets
// and conditions, and emits an Event when the phase changes.
func (e *executor) writePhase(ctx context.Context, nr *v1alpha1.NodeRollout, d planner.Decision, targets []model.TargetView, settled map[string]v1alpha1.NodeState) error {
	now := metav1.NewTime(e.cfg.Now())
	// The mutation must stay pure (currentStatus applies queued ones to copies).
	prev, known := e.status.Current(nr.Name, nr.UID)
	prevPhase := prev.Phase
	mutate := func(s *v1alpha1.NodeRolloutStatus) { status.Record(s, nr, d, targets, settled, now) }
	// A new phase (or generation, or halt reason) is written before the loop
	// goes on: a successor plans from it (a halt stays a halt). The rest
	// (counts, the plan's node list, conditions of the same phase) is written
	// behind, so the loop is free to start the next node meanwhile.
	next := *prev.DeepCopy()
	mutate(&next)
	switch {
	case known && equality.Semantic.DeepEqual(prev, next):
		// nothing new to write
	case known && next.Phase == prev.Phase && next.HaltReason == prev.HaltReason && next.ObservedGeneration == prev.ObservedGeneration:
		e.status.MutateLater(nr.Name, mutate)
	default:
		if err := e.status.Mutate(ctx, nr.Name, mutate); err != nil {
			return err
		}
	}
	cur, _ := e.status.Current(nr.Name, "")
	e.updateGauges(nr.Name, cur.Nodes)
	e.metrics.Halted.WithLabelValues(nr.Name).Set(map[bool]float64{true: 1}[cur.Phase == v1alpha1.PhaseHalted])
	if prevPhase != cur.Phase {
		typ := corev1.EventTypeNormal
		if cur.Phase == v1alpha1.PhaseHalted || cur.Phase == v1alpha1.PhaseFailed {
			typ = corev1.EventTypeWarning
		}
		e.recorder.Eventf(nr, typ, string(cur.Phase), "rollout %s: %s", cur.Phase, d.Reason)
		e.log.Info("rollout phase", zap.String("rollout", nr.Name), zap.String("phase", string(cur.Phase)), zap.String("reason", d.Reason))
	}
	return nil
}

// viewsAfter are the views a pass keeps for the passes events start (see
// views.go): the ones it planned from (kept, or else the snapshot's), with
// the nodes it acted on seen anew. Each act a pass can take on a node shows
// at once in the node's view (a start or rollback as this process's claim,
// a marked, retried or skipped node as the record this process wrote),
// but a pre-pull pod created or deleted, or a deleted node's entry ended,
// shows only once the caches have it: such a pass keeps no views, and the
// next event's pass is full.
func (e *executor) viewsAfter(kept *fleetView, in *viewInputs, snap model.Snapshot, acts []planner.Action) *fleetView {
	for _, a := range acts {
		switch a.Kind {
		case planner.ActPrepull, planner.ActPrepullDone, planner.ActForget:
			return nil
		}
	}
	fv := kept
	if fv == nil {
		fv = &fleetView{in: in, nodes: make(map[string]model.NodeView, len(snap.Nodes)), names: make([]string, 0, len(snap.Nodes)), unreadable: snap.UnreadableLocks}
		for _, n := range snap.Nodes {
			fv.nodes[n.Name] = n
			fv.names = append(fv.names, n.Name)
		}
	}
	for _, a := range acts {
		if a.Kind == planner.ActResume {
			continue
		}
		n, err := e.nodes.Get(a.Node)
		if err != nil {
			return nil
		}
		nv, err := e.viewOf(n, in)
		if err != nil {
			return nil
		}
		e.metrics.NodeViews.Inc()
		fv.nodes[a.Node] = nv
	}
	return fv
}

func (e *executor) ackResume(ctx context.Context, nr *v1alpha1.NodeRollout) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, model.AnnotationAckedResumeToken, nr.Annotations[model.AnnotationResumeToken])
	if _, err := e.rollouts.Patch(ctx, nr.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("acknowledging resume: %w", err)
	}
	return nil
}

func (e *executor) updateGauges(rollout string, nodes []v1alpha1.NodeStatus) {
	by := map[v1alpha1.NodeState]int{}
	e.metrics.NodeState.DeletePartialMatch(prometheus.Labels{"rollout": rollout})
	for _, n := range nodes {
		by[n.State]++
		switch n.State {
		case "", v1alpha1.NodePending, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeRolledBack:
		default:
			e.metrics.NodeState.WithLabelValues(rollout, n.Name, string(n.State)).Set(1)
		}
	}
	for _, st := range []v1alpha1.NodeState{v1alpha1.NodePending, v1alpha1.NodePreflight, v1alpha1.NodeCordon, v1alpha1.NodeDrain, v1alpha1.NodeSwapCNI, v1alpha1.NodeSwapZtunnel, v1alpha1.NodeWaitReady, v1alpha1.NodeUncordon, v1alpha1.NodeSoak, v1alpha1.NodeGate, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeFailed, v1alpha1.NodeRolledBack} {
		e.metrics.NodesByState.WithLabelValues(rollout, string(st)).Set(float64(by[st]))
	}
}

// targetsBehind reads the target DaemonSets from the API and says which the
// cache holds at another generation ("" when none).
func (e *executor) targetsBehind(ctx context.Context, refs []v1alpha1.TargetRef) (string, error) {
	for _, ref := range refs {
		live, err := e.kube.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return "", fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		cached, cerr := e.dss.DaemonSets(ref.Namespace).Get(ref.Name)
		switch {
		case (err == nil) != (cerr == nil):
			return fmt.Sprintf("the DaemonSet cache is behind the API on %s/%s", ref.Namespace, ref.Name), nil
		case err == nil && (live.Generation != cached.Generation || live.Status.ObservedGeneration != cached.Status.ObservedGeneration):
			return fmt.Sprintf("the DaemonSet cache holds %s/%s at generation %d (observed %d), the API at %d (observed %d)",
				ref.Namespace, ref.Name, cached.Generation, cached.Status.ObservedGeneration, live.Generation, live.Status.ObservedGeneration), nil
		}
	}
	return "", nil
}
