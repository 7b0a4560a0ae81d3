package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// PersistState records a node's state decided by the planner (Done,
// RolledBack, Pending for a retry), from the node's newest record.
func (w *Worker) PersistState(ctx context.Context, nr *v1alpha1.NodeRollout, node string, st v1alpha1.NodeState, reason string) error {
	rec, _, _ := w.nodeRecord(nr, node)
	if _, err := w.records().persist(ctx, nr, model.Policy{}, node, rec, nodestep.Step{State: st, Record: true, Reason: reason}, carried{}); err != nil {
		return err
	}
	if w.Conditions != nil {
		w.Conditions.Settled(ctx, node)
	}
	return nil
}

// nodeRecords writes a node's steps: its record (the node's annotations,
// with the cordon or uncordon a step makes) and the record's mirror in the
// node's status entry, with what the gate keeps of the node; and it tells
// people how the node ended.
type nodeRecords struct {
	nodeWrites NodeWriter
	status     StatusWriter
	claims     *observe.Claims
	targets    observe.Targets        // the old pods a swap deletes, recorded before it
	nodes      corelisters.NodeLister // the Node a halt's event names
	life       judgedLife             // the gate's records at the cordon, its release at the end
	recorder   record.EventRecorder
	metrics    *metrics.Metrics
	log        *zap.Logger
	now        func() time.Time
	hold       v1alpha1.NodeState // HoldAfterPersist
}

// records is the node's records over the worker's rooms.
func (w *Worker) records() nodeRecords {
	return nodeRecords{
		nodeWrites: w.NodeWrites, status: w.Status, claims: w.Claims, targets: w.Targets, nodes: w.Nodes, life: w.life(),
		recorder: w.Recorder, metrics: w.Metrics, log: w.Log, now: w.Now, hold: w.HoldAfterPersist,
	}
}

// persist writes step s's record: the node's annotations (the record before,
// rec, turned into the record after, with the cordon or uncordon the step
// makes in the same conditional patch) and the node's entry in the
// NodeRollout status, with what the last acts returned (c). The two writes
// run concurrently; the step acts only after both succeeded. If one fails,
// the older record wins on resume and the (idempotent) earlier step simply
// runs again. It returns the record as the API then holds it.
func (r nodeRecords) persist(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record, s nodestep.Step, c carried) (nodestep.Record, error) {
	now := r.now()
	st := s.State
	next := rec.WithStep(nr.Name, nr.UID, st, now)
	var kept gate.Kept
	if s.StampSwap {
		next.SwapSince = now
		// The baseline window ends here: its record goes with this step's
		// status write, before the swap acts.
		kept = r.life.keep(ctx, nr, p, node, now, time.Time{})
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
			if uid := r.oldPod(t, node); uid != "" {
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
			wr.rec, wr.err = r.nodeWrites.Cordon(ctx, nr.Name, node, next, ann)
		case s.Uncordon:
			wr.rec, wr.err = r.nodeWrites.Uncordon(ctx, node, next, ann)
		default:
			wr.rec, wr.err = r.nodeWrites.Record(ctx, nr.UID, node, rec, ann)
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
			recordVerdict(ns, *c.verdict)
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
		r.status.MutateLater(nr.Name, mirror)
	} else {
		statusErr = r.status.Mutate(ctx, nr.Name, mirror)
	}
	wr := <-nodeDone
	if err := errors.Join(wr.err, statusErr); err != nil {
		return rec, err
	}
	if st == v1alpha1.NodeAbortCleanup || (!model.InFlight(st) && st != v1alpha1.NodePending) {
		r.life.gate.Done(node)
	}
	r.claims.Unclaim(nr.Name, node)
	timed, since := rec.Step, rec.StepSince
	if c.shown != nil { // the step acted on last had no record of its own
		timed, since = c.shown.state, c.shown.since
	}
	if rec.Ours(nr.UID) && model.InFlight(timed) && timed != st && !since.IsZero() {
		r.metrics.StepSeconds.WithLabelValues(string(timed)).Observe(now.Sub(since).Seconds())
	}
	r.log.Info("node step", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("step", string(st)), zap.String("reason", s.Reason))
	if st == r.hold && st != "" {
		r.log.Info("holding after persisting (test hook)", zap.String("step", string(st)))
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

// showStep mirrors into status a step that has no record of its own (the
// record before it stays the node's: a successor resumes from that), and
// times the step before it.
func (r nodeRecords) showStep(nr *v1alpha1.NodeRollout, node string, rec nodestep.Record, st v1alpha1.NodeState) *shownStep {
	now := r.now()
	if rec.Ours(nr.UID) && model.InFlight(rec.Step) && !rec.StepSince.IsZero() {
		r.metrics.StepSeconds.WithLabelValues(string(rec.Step)).Observe(now.Sub(rec.StepSince).Seconds())
	}
	r.status.MutateLater(nr.Name, func(ss *v1alpha1.NodeRolloutStatus) {
		ns := model.NodeEntry(ss, node)
		if ns.State != st {
			ns.StateSince = &metav1.Time{Time: now}
		}
		ns.State, ns.Reason = st, ""
	})
	r.log.Info("node step", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("step", string(st)), zap.String("record", string(rec.Step)))
	return &shownStep{state: st, since: now}
}

// oldPod is the UID of the live pod of the target on the node that is not on
// the newest revision: the one its swap deletes ("" when there is none).
func (r nodeRecords) oldPod(ref v1alpha1.TargetRef, node string) types.UID {
	tv, err := r.targets.Target(ref)
	if err != nil || !tv.Found {
		return ""
	}
	live, _, err := r.targets.OnNode(tv, node)
	if err != nil {
		return ""
	}
	for _, pod := range live {
		if pod.Labels[model.LabelControllerRevisionHash] != tv.NewestHash {
			return pod.UID
		}
	}
	return ""
}

// finished tells people how a node ended when it did not simply pass.
func (r nodeRecords) finished(nr *v1alpha1.NodeRollout, node string, s nodestep.Step) {
	switch {
	case s.State == v1alpha1.NodeSkipped:
		r.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeSkipped", "node %s skipped: %s", node, s.Reason)
	case s.Halt != "":
		reason := fmt.Sprintf("node %s: %s", node, s.Reason)
		r.metrics.Halts.WithLabelValues(s.Halt).Inc()
		r.recorder.Eventf(nr, corev1.EventTypeWarning, "Halted", "rollout halted: %s", reason)
		r.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: node, UID: r.nodeUID(node), APIVersion: "v1"}, corev1.EventTypeWarning, "NodewiseHalted", "NodeRollout %s halted on this node: %s", nr.Name, s.Reason)
		r.log.Warn("rollout halted", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("reason", s.Reason))
	}
}

// nodeUID is the node's UID, "" when the cache holds no such node.
func (r nodeRecords) nodeUID(node string) types.UID {
	if n, err := r.nodes.Get(node); err == nil {
		return n.UID
	}
	return ""
}
