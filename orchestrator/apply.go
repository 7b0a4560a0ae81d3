package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/jobgate"
	"github.com/nodewise/nodewise/orchestrator/kuredlock"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/prepull"
	"github.com/nodewise/nodewise/orchestrator/status"
	"github.com/nodewise/nodewise/orchestrator/worker"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// applier carries out a decided pass (fleet.Pass) through the writers it
// holds, in the pass's order. It decides nothing but what a write's outcome
// changes: a Kured lock that cannot be held drops the pass's starts.
type applier struct {
	log      *zap.Logger
	metrics  *metrics.Metrics
	recorder record.EventRecorder
	rollouts v1alpha1.NodeRolloutInterface
	status   *write.Status
	worker   *worker.Worker
	claims   *observe.Claims
	kured    *kuredlock.Writer
	gate     gate.Gate
	// kube and targets create and delete pre-pull pods.
	kube    kubernetes.Interface
	targets observe.Targets
	now     func() time.Time
	// jobs runs spec.gates.conformance's Job before nodes start.
	jobs jobgate.Gate
}

// act carries out ps on nr up to its node actions; acted says it took
// them, and record is to follow.
func (a *applier) act(ctx context.Context, nr *v1alpha1.NodeRollout, ps *fleet.Pass) (acted bool, err error) {
	if ps.Finished {
		// A crash between its last node and the release left Kured's lock held.
		_, err := a.kured.Sync(ctx, locks.KuredHolder(nr.Name), nil)
		return false, err
	}
	if err := write.Requests(ctx, a.status, a.recorder, nr, ps.Requests); err != nil {
		return false, err // who asked is recorded before the pass acts on it
	}
	if ps.IgnoredRequest != nil {
		a.log.Warn("ignoring a node request", zap.String("rollout", nr.Name), zap.Error(ps.IgnoredRequest))
	}
	if ps.Request != nil {
		return false, a.nodeRequest(ctx, nr, ps.Request)
	}
	if ps.NotYet != "" {
		a.log.Info("not completing yet", zap.String("rollout", nr.Name), zap.String("why", ps.NotYet))
		return false, nil
	}
	if ps.Decision.Phase == v1alpha1.PhaseAborted {
		if err := a.jobs.Stop(ctx, nr); err != nil {
			return false, err
		}
	}
	if step := jobgate.Step(nr, ps.CanariesDone()); step != "" && ps.Starts() && !ps.Deleting {
		v, err := a.jobs.Before(ctx, nr, step)
		switch {
		case err != nil:
			ps.HoldStarts(v1alpha1.PhaseProgressing, "no node starts: conformance gate: "+err.Error()) // fail closed
		case v.Halt != "":
			ps.HoldStarts(v1alpha1.PhaseHalted, v.Halt)
		case v.Hold != "":
			ps.HoldStarts(v1alpha1.PhaseProgressing, v.Hold)
		}
	}
	a.holdKuredLock(ctx, nr, ps) // before any node starts
	if !ps.Deleting && ps.HoldsNodes() && !slices.Contains(nr.Finalizers, model.FinalizerReleaseNodes) {
		if err := write.SetFinalizer(ctx, a.rollouts, a.recorder, nr, true); err != nil {
			return false, err // nothing started: the next pass tries again
		}
	}
	for _, act := range ps.Decision.Actions {
		if err := a.actOn(ctx, nr, ps.Policy, act); err != nil {
			return false, fmt.Errorf("%s node %s: %w", act.Kind, act.Node, err)
		}
	}
	return true, nil
}

// record carries out the rest of an acted pass: the resume acknowledged,
// the phase and node list written, a deleted rollout's finalizer removed
// once no node of it is in flight.
func (a *applier) record(ctx context.Context, nr *v1alpha1.NodeRollout, ps *fleet.Pass) error {
	if ps.AcksResume() {
		if err := a.ackResume(ctx, nr); err != nil {
			return err
		}
	}
	var only, gauged []int
	if ps.Kept != nil {
		only, gauged = ps.Kept.Scope(ps.Decision)
	}
	if err := a.writePhase(ctx, nr, ps, a.settledRecords(nr, ps, only), only, gauged); err != nil {
		return err
	}
	if ps.Deleting && slices.Contains(nr.Finalizers, model.FinalizerReleaseNodes) && ps.NoneInFlight() && !a.claims.Holds(nr.Name) {
		return write.SetFinalizer(ctx, a.rollouts, a.recorder, nr, false)
	}
	return nil
}

