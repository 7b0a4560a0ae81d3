package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// preflightChecks is preflight without the wait: observations only (the
// node, the skew, the gate's first sample), so they may run while the
// Preflight record is being written.
func (e *executor) preflightChecks(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) error {
	n, err := e.nodes.Get(node)
	if apierrors.IsNotFound(err) {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: node no longer exists")
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	if !model.NodeReady(n) {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: node is not Ready")
	}
	if err := e.preflightSkew(ctx, p, node); err != nil {
		return err
	}
	if pr, ok := e.gate.(gate.Preparer); ok {
		control, _ := e.controls(nr, p, node)
		if err := pr.Prepare(ctx, gate.PrepareInput{Node: node, Control: control, Baseline: p.Baseline}); err != nil {
			return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: gate: %v", err)
		}
	}
	return nil
}

// swap deletes the target's old pod on the node (once: the deleted UID is
// persisted first) and waits for the DaemonSet controller's new pod to be
// Ready on the newest revision.
func (e *executor) swap(ctx context.Context, ref v1alpha1.TargetRef, kind model.SwapKind, node string, deadline time.Time, timeout time.Duration) error {
	tv, err := e.targets.Target(ref)
	if err != nil {
		return err
	}
	if !tv.Found {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "DaemonSet %s/%s disappeared", ref.Namespace, ref.Name)
	}
	if err := e.waitSettled(ctx, ref, deadline, timeout); err != nil {
		return err
	}
	if kind == model.SwapSurge {
		return e.surge(ctx, ref, node, deadline, timeout)
	}
	if tv, err = e.targets.Target(ref); err != nil {
		return err
	}
	live, _, err := e.targets.OnNode(tv, node)
	if err != nil {
		return err
	}
	// Delete every live pod not on the newest revision, with a UID
	// precondition: a pod on the newest revision is never touched, so a
	// resumed swap cannot swap a node twice, and re-deleting a pod that is
	// already terminating (the cache may lag) is harmless.
	for _, pod := range live {
		if pod.Labels[model.LabelControllerRevisionHash] == tv.NewestHash {
			continue
		}
		uid := pod.UID
		err := e.o.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if refused(err) {
			return nodestep.Halt(nodestep.HaltSwapFailed, "deleting pod %s/%s on %s: %v", pod.Namespace, pod.Name, node, err)
		}
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		e.o.log.Debug("deleted old pod", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("node", node))
	}
	return e.waitReady(ctx, ref, node, deadline, timeout)
}

// waitSettled waits until the DaemonSet controller has observed the current
// template, so the newest ControllerRevision is known (bounded by the swap
// timeout, which ends at deadline).
func (e *executor) waitSettled(ctx context.Context, ref v1alpha1.TargetRef, deadline time.Time, timeout time.Duration) error {
	for {
		changed := e.changes.Wait()
		tv, err := e.targets.Target(ref)
		if err != nil {
			return err
		}
		if tv.Settled {
			return nil
		}
		if !e.o.cfg.Now().Before(deadline) {
			return nodestep.Halt(nodestep.HaltSwapTimeout, "%s/%s: the DaemonSet controller did not observe the current template within the swap timeout %s", ref.Namespace, ref.Name, timeout)
		}
		if err := observe.WaitChange(ctx, changed, deadline, e.o.cfg.Now); err != nil {
			return err
		}
	}
}

// waitReady waits until the node has a Ready pod of the target on its newest
// revision, or halts when the swap timeout passes (at deadline: counted from
// the persisted step start, so a restart does not extend it).
func (e *executor) waitReady(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time, timeout time.Duration) error {
	for {
		changed := e.changes.Wait()
		tv, err := e.targets.Target(ref)
		if err != nil {
			return err
		}
		live, _, err := e.targets.OnNode(tv, node)
		if err != nil {
			return err
		}
		var why string
		if !tv.Settled {
			live, why = nil, "the DaemonSet controller has not observed the current template yet"
		}
		for _, pod := range live {
			if pod.Labels[model.LabelControllerRevisionHash] != tv.NewestHash {
				why = fmt.Sprintf("pod %s is on revision %s, not %s", pod.Name, pod.Labels[model.LabelControllerRevisionHash], tv.NewestHash)
				continue
			}
			if ok, _ := model.PodReadyCondition(pod); ok {
				return nil
			}
			why = fmt.Sprintf("pod %s on revision %s is not Ready%s", pod.Name, tv.NewestHash, model.WaitingReason(pod))
		}
		if why == "" {
			why = "no pod scheduled yet"
		}
		if !e.o.cfg.Now().Before(deadline) {
			return nodestep.Halt(nodestep.HaltSwapTimeout, "%s/%s not Ready on the new revision within the swap timeout %s: %s", ref.Namespace, ref.Name, timeout, why)
		}
		if err := observe.WaitChange(ctx, changed, deadline, e.o.cfg.Now); err != nil {
			return err
		}
	}
}

