package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// conflictBackoff retries 409s for a few seconds: the leader is the only
// writer of status, so conflicts come from users editing spec.
var conflictBackoff = wait.Backoff{Steps: 12, Duration: 20 * time.Millisecond, Factor: 1.6, Jitter: 0.2, Cap: 2 * time.Second}

// patchNode merge-patches a node's annotations (nil value = delete) and,
// when unschedulable is set, spec.unschedulable. With rv set the patch is
// conditional on that resourceVersion, so a racing write returns 409.
func (e *executor) patchNode(ctx context.Context, node, rv string, ann map[string]*string, unschedulable *bool) error {
	meta := map[string]any{"annotations": ann}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	body := map[string]any{"metadata": meta}
	if unschedulable != nil {
		body["spec"] = map[string]any{"unschedulable": *unschedulable}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encoding node patch: %w", err)
	}
	out, err := e.o.kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("patching node %s: %w", node, err)
	}
	e.mu.Lock()
	e.written[node] = out
	e.mu.Unlock()
	return nil
}

// persistStep records that node is about to act on st, in the node's
// annotations (plus extra ones; nil deletes) and in the NodeRollout status.
// The two writes run concurrently; the step acts only after both succeeded.
// If one fails, the older record wins on resume and the (idempotent) earlier
// step simply runs again.
func (e *executor) persistStep(ctx context.Context, nr *v1alpha1.NodeRollout, node string, st v1alpha1.NodeState, reason string, extra map[string]*string) (time.Time, error) {
	return e.persistStepWith(ctx, nr, node, st, reason, extra, nil)
}

// persistStepWith is persistStep whose node write is write(annotations)
// instead of a plain annotation patch: cordon and uncordon write their step
// and act in one patch, conditional on the node's resourceVersion, so the
// record and the act happen together or not at all.
//
// stamps are annotation keys set to the step's time with it (and remembered):
// AnnotationSwapSince with the cordon, AnnotationSoakSince with the soak.
func (e *executor) persistStepWith(ctx context.Context, nr *v1alpha1.NodeRollout, node string, st v1alpha1.NodeState, reason string, extra map[string]*string, write func(map[string]*string) error, stamps ...string) (time.Time, error) {
	now := e.o.cfg.Now()
	ts := now.UTC().Format(time.RFC3339Nano)
	ann := map[string]*string{
		AnnotationRollout:    ptr(nr.Name),
		AnnotationRolloutUID: ptr(string(nr.UID)),
		AnnotationStep:       ptr(string(st)),
		AnnotationStepSince:  ptr(ts),
	}
	for k, v := range extra {
		ann[k] = v
	}
	for _, key := range stamps {
		ann[key] = ptr(ts)
		e.mu.Lock()
		e.soaks[nr.Name+"/"+node+"/"+key] = now
		e.mu.Unlock()
	}
	e.mu.Lock()
	verdict, hasVerdict := e.verdicts[nr.Name+"/"+node]
	delete(e.verdicts, nr.Name+"/"+node)
	carry := e.carry[nr.Name+"/"+node]
	delete(e.carry, nr.Name+"/"+node)
	if carry.drained {
		ann[AnnotationDrainedAt] = ptr(ts)
		e.soaks[nr.Name+"/"+node+"/"+AnnotationDrainedAt] = now
	}
	e.mu.Unlock()
	nodeErr := make(chan error, 1)
	if write == nil {
		write = func(ann map[string]*string) error { return e.patchNode(ctx, node, "", ann, nil) }
	}
	go func() { nodeErr <- write(ann) }()
	mirror := func(s *v1alpha1.NodeRolloutStatus) {
		ns := nodeEntry(s, node)
		if ns.State != st {
			ns.StateSince = &metav1.Time{Time: now}
		}
		ns.State, ns.Reason = st, reason
		if hasVerdict {
			ns.Verdict, ns.Judgement = verdict, carry.judgement
		}
		if carry.halt != "" {
			// In the same write as the Failed step: a planner pass in between
			// would otherwise halt with a generic reason first.
			s.Phase = v1alpha1.PhaseHalted
			if s.HaltReason == "" {
				s.HaltReason = carry.halt
			}
		}
		switch {
		case InFlight(st) && ns.StartTime == nil: // Preflight, or the cordon when preflight has no record
			ns.StartTime = &metav1.Time{Time: now}
		case !InFlight(st) && st != v1alpha1.NodePending:
			ns.FinishTime = &metav1.Time{Time: now}
		}
	}
	// The node annotation is the record a successor resumes from (observe
	// reads it before status), so a step acts once it is written. The status
	// entry mirrors it and is written behind, group-committed with the other
	// nodes' steps, except where status itself is the record: a halt, a
	// failed or skipped node, a reason, a verdict, a node the planner changes.
	var statusErr error
	if statusBehind(st, reason, hasVerdict, carry) {
		e.mutateStatusLater(ctx, nr.Name, mirror)
	} else {
		statusErr = e.mutateStatus(ctx, nr.Name, mirror)
	}
	if err := errors.Join(<-nodeErr, statusErr); err != nil {
		return now, err
	}
	if r, ok := e.gate.(Releaser); ok && (st == v1alpha1.NodeAbortCleanup || (!InFlight(st) && st != v1alpha1.NodePending)) {
		r.Done(node)
	}
	prev, hadPrev := e.marked(nr.Name, node)
	e.mark(nr.Name, node, st, now)
	if hadPrev && prev.state != st && !prev.since.IsZero() {
		e.o.metrics.StepSeconds.WithLabelValues(string(prev.state)).Observe(now.Sub(prev.since).Seconds())
	}
	e.o.log.Info("node step", zap.String("rollout", nr.Name), zap.String("node", node), zap.String("step", string(st)), zap.String("reason", reason))
	if st == e.o.cfg.HoldAfterPersist && st != "" {
		e.o.log.Info("holding after persisting (test hook)", zap.String("step", string(st)))
		<-ctx.Done()
		return now, ctx.Err()
	}
	return now, nil
}

// statusBehind says whether a step's status mirror may be written behind:
// the forward in-flight steps and Done, whose node annotation alone lets a
// successor resume. A halt, a reason (failed, skipped, aborted, retried
// nodes) or a verdict that is not a pass is written before anything goes on.
// A passed node's verdict rides with its Done: a crash within that one
// status write loses the verdict text, never the node's state.
func statusBehind(st v1alpha1.NodeState, reason string, hasVerdict bool, c carried) bool {
	if reason != "" || c.halt != "" || (hasVerdict && st != v1alpha1.NodeDone) {
		return false
	}
	return st == v1alpha1.NodeDone || (InFlight(st) && st != v1alpha1.NodeAbortCleanup)
}

func nodeEntry(s *v1alpha1.NodeRolloutStatus, node string) *v1alpha1.NodeStatus {
	for i := range s.Nodes {
		if s.Nodes[i].Name == node {
			return &s.Nodes[i]
		}
	}
	s.Nodes = append(s.Nodes, v1alpha1.NodeStatus{Name: node, State: v1alpha1.NodePending})
	return &s.Nodes[len(s.Nodes)-1]
}

func ptr[T any](v T) *T { return &v }