// nodeRequest acts on a pending `nodewise retry` or `nodewise skip`: it
// records the node's new state (its record and status entry, one persist),
// ends the halt the node's failure made when none is left, emits an Event,
// and acknowledges the request. A crash before the acknowledgement acts
// again, finding the node already in its state.
func (a *applier) nodeRequest(ctx context.Context, nr *v1alpha1.NodeRollout, r *fleet.NodeRequest) error {
	d := r.RequestDecision
	switch {
	case d.Refused != "":
		a.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeRequestRefused", "%s", d.Refused)
		a.log.Info("node request refused", zap.String("rollout", nr.Name), zap.String("node", r.Node), zap.String("reason", d.Refused))
	case d.State != "":
		if err := a.worker.PersistState(ctx, nr, r.Node, d.State, d.Reason); err != nil {
			return fmt.Errorf("%s of node %s: %w", r.Verb, r.Node, err)
		}
		if d.ClearsHalt {
			if err := a.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
				if s.Phase == v1alpha1.PhaseHalted {
					s.Phase, s.HaltReason = v1alpha1.PhaseProgressing, ""
				}
			}); err != nil {
				return fmt.Errorf("ending the halt after the %s of node %s: %w", r.Verb, r.Node, err)
			}
		}
		reason := map[string]string{model.VerbRetry: "NodeRetried", model.VerbSkip: "NodeSkipped"}[r.Verb]
		a.recorder.Eventf(nr, corev1.EventTypeNormal, reason, "node %s %s", r.Node, d.Reason)
		a.log.Info("node request", zap.String("rollout", nr.Name), zap.String("node", r.Node), zap.String("verb", r.Verb), zap.String("reason", d.Reason))
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, model.AnnotationAckedNodeRequest, r.Token)
	if _, err := a.rollouts.Patch(ctx, nr.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: model.FieldManager}); err != nil {
		return fmt.Errorf("acknowledging the %s of node %s: %w", r.Verb, r.Node, err)
	}
	return nil
}

// holdKuredLock holds Kured's lock (locks.TakeKured) for the pass's
// KuredNodes, or releases it when there are none. The lock itself is the
// record: it names the rollout (nodewise:<rollout>), so a new leader finds
// it, keeps it while the rollout's nodes are in flight and releases it once
// they are not. When the lock cannot be held, the pass's starts are dropped
// (fleet.Pass.KuredLockRefused).
func (a *applier) holdKuredLock(ctx context.Context, nr *v1alpha1.NodeRollout, ps *fleet.Pass) {
	nodes := ps.KuredNodes
	w, err := a.kured.Sync(ctx, locks.KuredHolder(nr.Name), nodes)
	switch w {
	case kuredlock.Taken:
		a.recorder.Eventf(nr, corev1.EventTypeNormal, "KuredLockTaken", "holding Kured's lock on DaemonSet %s/%s as %s while node(s) %s are in flight",
			a.kured.Namespace, a.kured.DaemonSet, locks.KuredHolder(nr.Name), strings.Join(nodes, ", "))
	case kuredlock.Released:
		a.recorder.Eventf(nr, corev1.EventTypeNormal, "KuredLockReleased", "released Kured's lock on DaemonSet %s/%s: no node in flight",
			a.kured.Namespace, a.kured.DaemonSet)
	}
	switch {
	case err == nil:
	case len(nodes) == 0:
		a.log.Warn("releasing Kured's lock", zap.String("rollout", nr.Name), zap.Error(err))
	default:
		ps.KuredLockRefused("Kured's lock cannot be taken: " + planner.OneLine(err))
	}
}

