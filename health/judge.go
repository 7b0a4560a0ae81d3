package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// SnapshotSource is all the judge needs from a node agent: its current
// snapshot. remote.Agent implements it over HTTPS; tests use a function.
type SnapshotSource interface {
	Snapshot(ctx context.Context, node string) (wire.Snapshot, error)
}

// SnapshotFunc adapts a function to SnapshotSource.
type SnapshotFunc func(ctx context.Context, node string) (wire.Snapshot, error)

// Snapshot calls f.
func (f SnapshotFunc) Snapshot(ctx context.Context, node string) (wire.Snapshot, error) {
	return f(ctx, node)
}

// ExternalGate is a gate outside the node agent, such as a Prometheus query.
// Check returns what it found (nothing: pass). A non-nil error means the
// gate could not look (the source is down or the query broken): the judge
// counts those in a row and fails at MaxConsecutiveErrors.
type ExternalGate interface {
	Name() string
	Check(ctx context.Context, node string) (wire.GateResult, error)
	MaxConsecutiveErrors() int
}

// Input is one judgement of one node. The orchestrator (or Recorder) supplies
// the snapshots; the judge fetches the current one itself.
type Input struct {
	Node  string
	Gates Config // from NewConfig (health/gatespec converts NodeRollout spec.gates)
	// Baseline are the snapshots taken at regular intervals before the node
	// was cordoned, oldest first: at least two (the window), three or more to
	// measure each pod's dispersion. The last one is the one just before the
	// swap, whose connection ages give the planned resets.
	Baseline []wire.Snapshot
	// SoakStart is the snapshot taken when the node was back in service on the
	// new revision. The soak window runs from it to now.
	SoakStart wire.Snapshot
	// DrainDeadline is the old ztunnel's: the connections of the pods that
	// stayed on the node through the swap (all of them on a node swapped in
	// place, DaemonSet pods such as the probe on a drained one) older than
	// it were reset by the swap on purpose, the planned resets. Zero: none
	// are planned (the strict reading).
	DrainDeadline time.Duration
	// External gates to evaluate in this interval.
	External []ExternalGate
	// Previous is the summary persisted from the last judgement of this node
	// (nil for the first), which carries the consecutive-failure counters.
	Previous *v1alpha1.NodeJudgement
	// Control are the control nodes: not yet swapped and not cordoned, in the
	// judged node's zone, or across the cluster when the zone has none. Each
	// one's change over the same two intervals is what the judged node's
	// change is compared with, so a change the whole cluster saw (a traffic
	// surge, a dependency failing) is not the node's regression. None (the
	// last wave) judges before/after alone, and the reasons say so. A control
	// node whose agent does not answer is left out: losing a control only
	// makes the judgement stricter.
	Control []ControlNode
	// ControlScope says where they come from, for reasons: "zone a", "the cluster".
	ControlScope string
	// ControlsLeftOut counts control nodes the caller named but left out
	// before this Input (no samples for these windows), so that "no control"
	// is not reported as "none left unswapped".
	ControlsLeftOut int
	// Soak is the policy's soak length (spec.soak), for the sequential
	// method's looks (Look) and for saying when a decision was taken; zero
	// when unknown.
	Soak time.Duration
	// look is set by Look: this judgement is a look during the soak.
	look *look
}

// JudgeConfig configures a Judge.
type JudgeConfig struct {
	Source SnapshotSource // required
	Logger *zap.Logger    // default: no logging
	Now    func() time.Time
	// Registry receives the judge's metrics (nodewise_judgements_total,
	// nodewise_judge_failed_closed_total, nodewise_gate_query_errors_total);
	// nil registers none.
	Registry prometheus.Registerer
}

// Judge compares a node's soak with its baseline and decides. It keeps no
// state between calls: what must survive (consecutive failures) travels in
// Input.Previous and Verdict.Summary.
type Judge struct {
	src     SnapshotSource
	log     *zap.Logger
	now     func() time.Time
	metrics *judgeMetrics
}

// NewJudge validates cfg and fills its defaults.
func NewJudge(cfg JudgeConfig) (*Judge, error) {
	if cfg.Source == nil {
		return nil, errors.New("health.JudgeConfig.Source is required (a remote.Agent or any SnapshotSource)")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newJudgeMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("registering the judge's metrics: %w", err)
	}
	return &Judge{src: cfg.Source, log: cfg.Logger, now: cfg.Now, metrics: m}, nil
}

