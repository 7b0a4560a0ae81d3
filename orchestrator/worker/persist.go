package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// PersistState records a node's state decided by the planner (Done,
// RolledBack, Pending for a retry), from the node's newest record.
func (w *Worker) PersistState(ctx context.Context, nr *v1alpha1.NodeRollout, node string, st v1alpha1.NodeState, reason string) error {
	rec, _, _ := w.nodeRecord(nr, node)
	_, err := w.persist(ctx, nr, model.Policy{}, node, rec, nodestep.Step{State: st, Record: true, Reason: reason}, carried{})
	return err
}

// persist writes step s's record: the node's annotations (the record before,
// rec, turned into the record after, with the cordon or uncordon the step
// makes in the same conditional patch) and the node's entry in the
// NodeRollout status, with what the last acts returned (c). The two writes
// run concurrently; the step acts only after both succeeded. If one fails,
// the older record wins on resume and the (idempotent) earlier step simply
// runs again. It returns the record as the API then holds it.
func (w *Worker) persist(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record, s nodestep.Step, c carried) (nodestep.Record, error) {
	now := w.Now()
	st := s.State
	next := rec.WithStep(nr.Name, nr.UID, st, now)
	var kept gate.Kept
	if s.StampSwap {
		next.SwapSince = now
		// The baseline window ends here: its record goes with this step's
		// status write, before the swap acts.
		kept = w.keep(ctx, nr, p, node, now, time.Time{})
	}
	if s.StampSoak {
		next.SoakSince = now
	}
	if c.drained {
		next.DrainedAt = now // the gate reads it back: the node was not swapped in place
	}
	if s.Act == nodestep.ActSwap {
		// Before a swap: the UID of the old pod it is about to delete, and
		// of the surge swaps' after it that have no record of their own (a
		// record for people and for the resume log).
		for _, t := range nodestep.SwapsRecordedWith(p, s.State) {
			if uid := w.oldPod(t, node); uid != "" {
				if next.Swapped == nil {
					next.Swapped = map[string]types.UID{}
				}
				next.Swapped[t.Name] = uid
			}
		}
	}
	if s.ClearSwapped {
		if next.Swapped == nil {
			next.Swapped = map[string]types.UID{}
		}
		for _, t := range p.Targets {
			next.Swapped[t.Name] = ""
		}
	}
	ann := next.Patch(rec)
	type written struct {
		rec nodestep.Record
		err error
	}
	nodeDone := make(chan written, 1)
	go func() {
		var wr written
		switch {
		case s.Cordon:
			wr.rec, wr.err = w.NodeWrites.Cordon(ctx, nr.Name, node, next, ann)
		case s.Uncordon:
			wr.rec, wr.err = w.NodeWrites.Uncordon(ctx, node, next, ann)
		default:
			wr.rec, wr.err = w.NodeWrites.Record(ctx, nr.UID, node, rec, ann)
		}
		nodeDone <- wr
	}()
	haltReason := ""
	if s.Halt != "" {
		haltReason = fmt.Sprintf("node %s: %s", node, s.Reason)
	}
	mirror := func(ss *v1alpha1.NodeRolloutStatus) {
		ns := model.NodeEntry(ss, node)
		if ns.State != st {
			ns.StateSince = &metav1.Time{Time: now}
		}
		ns.State, ns.Reason = st, s.Reason
		if c.verdict != nil {
			ns.Verdict, ns.Judgement = *c.verdict, c.judgement
		}
		switch {
		case kept.Baseline != "":
			ns.Baseline, ns.Controls = kept.Baseline, kept.Controls
		case s.StampSwap || !model.InFlight(st) || st == v1alpha1.NodeAbortCleanup:
			ns.Baseline, ns.Controls = "", "" // an earlier attempt's, or no longer needed
		}
		if haltReason != "" {
			// In the same write as the Failed step: a planner pass in between
			// would otherwise halt with a generic reason first.
			ss.Phase = v1alpha1.PhaseHalted
			if ss.HaltReason == "" {
				ss.HaltReason = haltReason
			}
		}
		switch {
		case st == v1alpha1.NodePending: // retried or aborted: the next attempt has its own times
			ns.StartTime, ns.FinishTime = nil, nil
		case model.InFlight(st) && ns.StartTime == nil: // Preflight, or the cordon when preflight has no record
			ns.StartTime = &metav1.Time{Time: now}
		case !model.InFlight(st) && st != v1alpha1.NodePending:
			ns.FinishTime = &metav1.Time{Time: now}
		}
	}
	// The node annotation is the record a successor resumes from (observe
	// reads it before status), so a step acts once it is written. The status
	// entry mirrors it and is written behind, group-committed with the other
	// nodes' steps, except where status itself is the record: a halt, a
	// failed or skipped node, a reason, a verdict, a node the planner changes.
	var statusErr error
	if kept.Baseline == "" && statusBehind(st, s.Reason, c.verdict != nil, haltReason != "") {
		w.Status.MutateLater(nr.Name, mirror)
	} else {
		statusErr = w.Status.Mutate(ctx, nr.Name, mirror)
	}
	wr := <-nodeDone
	if err := errors.Join(wr.err, statusErr); err != nil {
		return rec, err
	}
	if st == v1alpha1.NodeAbortCleanup || (!model.InFlight(st) && st != v1alpha1.NodePending) {
		w.Gate.Done(node)
	}
	w.Claims.Unclaim(nr.Name, node)
	timed, since := rec.Step, rec.StepSince
	if c.shown != nil { // the step acted on last had no record of its own
		timed, since = c.shown.state, c.shown.since
	}
	if rec.Ours(nr.UID) && model.InFlight(timed) && timed != st && !since.IsZero() {
		w.Metrics.StepSeconds.WithLabelValues(string(timed)).Observe(now.Sub(since).Seconds())
	}
	w.Log.Info("node step", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("step", string(st)), zap.String("reason", s.Reason))
	if st == w.HoldAfterPersist && st != "" {
		w.Log.Info("holding after persisting (test hook)", zap.String("step", string(st)))
		<-ctx.Done()
		return wr.rec, ctx.Err()
	}
	return wr.rec, nil
}

// statusBehind says whether a step's status mirror may be written behind:
// the forward in-flight steps and Done, whose node annotation alone lets a
// successor resume. A halt, a reason (failed, skipped, aborted, retried
// nodes) or a verdict that is not a pass is written before anything goes on.
// A passed node's verdict rides with its Done: a crash within that one
// status write loses the verdict text, never the node's state.
func statusBehind(st v1alpha1.NodeState, reason string, hasVerdict, halts bool) bool {
	if reason != "" || halts || (hasVerdict && st != v1alpha1.NodeDone) {
		return false
	}
	return st == v1alpha1.NodeDone || (model.InFlight(st) && st != v1alpha1.NodeAbortCleanup)
}
