package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// carried is what an act returns for the node's next record to persist
// with it: the gate's verdict (its summary nil clears an older judgement),
// that a drain finished.
type carried struct {
	verdict *health.Verdict
	drained bool       // the record stamps DrainedAt
	shown   *shownStep // a step acted on without a record of its own
}

// shownStep is a step that status shows but the node's record does not hold.
type shownStep struct {
	state v1alpha1.NodeState
	since time.Time
}

// Start drives the node in the background, from its record to its end,
// unless a worker of this process is on it already. A worker that held a
// slot frees it (Freed) when it ends.
func (w *Worker) Start(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) {
	if !w.Claims.StartWorker(nr.Name, node) {
		return
	}
	w.WG.Add(1)
	go func() {
		defer w.WG.Done()
		err := w.runNode(ctx, nr, p, node)
		w.Claims.EndWorker(nr.Name, node)
		if !errors.Is(err, errSettled) {
			w.Freed(node)
		}
		switch {
		case err == nil || ctx.Err() != nil || errors.Is(err, errSettled):
		case w.deposed(err):
			w.Log.Info("not leading: the node's steps stop here, for the leader to resume from its record",
				zap.String("rollout", nr.Name), zap.String("node", node), zap.Error(err))
		case errors.Is(err, nodestep.ErrRecordMoved):
			w.Log.Info("the node's record moved: its next step is decided again on the next pass",
				zap.String("rollout", nr.Name), zap.String("node", node), zap.Error(err))
		default:
			w.Log.Warn("node worker stopped; it is resumed on the next pass", zap.String("node", node), zap.Error(err))
		}
	}()
}

// deposed says the worker's step ended because this replica does not hold
// the leader Lease now: a write refused by the fence, or an act that failed
// while the fence is shut (the drain library keeps only the text of the
// errors it retried). Such an end is no step failure: nothing is recorded
// (every write would be refused), nothing halts.
func (w *Worker) deposed(err error) bool {
	return errors.Is(err, leader.ErrNotLeading) || (w.Fence != nil && w.Fence() != nil)
}

// notLeading is err as the end of a deposed replica's step: ErrNotLeading,
// never the step error (a halt) the act made of a refused write.
func notLeading(err error) error {
	if errors.Is(err, leader.ErrNotLeading) {
		return err
	}
	return fmt.Errorf("%w (the step ended with: %v)", leader.ErrNotLeading, err)
}

// runNode drives one node from its record to the end: next step (pure),
// persist its record, act, and again. Every act is idempotent: after a
// crash a successor acts on the recorded step again.
func (w *Worker) runNode(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) error {
	ctx, stop := w.whileNodeExists(ctx, node)
	defer stop()
	err := w.driveNode(ctx, nr, p, node)
	if errors.Is(context.Cause(ctx), errNodeGone) {
		// Nothing is left to record on or hand back; the planner's next
		// pass ends the node's status entry (ActForget).
		w.Log.Warn("node deleted; its steps stop", zap.String("rollout", nr.Name), zap.String("node", node))
		return nil
	}
	return err
}

// errSettled ends a worker started from a view behind the node's newest
// record, which had settled: it held no slot, so its end frees none (and
// wakes no pass: the worker that settled the node woke one).
var errSettled = errors.New("nothing to resume: the node's record has settled")

// errNodeGone stops a worker whose Node was deleted.
var errNodeGone = errors.New("the node was deleted")

// whileNodeExists is ctx, also cancelled (with errNodeGone) once the node
// cache no longer holds the node.
func (w *Worker) whileNodeExists(ctx context.Context, node string) (context.Context, func()) {
	return observe.CancelWhen(ctx, time.Second, func() error {
		if _, err := w.Nodes.Get(node); apierrors.IsNotFound(err) {
			return errNodeGone
		}
		return nil
	})
}

