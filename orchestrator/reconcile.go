package orchestrator

import (
	"context"
	"sort"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/planner"
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
	e.apply.kured.ReleaseGone(ctx, live)
	e.sweepConditions(ctx)
}

// sweepConditions brings every node's lifecycle conditions to its record
// (nodecond.Writer.Sweep): a condition a crashed leader left on a node no
// record has out any more is cleared here.
func (e *executor) sweepConditions(ctx context.Context) {
	nodes, err := e.nodes.List(labels.Everything())
	if err != nil {
		e.log.Warn("listing nodes for their lifecycle conditions", zap.Error(err))
		return
	}
	e.conditions.Sweep(ctx, nodes, e.claims.ByNode())
}

// sortByCreation orders rollouts oldest first.
func sortByCreation(nrs []*v1alpha1.NodeRollout) {
	sort.Slice(nrs, func(i, j int) bool { return nrs[i].CreationTimestamp.Before(&nrs[j].CreationTimestamp) })
}

// reconcile is one observe → decide → act pass over a NodeRollout.
func (e *executor) reconcile(ctx context.Context, nr *v1alpha1.NodeRollout) error {
	return e.reconcileFrom(ctx, nr, nil)
}

// reconcileFrom is a pass over a NodeRollout: the observer decides it
// (reading the fleet anew, or from kept, the views of its last pass, when
// given), writing nothing; the applier carries it out. A pass that took its
// node actions keeps what it planned from, with those nodes seen anew, for
// the passes events start (views.go); one that failed keeps nothing, so
// the next is full.
func (e *executor) reconcileFrom(ctx context.Context, nr *v1alpha1.NodeRollout, kept *fleet.View) (err error) {
	var keep *fleet.View
	defer func() {
		if err != nil {
			keep = nil
		}
		e.keepViews(nr, keep)
	}()
	if cur, ok := e.status.Current(nr.Name, nr.UID); ok {
		nr.Status = cur // our own last write (and queued ones) are never older than the cache
	} else {
		e.status.Forget(nr.Name)
	}
	ps, err := e.observer.Pass(ctx, nr, kept)
	if err != nil {
		return err
	}
	if ps.Inputs != nil && ps.Kept == nil {
		e.metrics.NodeViews.Add(float64(len(ps.Snap.Nodes)))
	}
	if ps.Finished {
		keep = &fleet.View{Finished: true}
	}
	if acted, err := e.apply.act(ctx, nr, ps); !acted || err != nil {
		return err
	}
	next := ps.NextInLine() // before viewsAfter brings the acted nodes' views up to date
	if !ps.Snap.ResumeRequested && !ps.Deleting {
		keep = e.viewsAfter(ps)
	}
	e.precheck(ctx, nr, ps.Policy, next)
	return e.apply.record(ctx, nr, ps)
}

// viewsAfter are the views a pass keeps for the passes events start (see
// views.go): the ones it planned from, with the nodes it acted on seen
// anew; nil when a node cannot be. Each act a pass can take on a node shows
// at once in the node's view (a start or rollback as this process's claim,
// a marked, retried or skipped node as the record this process wrote),
// but a pre-pull pod created or deleted, or a deleted node's entry ended,
// shows only once the caches have it: such a pass keeps no views, and the
// next event's pass is full.
func (e *executor) viewsAfter(ps *fleet.Pass) *fleet.View {
	for _, a := range ps.Decision.Actions {
		switch a.Kind {
		case planner.ActPrepull, planner.ActPrepullDone, planner.ActForget:
			return nil
		}
	}
	fv := ps.Kept
	if fv == nil {
		fv = fleet.NewView(ps.Inputs, ps.Snap, ps.Roster)
	}
	for _, a := range ps.Decision.Actions {
		if a.Kind == planner.ActResume {
			continue
		}
		n, err := e.nodes.Get(a.Node)
		if err != nil {
			return nil
		}
		nv, err := e.observer.ViewOf(n, ps.Inputs)
		if err != nil {
			return nil
		}
		e.metrics.NodeViews.Inc()
		if !fv.Update(nv) {
			return nil
		}
	}
	return fv
}