// Judge makes one judgement. Outcomes mean, for the orchestrator:
//   - Pass: the node is done.
//   - Fail: halt the rollout; Reasons say why.
//   - Inconclusive: hold the node and judge again after gates.interval,
//     passing Verdict.Summary back as Input.Previous (too little traffic under
//     the Pause policy, a failing interval short of consecutiveFailures, a
//     gate source error short of maxConsecutiveErrors, or an external query
//     that returned no data under noData: Inconclusive).
//
// A missing, stale or restarted agent is Fail at once (fail closed). An error
// is returned only for input the caller got wrong; treat it as Fail too.
func (j *Judge) Judge(ctx context.Context, in Input) (Verdict, error) {
	if in.Node == "" {
		return Verdict{}, errors.New("judge: Input.Node is empty")
	}
	if len(in.Baseline) < 2 {
		return j.failClosed(in, "no_baseline", "no baseline for node %s: %d snapshots recorded before the swap, need at least 2", in.Node, len(in.Baseline)), nil
	}
	cfg, err := NewConfig(in.Gates)
	if err != nil {
		return Verdict{}, fmt.Errorf("judge: %w", err)
	}
	if in.look == nil {
		cfg.Significance = cfg.endSignificance() // a look's is set by Look
	}
	now := j.now()
	cur, err := j.src.Snapshot(ctx, in.Node)
	if err != nil {
		return j.failClosed(in, "agent_unavailable", "agent on node %s did not answer: %v", in.Node, err), nil
	}
	if age := now.Sub(cur.Time); age > cfg.MaxSnapshotAge {
		return j.failClosed(in, "agent_stale", "agent on node %s is stale: its snapshot is %s old (max %s)", in.Node, age.Round(time.Second), cfg.MaxSnapshotAge), nil
	}
	base, err := NewWindow(in.Baseline[0], in.Baseline[len(in.Baseline)-1])
	if err != nil {
		return j.failClosed(in, "window", "baseline window: %v", err), nil
	}
	soak, err := NewWindow(in.SoakStart, cur)
	if err != nil {
		return j.failClosed(in, "window", "soak window: %v", err), nil
	}
	disp, err := EstimateDispersion(in.Baseline, cfg.CountDispersion)
	if err != nil {
		return j.failClosed(in, "window", "baseline dispersion: %v", err), nil
	}
	// Planned resets on every node: a drained node keeps its DaemonSet pods
	// (the probe among them) through the swap, and the old ztunnel resets
	// their old connections at its deadline as it does on a node swapped in
	// place. The pods the drain evicted are not in the soak, so nothing is
	// subtracted for them.
	last := in.Baseline[len(in.Baseline)-1]
	var planned, swapResets, open map[PodKey]uint64
	if in.DrainDeadline > 0 {
		planned, swapResets = PlannedDuringSwap(last, in.SoakStart, PlannedResets(last, in.DrainDeadline))
		open = OpenAtSwap(last)
	}
	ctrl, dropped := j.controlWindows(ctx, in)
	a := Assess(cfg, base, soak, disp, planned, ctrl)
	// The swap itself, from the cordon to the soak's start: its failed
	// connects and unplanned resets count against the node, apart.
	var swap SwapWindow
	if w, err := NewWindow(last, in.SoakStart); err != nil {
		if in.SoakStart.Time.After(last.Time) { // else no swap window between them
			a.Reasons = append(a.Reasons, fmt.Sprintf("swap window not judged: %v", err))
		}
	} else {
		swap = assessSwap(cfg, base, w, disp, open)
		a.Reasons = append(a.Reasons, swap.reasons()...)
		if swap.Regressions() > 0 {
			a.Outcome = Fail
		}
	}
	if left := in.ControlsLeftOut + len(dropped); ctrl == nil && left > 0 {
		for i, r := range a.Reasons {
			if r == reasonNoControl {
				a.Reasons[i] = fmt.Sprintf("no control nodes: all %d named were left out (below): judged before/after alone", left)
			}
		}
	}
	a.Reasons = append(a.Reasons, dropped...)
	addSwapResets(&a, swapResets, in.DrainDeadline)
	sum := summarize(a, now)
	sum.Regressions += int32(swap.Regressions())
	sum.PodAges = podAges(sum, in.Baseline[len(in.Baseline)-1], cur)
	reasons := append([]string(nil), a.Reasons...)
	if v, failed := j.gateEnrollment(in, cur, a, sum, reasons); failed {
		return v, nil
	}
	if sum.Enrollment != "" {
		reasons = append([]string{sum.Enrollment + " (ambient pods in the mesh at the soak's end)"}, reasons...)
	}
	reasons = append(reasons, enrollmentNotes(in, cur)...)
	intervalFails := a.Outcome == Fail

	// External gates: a crossed threshold fails the interval; errors count.
	var prevErrs int32
	if in.Previous != nil {
		prevErrs = in.Previous.ConsecutiveQueryErrors
	}
	gateErr := false
	var noData, queryErrs, gateFailures []string
	for _, g := range in.External {
		res, err := g.Check(ctx, in.Node)
		if err != nil {
			gateErr = true
			j.metrics.gateQueryErrs.Inc()
			n := prevErrs + 1
			if int(n) >= g.MaxConsecutiveErrors() {
				sum.ConsecutiveQueryErrors = n
				r := fmt.Sprintf("gate %s: %d evaluations in a row could not query their source (limit %d), last: %v", g.Name(), n, g.MaxConsecutiveErrors(), err)
				return j.finish(in, Verdict{Outcome: Fail, Headline: Cut(r, HeadlineMax), Reasons: append(append(append(reasons, gateFailures...), queryErrs...), r), Summary: sum}), nil
			}
			queryErrs = append(queryErrs, fmt.Sprintf("gate %s: query failed (%d of %d allowed in a row): %v", g.Name(), n, g.MaxConsecutiveErrors(), err))
			continue
		}
		if len(res.Failures) > 0 {
			intervalFails = true
			for _, f := range res.Failures {
				gateFailures = append(gateFailures, "gate "+g.Name()+": "+f)
			}
		}
		for _, n := range res.NoData {
			noData = append(noData, "gate "+g.Name()+": "+n)
		}
	}
	reasons = append(append(append(reasons, gateFailures...), queryErrs...), noData...)
	if gateErr {
		sum.ConsecutiveQueryErrors = prevErrs + 1
	}

	sum.Judgements = 1
	var prevFails int32
	if in.Previous != nil {
		sum.Judgements = in.Previous.Judgements + 1
		prevFails = in.Previous.ConsecutiveFailures
	}
	if intervalFails {
		sum.IntervalOutcome = Fail
		sum.ConsecutiveFailures = prevFails + 1
		worst := evidence(regressedRows(a), swap, gateFailures)
		if int(sum.ConsecutiveFailures) >= cfg.ConsecutiveFailures {
			return j.finish(in, Verdict{Outcome: Fail, Headline: worst, Reasons: reasons, Summary: sum}), nil
		}
		again := fmt.Sprintf("failing interval %d of %d in a row needed to fail: judging again", sum.ConsecutiveFailures, cfg.ConsecutiveFailures)
		reasons = append(reasons, again)
		return j.finish(in, Verdict{Outcome: Inconclusive, Headline: joinHeadline(fmt.Sprintf("failing interval %d of %d", sum.ConsecutiveFailures, cfg.ConsecutiveFailures), worst), Reasons: reasons, Summary: sum}), nil
	}
	if gateErr {
		// A gate that could not look cannot pass the node: fail closed, but only
		// after maxConsecutiveErrors; until then judge again.
		return j.finish(in, Verdict{Outcome: Inconclusive, Headline: Lead(queryErrs), Reasons: reasons, Summary: sum}), nil
	}
	if len(noData) > 0 {
		// A query that saw nothing cannot vouch for the node (a renamed
		// metric returns nothing on every node): hold it, as noData says.
		return j.finish(in, Verdict{Outcome: Inconclusive, Headline: Lead(noData), Reasons: reasons, Summary: sum}), nil
	}
	if a.Outcome == Inconclusive {
		why := nothingToTest(cfg, a)
		switch cfg.Inconclusive {
		case v1alpha1.InconclusivePass:
			reasons = append(reasons, "inconclusive counts as Pass (gates.inconclusive: Pass)")
			return j.finish(in, Verdict{Outcome: Pass, Headline: joinHeadline(why, "passed by gates.inconclusive: Pass"), Reasons: reasons, Summary: sum}), nil
		case v1alpha1.InconclusiveFail:
			reasons = append(reasons, "inconclusive counts as Fail (gates.inconclusive: Fail)")
			return j.finish(in, Verdict{Outcome: Fail, Headline: joinHeadline(why, "failed by gates.inconclusive: Fail"), Reasons: reasons, Summary: sum}), nil
		default:
			return j.finish(in, Verdict{Outcome: Inconclusive, Headline: Cut(why, HeadlineMax), Reasons: reasons, Summary: sum}), nil
		}
	}
	reasons = append([]string{fmt.Sprintf("no regression in %d tests over %d pods (%s baseline, %s soak)",
		a.Tests+a.ProbeTests, a.PodsCompared, a.BaselineLength.Round(time.Second), a.SoakLength.Round(time.Second))}, reasons...)
	return j.finish(in, Verdict{Outcome: Pass, Headline: passHeadline(a), Reasons: reasons, Summary: sum}), nil
}

