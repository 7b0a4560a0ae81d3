package worker

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

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// preflightChecks is preflight without the wait: observations only (the
// node, the skew unless a fresh pre-check passed it, the gate's first
// sample), so they may run while the Preflight record is being written.
func (w *Worker) preflightChecks(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) error {
	n, err := w.Nodes.Get(node)
	if apierrors.IsNotFound(err) {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: node no longer exists")
	}
	if err != nil {
		return fmt.Errorf("reading node %s: %w", node, err)
	}
	if !model.NodeReady(n) {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: node is not Ready")
	}
	// A pass pre-checked while the nodes before it soaked stands (the
	// template and spec it saw are part of the key); else check now.
	if !w.Prechecks.passed(w.precheckKey(nr, p, node), w.Now()) {
		if err := w.Skew.Check(ctx, p, node); err != nil {
			return err
		}
	}
	var control []string
	if w.Gate.Reads().Samples {
		control, _ = w.controls(nr, p, node)
	}
	if err := w.Gate.Prepare(ctx, gate.PrepareInput{Node: node, Control: control, Baseline: p.Baseline}); err != nil {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: gate: %v", err)
	}
	return nil
}

// judge runs the gate on the node's record; an error fails closed. It
// returns the verdict's summary and the judge's judgement, for the next
// record (Done or Failed) to persist.
func (w *Worker) judge(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) (*string, *v1alpha1.NodeJudgement, error) {
	in := gate.GateInput{Node: node, Now: w.Now(), Spec: nr.Spec.Gates}
	var persisted *v1alpha1.NodeJudgement
	if ns, ok := w.statusEntry(nr, node); ok {
		if ns.StartTime != nil {
			in.BaselineStart, in.SwapStart = ns.StartTime.Time, ns.StartTime.Time
		}
		persisted, in.Record, in.Controls = ns.Judgement, ns.Baseline, ns.Controls
	}
	in.SoakStart = in.Now // a zero soak is not persisted: the gate judges the present
	if !rec.SoakSince.IsZero() {
		in.SoakStart = rec.SoakSince
		in.Previous = gate.JudgedSince(persisted, rec.SoakSince)
	}
	in.Progress = func(ctx context.Context, v health.Verdict) error {
		line := verdictOf(v)
		return w.Status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
			ns := model.NodeEntry(s, node)
			ns.Verdict, ns.Judgement = line, v.Summary
		})
	}
	if !rec.SwapSince.IsZero() {
		in.SwapStart = rec.SwapSince // the baseline window ends when the node is cordoned
	}
	in.BaselineStart = w.baselineStart(p, in.BaselineStart, in.SwapStart)
	in.SwappedInPlace, in.ZtunnelGrace = w.drainFacts(p, rec.DrainedAt, in.SwapStart)
	if w.Gate.Reads().Samples {
		// Only a gate that samples (the judge) compares with controls; the
		// observation behind them reads every node and pod of the cache.
		in.Control, in.ControlScope = w.controls(nr, p, node)
	}
	// A gate that holds the node (Inconclusive rounds) waits in Judge: the
	// user's abort or delete, the node leaving the selector, or an edit of
	// spec.gates must reach it there, not only between steps.
	gctx, stop := w.whileGateStands(ctx, nr, node)
	v, err := w.Gate.Judge(gctx, in)
	stop()
	if cause := context.Cause(gctx); ctx.Err() == nil && (errors.Is(cause, errGateLeft) || errors.Is(cause, errGatesEdited)) {
		return nil, nil, cause
	}
	if err != nil {
		v = health.Verdict{Outcome: health.Fail, Reasons: []string{"gate error: " + err.Error()}}
	}
	if v.Outcome == health.Pass {
		// Whatever the gate, a node or pod that was not Ready for any part
		// of the soak does not pass; with no soak (soak: 0s), one that is
		// not Ready now. The readiness gate's own pass is read again (two
		// cache reads): no gate is told apart by its type.
		r, err := gate.SoakReadiness(w.Nodes, w.Pods, node, in.SoakStart)
		if err != nil {
			r.Problems = []string{"readiness: " + err.Error()}
		}
		if len(r.Problems) > 0 {
			v.Outcome, v.Reasons = health.Fail, append(r.Problems, "(the gate alone said: "+strings.Join(v.Reasons, "; ")+")")
		}
	}
	v = w.cniAfterSwap(ctx, p, node, v)
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
func (w *Worker) whileGateStands(ctx context.Context, nr *v1alpha1.NodeRollout, node string) (context.Context, func()) {
	return observe.CancelWhen(ctx, observe.IdleCheck, func() error {
		if w.Leaving(nr, node) != "" {
			return errGateLeft
		}
		if live := w.latest(nr.Name); live != nil && live.UID == nr.UID && !sameGates(live.Spec.Gates, nr.Spec.Gates) {
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
func (w *Worker) withLiveGates(nr *v1alpha1.NodeRollout, p model.Policy) (*v1alpha1.NodeRollout, model.Policy) {
	live := w.latest(nr.Name)
	if live == nil || live.UID != nr.UID {
		return nr, p
	}
	cp := *nr
	cp.Spec.Gates = *live.Spec.Gates.DeepCopy()
	p.NoControlGroup = cp.Spec.Gates.ControlGroup == v1alpha1.ControlGroupDisabled
	return &cp, p
}

// statusEntry is the node's status entry as this process knows it best.
func (w *Worker) statusEntry(nr *v1alpha1.NodeRollout, node string) (v1alpha1.NodeStatus, bool) {
	st, ok := w.Status.Current(nr.Name, nr.UID)
	if !ok {
		// Nothing written by this process yet (a new leader whose first
		// pass resumed the node before its first status write returned):
		// the status as the rollout was read, a predecessor's records in it.
		st = nr.Status
	}
	for _, ns := range st.Nodes {
		if ns.Name == node {
			return ns, true
		}
	}
	return v1alpha1.NodeStatus{}, false
}

// keep asks the gate for the node's records to persist: at the cordon
// (swapStart, the baseline alone) or, with rec's SoakSince, at the soak's
// start; the control nodes' with them. None when the gate keeps none, or
// when it fails (logged: the node then fails closed on a handover, as it
// would without a record).
func (w *Worker) keep(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, swapStart, soakStart time.Time) gate.Kept {
	in := gate.KeepInput{Node: node, SwapStart: swapStart, SoakStart: soakStart, Spec: nr.Spec.Gates}
	if ns, ok := w.statusEntry(nr, node); ok {
		if ns.StartTime != nil {
			in.BaselineStart = ns.StartTime.Time
		}
		in.Record, in.Controls = ns.Baseline, ns.Controls
	}
	in.BaselineStart = w.baselineStart(p, in.BaselineStart, swapStart)
	if w.Gate.Reads().Samples {
		in.Control, _ = w.controls(nr, p, node)
	}
	out, err := w.Gate.Keep(ctx, in)
	if err != nil {
		w.Log.Info("no baseline record persisted: a successor leader would fail this node closed", zap.String("rollout", nr.Name), zap.String("node", node), zap.Error(err))
		return gate.Kept{}
	}
	return out
}

// keepSoakStart persists the records with the soak's first sample, before
// the soak is waited out (once: a resumed soak whose records hold it
// writes nothing).
func (w *Worker) keepSoakStart(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) error {
	ns, _ := w.statusEntry(nr, node)
	out := w.keep(ctx, nr, p, node, rec.SwapSince, rec.SoakSince)
	if out.Baseline == "" || out.Baseline == ns.Baseline && out.Controls == ns.Controls {
		return nil
	}
	return w.Status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		e := model.NodeEntry(s, node)
		e.Baseline, e.Controls = out.Baseline, out.Controls
	})
}

// controls is the node's control group as the rollout stands now (Controls
// over a fresh observation, with the status as this process last wrote it).
// When the world cannot be observed the node gets none: it is judged
// before/after alone, which only makes the judgement stricter.
func (w *Worker) controls(nr *v1alpha1.NodeRollout, p model.Policy, node string) ([]string, string) {
	cur := *nr
	if st, ok := w.Status.Current(nr.Name, nr.UID); ok {
		cur.Status = st
	}
	snap, err := w.Fleet.Snapshot(&cur, p)
	if err != nil {
		w.Log.Info("no control group: cannot observe the cluster", zap.String("node", node), zap.Error(err))
		return nil, ""
	}
	return planner.Controls(snap, p, node)
}

// drainFacts says whether ztunnel was swapped on the node in place (from the
// policy and the persisted drain record, so it holds after a restart) and
// ztunnel's termination grace period, from the ztunnel target's pod template.
func (w *Worker) drainFacts(p model.Policy, drainedAt, swapStart time.Time) (bool, time.Duration) {
	grace, swapsZtunnel := nodestep.DefaultZtunnelGrace, false
	for _, ref := range p.Targets {
		if nodestep.SwapState(ref) != v1alpha1.NodeSwapZtunnel {
			continue
		}
		swapsZtunnel = true
		if ds, err := w.DaemonSets.DaemonSets(ref.Namespace).Get(ref.Name); err == nil {
			grace = nodestep.ZtunnelGrace(ds)
		}
	}
	return nodestep.SwappedInPlace(p.Drain, swapsZtunnel, drainedAt, swapStart), grace
}