// judge runs the gate on the node's record; an error fails closed. It
// returns the verdict's summary and the judge's judgement, for the next
// record (Done or Failed) to persist.
func (e *executor) judge(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) (*string, *v1alpha1.NodeJudgement, error) {
	in := gate.GateInput{Node: node, Now: e.o.cfg.Now(), Spec: nr.Spec.Gates}
	var persisted *v1alpha1.NodeJudgement
	if ns, ok := e.statusEntry(nr, node); ok {
		if ns.StartTime != nil {
			in.BaselineStart, in.SwapStart = ns.StartTime.Time, ns.StartTime.Time
		}
		persisted, in.Record = ns.Judgement, ns.Baseline
	}
	in.SoakStart = in.Now // a zero soak is not persisted: the gate judges the present
	if !rec.SoakSince.IsZero() {
		in.SoakStart = rec.SoakSince
		in.Previous = gate.JudgedSince(persisted, rec.SoakSince)
	}
	in.Progress = func(ctx context.Context, v health.Verdict) error {
		line := verdictOf(v)
		return e.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
			ns := model.NodeEntry(s, node)
			ns.Verdict, ns.Judgement = line, v.Summary
		})
	}
	if !rec.SwapSince.IsZero() {
		in.SwapStart = rec.SwapSince // the baseline window ends when the node is cordoned
	}
	in.BaselineStart = e.baselineStart(p, in.BaselineStart, in.SwapStart)
	in.SwappedInPlace, in.ZtunnelGrace = e.drainFacts(p, rec.DrainedAt, in.SwapStart)
	if _, samples := e.gate.(gate.Preparer); samples {
		// Only a gate that samples (the judge) compares with controls; the
		// observation behind them reads every node and pod of the cache.
		in.Control, in.ControlScope = e.controls(nr, p, node)
	}
	// A gate that holds the node (Inconclusive rounds) waits in Judge: the
	// user's abort or delete, the node leaving the selector, or an edit of
	// spec.gates must reach it there, not only between steps.
	gctx, stop := e.whileGateStands(ctx, nr, node)
	v, err := e.gate.Judge(gctx, in)
	stop()
	if cause := context.Cause(gctx); ctx.Err() == nil && (errors.Is(cause, errGateLeft) || errors.Is(cause, errGatesEdited)) {
		return nil, nil, cause
	}
	if err != nil {
		v = health.Verdict{Outcome: health.Fail, Reasons: []string{"gate error: " + err.Error()}}
	}
	if _, readiness := e.gate.(gate.ReadinessGate); v.Outcome == health.Pass && !readiness {
		// Whatever the gate, a node or pod that was not Ready for any part
		// of the soak does not pass; with no soak (soak: 0s), one that is
		// not Ready now.
		r, err := gate.SoakReadiness(e.nodes, e.pods, node, in.SoakStart)
		if err != nil {
			r.Problems = []string{"readiness: " + err.Error()}
		}
		if len(r.Problems) > 0 {
			v.Outcome, v.Reasons = health.Fail, append(r.Problems, "(the gate alone said: "+strings.Join(v.Reasons, "; ")+")")
		}
	}
	summary := verdictOf(v)
	if v.Outcome != health.Pass {
		return &summary, v.Summary, nodestep.Halt(nodestep.HaltGateFailed, "gate %s", summary)
	}
	return &summary, v.Summary, nil
}

// errGateLeft and errGatesEdited end a gate's wait early (whileGateStands):
// the worker decides again, which makes the node safe (abortedStep), or
// judges it again under the edited spec.gates (the rounds so far are
// persisted: Previous carries them on).
var (
	errGateLeft    = errors.New("the node's steps must stop short of its gate")
	errGatesEdited = errors.New("spec.gates was edited")
)

// whileGateStands is ctx, also cancelled once the node must leave (leaving:
// abort, deletion, the selector) with errGateLeft, or once the live
// spec.gates differs from nr's with errGatesEdited, read from the cache
// every observe.IdleCheck.
func (e *executor) whileGateStands(ctx context.Context, nr *v1alpha1.NodeRollout, node string) (context.Context, func()) {
	return observe.CancelWhen(ctx, observe.IdleCheck, func() error {
		if e.leaving(nr, node) != "" {
			return errGateLeft
		}
		if live := e.latest(nr.Name); live != nil && live.UID == nr.UID && !sameGates(live.Spec.Gates, nr.Spec.Gates) {
			return errGatesEdited
		}
		return nil
	})
}

// sameGates compares two gate specs as the API holds them (their JSON: a
// Duration keeps what was written, which reflection cannot compare).
func sameGates(a, b v1alpha1.GatesSpec) bool {
	ja, erra := json.Marshal(a)
	jb, errb := json.Marshal(b)
	return erra == nil && errb == nil && bytes.Equal(ja, jb)
}