// finish says which kind of decision v is (decide) and records it, but for
// a look during the soak, which Look records only when it decides.
func (j *Judge) finish(in Input, v Verdict) Verdict {
	v = decide(in, v)
	if in.look != nil {
		return v
	}
	return j.record(in, v)
}

// record counts and logs a verdict.
func (j *Judge) record(in Input, v Verdict) Verdict {
	j.metrics.judgements.WithLabelValues(string(v.Outcome)).Inc()
	j.log.Info("judged node", zap.String("node", in.Node), zap.String("outcome", string(v.Outcome)), zap.String("headline", v.Headline), zap.Strings("reasons", v.Reasons))
	return v
}

// failClosed is the verdict when the judge cannot trust its inputs.
func (j *Judge) failClosed(in Input, cause, format string, args ...any) Verdict {
	if in.look == nil {
		j.metrics.failedClosed.WithLabelValues(cause).Inc()
	}
	s := &v1alpha1.NodeJudgement{IntervalOutcome: Fail}
	if in.Previous != nil {
		s.Judgements = in.Previous.Judgements
		s.ConsecutiveFailures = in.Previous.ConsecutiveFailures
	}
	s.Judgements++
	r := fmt.Sprintf(format, args...)
	if in.look != nil {
		return Verdict{Outcome: Fail, Headline: Cut(r, HeadlineMax), Reasons: []string{r}, Summary: s} // no evidence: Look does not decide on it
	}
	return j.record(in, Verdict{Outcome: Fail, Headline: Cut(r, HeadlineMax), Reasons: []string{r}, Summary: s})
}