// driveNode is runNode's loop.
func (w *Worker) driveNode(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) (err error) {
	rec, st, fromRecord := w.nodeRecord(nr, node)
	if fromRecord && !model.InFlight(st) && st != v1alpha1.NodePending {
		// Resumed from a view behind the node's newest record (a new
		// leader's cache catching up): the node has settled since.
		w.Log.Info("nothing to resume: the node's record has settled", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("step", string(st)))
		return errSettled
	}
	if w.Silences != nil {
		end := w.Silences.Hold(ctx, nr, node)
		// Handed back (its steps ended, or it is gone): the silence goes
		// now. Otherwise it runs out its TTL, for a successor to take over.
		defer func() { end(err == nil || errors.Is(context.Cause(ctx), errNodeGone)) }()
	}
	outWritten := func() {}
	if w.Conditions != nil {
		outWritten = w.Conditions.Out(ctx, nr.Name, node) // beside the preflight, in place before the cordon
	}
	var v nodestep.View
	if st == nodestep.Claimed || !fromRecord {
		v.At = v1alpha1.NodePending // start from the first step
	}
	var out carried // the last acts' results, for the next record
	for {
		why := w.Leaving(nr, node)
		if why == "" && p.Invalid != "" {
			why = nodestep.LeaveStopped // started by a pass that starts nothing
		}
		if why != "" || rec.Step == v1alpha1.NodeAbortCleanup {
			v.UpToDate = w.Waits.UpToDate(p.Targets, node)
		}
		s := nodestep.Next(rec, p, v, why)
		if s.Act == nodestep.ActStop {
			return fmt.Errorf("node %s: %s", node, s.Reason)
		}
		if s.State != v1alpha1.NodePreflight {
			outWritten()
		}
		var checked chan error
		if s.Act == nodestep.ActPreflight && s.Record {
			// Preflight only observes: its checks run while its record is
			// written; nothing acts (cordons) before both are done.
			checked = make(chan error, 1)
			go func() { checked <- w.preflightChecks(ctx, nr, p, node) }()
		}
		if s.Record {
			var err error
			if rec, err = w.records().persist(ctx, nr, p, node, rec, s, out); err != nil {
				return err
			}
			out = carried{}
		}
		if s.Final {
			w.records().finished(nr, node, s)
			if w.Conditions != nil {
				w.Conditions.Settled(ctx, node)
			}
			return nil
		}
		if !s.Record && s.Act == nodestep.ActSwap && s.State != rec.Step {
			// A swap with no record of its own (nodestep.Next): status shows it.
			out.shown = w.records().showStep(nr, node, rec, s.State)
			if s.State == w.HoldAfterPersist {
				w.Log.Info("holding as the step begins (test hook)", zap.String("step", string(s.State)))
				<-ctx.Done()
				return ctx.Err()
			}
		}
		next, res, err := w.act(ctx, nr, p, node, rec, s, checked)
		rec = next
		if err != nil && w.deposed(err) {
			return notLeading(err) // not the step's failure: nothing to record, nothing halts
		}
		if errors.Is(err, errGateLeft) || errors.Is(err, errGatesEdited) {
			// The gate's wait was cut short: decide again from the same
			// view (an abort makes the node safe; an edited spec.gates is
			// judged again).
			nr, p = w.withLiveGates(nr, p)
			continue
		}
		if res.verdict != nil {
			out.verdict = res.verdict
		}
		out.drained = out.drained || res.drained
		var se *nodestep.StepError
		switch {
		case errors.As(err, &se):
			v = nodestep.View{At: s.State, Failed: se}
		case err != nil:
			return err
		default:
			v = nodestep.View{At: s.State}
		}
	}
}

