package worker

import (
	"context"
	"time"

	"go.uber.org/zap"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// judgedLife is a node's life through its gate: prepared at preflight,
// its baseline waited for (baseline.go) and kept at the cordon and at the
// soak's start, the soak with its enrollment watchdog (enrollwatch.go),
// and the gate's verdict with the readiness and istio-cni checks added.
// It reads the rollout (for the control group) but writes only the node's
// status entry, through status.
type judgedLife struct {
	gate       gate.Gate
	fleet      Fleet
	status     StatusWriter
	nodes      corelisters.NodeLister
	pods       observe.PodCache
	daemonSets appslisters.DaemonSetLister // the ztunnel target's grace period
	cni        cniCheck
	log        *zap.Logger
	now        func() time.Time
	sleep      func(ctx context.Context, until time.Time) error // nil: a timer
}

// life is the node's judged life over the worker's rooms.
func (w *Worker) life() judgedLife {
	return judgedLife{
		gate: w.Gate, fleet: w.Fleet, status: w.Status, nodes: w.Nodes, pods: w.Pods, daemonSets: w.DaemonSets,
		cni: cniCheck{agents: w.CNI, pods: w.Pods}, log: w.Log, now: w.Now, sleep: w.Sleep,
	}
}

// prepare hands the gate the node at preflight, with its control nodes
// when the gate samples them; a gate that cannot prepare halts the node.
func (l judgedLife) prepare(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) error {
	var control []string
	if l.gate.Reads().Samples {
		control, _ = l.controls(nr, p, node)
	}
	if err := l.gate.Prepare(ctx, gate.PrepareInput{Node: node, Control: control, Baseline: p.Baseline}); err != nil {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: gate: %v", err)
	}
	return nil
}

// input is what the gate judges the node on: its windows from the record
// and the status entry (read back after a restart), what was persisted of
// its judgement and baseline in this soak, the drain facts and, for a gate
// that samples, its control group as the rollout stands now. Progress
// persists an Inconclusive round in the node's status entry.
func (l judgedLife) input(nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) gate.GateInput {
	in := gate.GateInput{Node: node, Now: l.now(), Spec: nr.Spec.Gates, Soak: p.Soak}
	var persisted *v1alpha1.NodeJudgement
	if ns, ok := statusEntry(l.status, nr, node); ok {
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
		return l.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
			recordVerdict(model.NodeEntry(s, node), v)
		})
	}
	if !rec.SwapSince.IsZero() {
		in.SwapStart = rec.SwapSince // the baseline window ends when the node is cordoned
	}
	in.BaselineStart = l.baselineStart(p, in.BaselineStart, in.SwapStart)
	in.SwappedInPlace, in.ZtunnelGrace = l.drainFacts(p, rec.DrainedAt, in.SwapStart)
	if l.gate.Reads().Samples {
		// Only a gate that samples (the judge) compares with controls; the
		// observation behind them reads every node and pod of the cache.
		in.Control, in.ControlScope = l.controls(nr, p, node)
	}
	return in
}

// verdict is the gate's verdict (v, or a Fail for its error: gates fail
// closed) with the node's readiness through the soak (from soakStart) and
// istio-cni's health added, for the next record (Done or Failed) to
// persist, and the halt, with the verdict's line, when the node did not
// pass.
func (l judgedLife) verdict(ctx context.Context, p model.Policy, node string, soakStart time.Time, v health.Verdict, err error) (*health.Verdict, error) {
	if err != nil {
		v = health.Verdict{Outcome: health.Fail, Reasons: []string{"gate error: " + err.Error()}}
	}
	if v.Outcome == health.Pass {
		// Whatever the gate, a node or pod that was not Ready for any part
		// of the soak does not pass; with no soak (soak: 0s), one that is
		// not Ready now. The readiness gate's own pass is read again (two
		// cache reads): no gate is told apart by its type.
		r, err := gate.SoakReadiness(l.nodes, l.pods, node, soakStart)
		if err != nil {
			r.Problems = []string{"readiness: " + err.Error()}
		}
		if len(r.Problems) > 0 {
			v = overruled(v, health.Lead(r.Problems), r.Problems)
		}
	}
	v = l.cni.cniAfterSwap(ctx, p, node, v)
	if v.Outcome != health.Pass {
		return &v, nodestep.Halt(nodestep.HaltGateFailed, "gate %s", v.Line())
	}
	return &v, nil
}