// controlWindows fetches each control node's current snapshot and makes its
// two windows. A control node that cannot be read is left out, with a reason.
func (j *Judge) controlWindows(ctx context.Context, in Input) (*Control, []string) {
	if len(in.Control) == 0 || in.Gates.NoControlGroup {
		return nil, nil
	}
	c := &Control{Scope: in.ControlScope}
	var dropped []string
	for _, n := range in.Control {
		w, err := j.controlWindow(ctx, n)
		if err != nil {
			dropped = append(dropped, fmt.Sprintf("control node %s left out: %v", n.Node, err))
			continue
		}
		c.Nodes = append(c.Nodes, w)
	}
	if len(c.Nodes) == 0 {
		return nil, dropped
	}
	return c, dropped
}

func (j *Judge) controlWindow(ctx context.Context, n ControlNode) (ControlWindow, error) {
	if len(n.Baseline) < 2 {
		return ControlWindow{}, fmt.Errorf("%d baseline snapshots, need 2", len(n.Baseline))
	}
	cur, err := j.src.Snapshot(ctx, n.Node)
	if err != nil {
		return ControlWindow{}, fmt.Errorf("agent did not answer: %w", err)
	}
	base, err := NewWindow(n.Baseline[0], n.Baseline[len(n.Baseline)-1])
	if err != nil {
		return ControlWindow{}, fmt.Errorf("baseline window: %w", err)
	}
	soak, err := NewWindow(n.SoakStart, cur)
	if err != nil {
		return ControlWindow{}, fmt.Errorf("soak window: %w", err)
	}
	return ControlWindow{Node: n.Node, Baseline: base, Soak: soak}, nil
}