func (a *applier) actOn(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, act planner.Action) error {
	switch act.Kind {
	case planner.ActResume:
		a.worker.Start(ctx, nr, p, act.Node)
	case planner.ActPrepull, planner.ActPrepullDone:
		return a.prepull(ctx, nr, p, act)
	case planner.ActStart, planner.ActRollback:
		if a.claims.Working(nr.Name, act.Node) {
			return nil
		}
		// Claim the node in memory (it counts as in flight from now on); its
		// worker persists Preflight before acting, so the nodes of a wave
		// persist in parallel.
		a.claims.Claim(nr.Name, act.Node)
		a.worker.Start(ctx, nr, p, act.Node)
	case planner.ActMarkDone:
		return a.worker.PersistState(ctx, nr, act.Node, v1alpha1.NodeDone, act.Reason)
	case planner.ActMarkRolledBack:
		return a.worker.PersistState(ctx, nr, act.Node, v1alpha1.NodeRolledBack, act.Reason)
	case planner.ActRetry:
		return a.worker.PersistState(ctx, nr, act.Node, v1alpha1.NodePending, act.Reason)
	case planner.ActSkip:
		if err := a.worker.PersistState(ctx, nr, act.Node, v1alpha1.NodeSkipped, act.Reason); err != nil {
			return err
		}
		a.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeSkipped", "node %s skipped: %s", act.Node, act.Reason)
		a.log.Warn("node skipped", zap.String("rollout", nr.Name), zap.String("node", act.Node), zap.String("reason", act.Reason))
	case planner.ActForget:
		return a.forgetNode(ctx, nr, act.Node, act.Reason)
	}
	return nil
}

// forgetNode ends the status entry of a node deleted while in flight: there
// is no Node to record on or hand back. A worker still on it stops by
// itself first (whileNodeExists).
func (a *applier) forgetNode(ctx context.Context, nr *v1alpha1.NodeRollout, node, reason string) error {
	if a.claims.Working(nr.Name, node) {
		return nil
	}
	now := metav1.NewTime(a.now())
	if err := a.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		ns := model.NodeEntry(s, node)
		if model.InFlight(ns.State) {
			ns.State, ns.Reason, ns.StateSince, ns.FinishTime = v1alpha1.NodeSkipped, reason, &now, &now
		}
	}); err != nil {
		return err
	}
	a.gate.Done(node)
	a.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeSkipped", "node %s skipped: %s", node, reason)
	a.log.Warn("node deleted while in flight", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("reason", reason))
	return nil
}

// prepull creates (ActPrepull) or deletes (ActPrepullDone) a node's
// pre-pull pods, one per target. Both are idempotent: an existing or missing
// pod is fine.
func (a *applier) prepull(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, act planner.Action) error {
	for _, ref := range p.Targets {
		if act.Kind == planner.ActPrepullDone {
			if err := prepull.Delete(ctx, a.kube, nr, act.Node, ref); err != nil {
				return err
			}
			continue
		}
		tv, err := a.targets.Target(ref)
		if err != nil {
			return err
		}
		if err := prepull.Create(ctx, a.kube, nr, act.Node, tv); err != nil {
			return err
		}
	}
	return nil
}

// settledRecords are the settled steps (Done, Skipped, Failed, RolledBack)
// of the nodes neither a worker of this process nor this pass's actions
// are on (a retry or a rollback moves the node on from the view), as their
// views read them: from the node's record when it has one of this rollout.
// The record (the node's annotations) is the truth; the status entry
// mirrors it, written behind in batches, so a leader gone before the batch
// was written leaves the entry behind its record. No worker resumes a
// settled node: writePhase brings the entry to the record.
// A merge of some entries only (only: positions in the plan order) reads
// the records of their nodes only.
func (a *applier) settledRecords(nr *v1alpha1.NodeRollout, ps *fleet.Pass, only []int) map[string]v1alpha1.NodeState {
	out := map[string]v1alpha1.NodeState{}
	nodes := ps.Snap.Nodes
	if only != nil {
		nodes = make([]model.NodeView, 0, len(only))
		for _, p := range only {
			n, _ := ps.Roster.At(p)
			nodes = append(nodes, *n)
		}
	}
	for _, n := range nodes {
		switch n.State {
		case v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeFailed, v1alpha1.NodeRolledBack:
			if !a.claims.Working(nr.Name, n.Name) {
				out[n.Name] = n.State
			}
		}
	}
	for _, act := range ps.Decision.Actions {
		delete(out, act.Node)
	}
	return out
}