// withLiveGates is nr and p with spec.gates as the cache holds it now.
func (e *executor) withLiveGates(nr *v1alpha1.NodeRollout, p model.Policy) (*v1alpha1.NodeRollout, model.Policy) {
	live := e.latest(nr.Name)
	if live == nil || live.UID != nr.UID {
		return nr, p
	}
	cp := *nr
	cp.Spec.Gates = *live.Spec.Gates.DeepCopy()
	p.NoControlGroup = cp.Spec.Gates.ControlGroup == v1alpha1.ControlGroupDisabled
	return &cp, p
}

// statusEntry is the node's status entry as this process knows it best.
func (e *executor) statusEntry(nr *v1alpha1.NodeRollout, node string) (v1alpha1.NodeStatus, bool) {
	st, _ := e.status.Current(nr.Name, nr.UID)
	for _, ns := range st.Nodes {
		if ns.Name == node {
			return ns, true
		}
	}
	return v1alpha1.NodeStatus{}, false
}

// keep asks a Keeper for the node's record to persist: at the cordon
// (swapStart, the baseline alone) or, with rec's SoakSince, at the soak's
// start. "" when the gate keeps none, or when it fails (logged: the node
// then fails closed on a handover, as it would without a record).
func (e *executor) keep(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, swapStart, soakStart time.Time) string {
	k, ok := e.gate.(gate.Keeper)
	if !ok {
		return ""
	}
	in := gate.KeepInput{Node: node, SwapStart: swapStart, SoakStart: soakStart, Spec: nr.Spec.Gates}
	if ns, ok := e.statusEntry(nr, node); ok {
		if ns.StartTime != nil {
			in.BaselineStart = ns.StartTime.Time
		}
		in.Record = ns.Baseline
	}
	in.BaselineStart = e.baselineStart(p, in.BaselineStart, swapStart)
	out, err := k.Keep(ctx, in)
	if err != nil {
		e.o.log.Info("no baseline record persisted: a successor leader would fail this node closed", zap.String("rollout", nr.Name), zap.String("node", node), zap.Error(err))
		return ""
	}
	return out
}

// keepSoakStart persists the record with the soak's first sample, before
// the soak is waited out (once: a resumed soak whose record holds it
// writes nothing).
func (e *executor) keepSoakStart(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) error {
	ns, _ := e.statusEntry(nr, node)
	out := e.keep(ctx, nr, p, node, rec.SwapSince, rec.SoakSince)
	if out == "" || out == ns.Baseline {
		return nil
	}
	return e.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) { model.NodeEntry(s, node).Baseline = out })
}

// controls is the node's control group as the rollout stands now (Controls
// over a fresh observation, with the status as this process last wrote it).
// When the world cannot be observed the node gets none: it is judged
// before/after alone, which only makes the judgement stricter.
func (e *executor) controls(nr *v1alpha1.NodeRollout, p model.Policy, node string) ([]string, string) {
	cur := *nr
	if st, ok := e.status.Current(nr.Name, nr.UID); ok {
		cur.Status = st
	}
	snap, err := e.observe(&cur, p)
	if err != nil {
		e.o.log.Info("no control group: cannot observe the cluster", zap.String("node", node), zap.Error(err))
		return nil, ""
	}
	return planner.Controls(snap, p, node)
}

// drainFacts says whether ztunnel was swapped on the node in place (from the
// policy and the persisted drain record, so it holds after a restart) and
// ztunnel's termination grace period, from the ztunnel target's pod template.
func (e *executor) drainFacts(p model.Policy, drainedAt, swapStart time.Time) (bool, time.Duration) {
	grace, swapsZtunnel := nodestep.DefaultZtunnelGrace, false
	for _, ref := range p.Targets {
		if nodestep.SwapState(ref) != v1alpha1.NodeSwapZtunnel {
			continue
		}
		swapsZtunnel = true
		if ds, err := e.dss.DaemonSets(ref.Namespace).Get(ref.Name); err == nil {
			grace = nodestep.ZtunnelGrace(ds)
		}
	}
	return nodestep.SwappedInPlace(p.Drain, swapsZtunnel, drainedAt, swapStart), grace
}

func (e *executor) upToDate(p model.Policy, node string) bool {
	for _, ref := range p.Targets {
		tv, err := e.targets.Target(ref)
		if err != nil || !tv.Found || !tv.Settled {
			return false
		}
		live, _, err := e.targets.OnNode(tv, node)
		if err != nil {
			return false
		}
		ok := false
		for _, pod := range live {
			if r, _ := model.PodReadyCondition(pod); r && pod.Labels[model.LabelControllerRevisionHash] == tv.NewestHash {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