// keep asks the gate for the node's records to persist: at the cordon
// (swapStart, the baseline alone) or, with rec's SoakSince, at the soak's
// start; the control nodes' with them. None when the gate keeps none, or
// when it fails (logged: the node then fails closed on a handover, as it
// would without a record).
func (l judgedLife) keep(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, swapStart, soakStart time.Time) gate.Kept {
	in := gate.KeepInput{Node: node, SwapStart: swapStart, SoakStart: soakStart, Spec: nr.Spec.Gates}
	if ns, ok := statusEntry(l.status, nr, node); ok {
		if ns.StartTime != nil {
			in.BaselineStart = ns.StartTime.Time
		}
		in.Record, in.Controls = ns.Baseline, ns.Controls
	}
	in.BaselineStart = l.baselineStart(p, in.BaselineStart, swapStart)
	if l.gate.Reads().Samples {
		in.Control, _ = l.controls(nr, p, node)
	}
	out, err := l.gate.Keep(ctx, in)
	if err != nil {
		l.log.Info("no baseline record persisted: a successor leader would fail this node closed", zap.String("rollout", nr.Name), zap.String("node", node), zap.Error(err))
		return gate.Kept{}
	}
	return out
}

// keepSoakStart persists the records with the soak's first sample, before
// the soak is waited out (once: a resumed soak whose records hold it
// writes nothing).
func (l judgedLife) keepSoakStart(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) error {
	ns, _ := statusEntry(l.status, nr, node)
	out := l.keep(ctx, nr, p, node, rec.SwapSince, rec.SoakSince)
	if out.Baseline == "" || out.Baseline == ns.Baseline && out.Controls == ns.Controls {
		return nil
	}
	return l.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		e := model.NodeEntry(s, node)
		e.Baseline, e.Controls = out.Baseline, out.Controls
	})
}

// controls is the node's control group as the rollout stands now (Controls
// over a fresh observation, with the status as this process last wrote it).
// When the rollout cannot be observed the node gets none: it is judged
// before/after alone, which only makes the judgement stricter.
func (l judgedLife) controls(nr *v1alpha1.NodeRollout, p model.Policy, node string) ([]string, string) {
	cur := *nr
	if st, ok := l.status.Current(nr.Name, nr.UID); ok {
		cur.Status = st
	}
	snap, err := l.fleet.Snapshot(&cur, p)
	if err != nil {
		l.log.Info("no control group: cannot observe the cluster", zap.String("node", node), zap.Error(err))
		return nil, ""
	}
	return planner.Controls(snap, p, node)
}

// drainFacts says whether ztunnel was swapped on the node in place (from the
// policy and the persisted drain record, so it holds after a restart) and
// ztunnel's termination grace period, from the ztunnel target's pod template.
func (l judgedLife) drainFacts(p model.Policy, drainedAt, swapStart time.Time) (bool, time.Duration) {
	grace, swapsZtunnel := nodestep.DefaultZtunnelGrace, false
	for _, ref := range p.Targets {
		if nodestep.SwapState(ref) != v1alpha1.NodeSwapZtunnel {
			continue
		}
		swapsZtunnel = true
		if ds, err := l.daemonSets.DaemonSets(ref.Namespace).Get(ref.Name); err == nil {
			grace = nodestep.ZtunnelGrace(ds)
		}
	}
	return nodestep.SwappedInPlace(p.Drain, swapsZtunnel, drainedAt, swapStart), grace
}

// statusEntry is the node's status entry as this process knows it best.
func statusEntry(status StatusWriter, nr *v1alpha1.NodeRollout, node string) (v1alpha1.NodeStatus, bool) {
	st, ok := status.Current(nr.Name, nr.UID)
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