// act does step s once its record (if any) is written, and returns the
// record as it then stands and the results for the next record. Bounds
// count from the record's StepSince, the step's persisted start.
func (w *Worker) act(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record, s nodestep.Step, checked chan error) (nodestep.Record, carried, error) {
	var res carried
	deadline := rec.StepSince.Add(s.Timeout)
	if !s.Record { // a resumed cordon or uncordon acts again, without a record
		var err error
		switch {
		case s.Cordon:
			rec, err = w.NodeWrites.Cordon(ctx, nr.Name, node, rec, nil)
		case s.Uncordon:
			rec, err = w.NodeWrites.Uncordon(ctx, node, rec, nil)
		}
		if err != nil {
			return rec, res, err
		}
	}
	var err error
	switch s.Act {
	case nodestep.ActPreflight:
		if checked == nil {
			err = w.preflightChecks(ctx, nr, p, node)
		} else {
			err = <-checked
		}
		if err == nil && s.Timeout > 0 {
			err = w.life().waitBaseline(ctx, p, node, deadline)
		}
		if err == nil {
			err = w.life().cni.cniBeforeCordon(ctx, p, node) // last before the cordon
		}
	case nodestep.ActDrain:
		var next nodestep.Record
		next, res.drained, err = w.Drainer.Drain(ctx, nr, p, node, rec, deadline)
		rec = next
	case nodestep.ActSwap:
		err = w.Swaps[s.Swap].Swap(ctx, s.Target, node, deadline, s.Timeout)
	case nodestep.ActWaitReady:
		for _, ref := range p.Targets {
			if err = w.Waits.Ready(ctx, ref, node, deadline, s.Timeout); err != nil {
				break
			}
		}
	case nodestep.ActSoak:
		res, err = w.life().soak(ctx, nr, p, node, rec, deadline)
	case nodestep.ActGate:
		res.verdict, err = w.judge(ctx, nr, p, node, rec)
	}
	return rec, res, err
}

// nodeRecord is the node's record as this rollout's worker starts from it
// (the newest this process can see), with its state read the one way
// (nodestep.NodeState).
func (w *Worker) nodeRecord(nr *v1alpha1.NodeRollout, node string) (nodestep.Record, v1alpha1.NodeState, bool) {
	var rec nodestep.Record
	if n := w.NodeWrites.Newest(node); n != nil {
		rec = nodestep.ParseRecord(n.Annotations)
	}
	ns, _ := statusEntry(w.Status, nr, node)
	st, fromRecord := nodestep.NodeState(w.Claims.Claimed(nr.Name, node), rec, nr.UID, ns.State)
	return rec.ForRollout(nr.UID), st, fromRecord
}

// Leaving says why the node's steps must stop short of its gate ("" when
// they go on), read live from the caches between steps: the user aborted
// the rollout or is deleting it, or the node no longer matches the live
// spec.nodeSelector.
func (w *Worker) Leaving(nr *v1alpha1.NodeRollout, node string) nodestep.Leave {
	live := w.latest(nr.Name)
	switch {
	case live == nil || live.UID != nr.UID || live.DeletionTimestamp != nil:
		return nodestep.LeaveDeleting
	case live.Spec.Abort:
		return nodestep.LeaveAbort
	case live.Spec.NodeSelector == nil:
		return ""
	}
	sel, err := metav1.LabelSelectorAsSelector(live.Spec.NodeSelector)
	n, nerr := w.Nodes.Get(node)
	if err != nil || nerr != nil || sel.Matches(labels.Set(n.Labels)) {
		return "" // an invalid selector is the planner's to report
	}
	return nodestep.LeaveSelector
}

func (w *Worker) latest(name string) *v1alpha1.NodeRollout {
	obj, ok, err := w.Rollouts.GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*v1alpha1.NodeRollout)
}

// recordVerdict writes v into the node's status entry: its line (the
// outcome and the headline), every reason as the detail, and the judge's
// summary (nil clears an older one).
func recordVerdict(ns *v1alpha1.NodeStatus, v health.Verdict) {
	ns.Verdict, ns.Detail, ns.Judgement = v.Line(), v.Reasons, v.Summary
}