// writePhase records the decision's phase, the plan's node list (each
// entry caught up with its node's settled record, given; the entries at
// only alone when given, status.RecordOnly), counts, targets and
// conditions, and emits an Event when the phase changes.
func (a *applier) writePhase(ctx context.Context, nr *v1alpha1.NodeRollout, ps *fleet.Pass, settled map[string]v1alpha1.NodeState, only, gauged []int) error {
	d, targets := ps.Decision, ps.Snap.Targets
	now := metav1.NewTime(a.now())
	// The mutation must stay pure (currentStatus applies queued ones to copies).
	prev, known := a.status.Current(nr.Name, nr.UID)
	prevPhase := prev.Phase
	mutate := func(s *v1alpha1.NodeRolloutStatus) { status.RecordOnly(s, nr, d, targets, settled, now, only, nil) }
	// A new phase (or generation, or halt reason) is written before the loop
	// goes on: a successor plans from it (a halt stays a halt). The rest
	// (counts, the plan's node list, conditions of the same phase) is written
	// behind, so the loop is free to start the next node meanwhile.
	next, edits, part := status.Preview(prev, nr, d, targets, settled, now, only)
	if !part {
		next = status.RecordCopy(prev)
		mutate(&next)
	}
	cur := next // what the status will be, without a copy made again (a worker's step queued meanwhile shows next pass)
	switch {
	case known && len(edits) == 0 && status.Same(prev, next):
		cur, edits = prev, nil // nothing new to write
	case known && next.Phase == prev.Phase && next.HaltReason == prev.HaltReason && next.ObservedGeneration == prev.ObservedGeneration:
		a.status.MutateLater(nr.Name, mutate)
	default:
		if err := a.status.Mutate(ctx, nr.Name, mutate); err != nil {
			return err
		}
		cur, _ = a.status.Current(nr.Name, "")
		edits, gauged = nil, nil
	}
	entries, whole := status.Gauged(cur, edits, gauged)
	var counts *v1alpha1.RolloutCounts // the rest of the entries by their counts
	if whole {
		gauged = nil
	} else {
		counts = &cur.Counts
	}
	a.updateGauges(nr.Name, entries, counts)
	if ps.Kept != nil {
		ps.Kept.Merged(d, entries, gauged)
	}
	a.metrics.Halted.WithLabelValues(nr.Name).Set(boolGauge(cur.Phase == v1alpha1.PhaseHalted))
	if prevPhase != cur.Phase {
		typ := corev1.EventTypeNormal
		if cur.Phase == v1alpha1.PhaseHalted || cur.Phase == v1alpha1.PhaseFailed {
			typ = corev1.EventTypeWarning
		}
		a.recorder.Eventf(nr, typ, string(cur.Phase), "rollout %s: %s", cur.Phase, d.Reason)
		a.log.Info("rollout phase", zap.String("rollout", nr.Name), zap.String("phase", string(cur.Phase)), zap.String("reason", d.Reason))
	}
	return nil
}

func (a *applier) ackResume(ctx context.Context, nr *v1alpha1.NodeRollout) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, model.AnnotationAckedResumeToken, nr.Annotations[model.AnnotationResumeToken])
	if _, err := a.rollouts.Patch(ctx, nr.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("acknowledging resume: %w", err)
	}
	return nil
}

// updateGauges sets the node-state gauges of rollout from its entries:
// every one, or (c given) those in flight or failed among others, the
// rest by their counts.
func (a *applier) updateGauges(rollout string, nodes []v1alpha1.NodeStatus, c *v1alpha1.RolloutCounts) {
	states := []v1alpha1.NodeState{v1alpha1.NodePending, v1alpha1.NodePreflight, v1alpha1.NodeCordon, v1alpha1.NodeDrain, v1alpha1.NodeSwapCNI, v1alpha1.NodeSwapZtunnel, v1alpha1.NodeWaitReady, v1alpha1.NodeUncordon, v1alpha1.NodeSoak, v1alpha1.NodeGate, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeFailed, v1alpha1.NodeRolledBack}
	by := make([]int, len(states)) // by index in states: Pending first, the most entries
	a.metrics.NodeState.DeletePartialMatch(prometheus.Labels{"rollout": rollout})
	for _, n := range nodes {
		if i := slices.Index(states, n.State); i >= 0 {
			by[i]++
		}
		switch n.State {
		case "", v1alpha1.NodePending, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeRolledBack:
		default:
			a.metrics.NodeState.WithLabelValues(rollout, n.Name, string(n.State)).Set(1)
		}
	}
	if c != nil {
		by[0], by[10], by[11], by[13] = int(c.Pending), int(c.Done), int(c.Skipped), int(c.RolledBack)
	}
	for i, st := range states {
		a.metrics.NodesByState.WithLabelValues(rollout, string(st)).Set(float64(by[i]))
	}
}
