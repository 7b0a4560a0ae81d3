package health

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// Comparison is one row of the before/after table: one metric of one pod and
// side, or of the whole node (Pod.Name empty).
type Comparison struct {
	Pod    PodKey `json:"pod"`
	Metric Metric `json:"metric"`
	// Probe says the row is the probe workload's (Config.ProbeNamespace): a
	// family of its own, reported apart from the workload's.
	Probe bool `json:"probe,omitempty"`
	// For counts, Before and After are rates per second. For latency they are
	// p99 in microseconds, and BeforeP50/AfterP50 the medians.
	Before    float64 `json:"before"`
	After     float64 `json:"after"`
	BeforeP50 float64 `json:"beforeP50,omitempty"`
	AfterP50  float64 `json:"afterP50,omitempty"`
	// BeforeMean and AfterMean are the geometric means (latency only).
	BeforeMean float64 `json:"beforeMean,omitempty"`
	AfterMean  float64 `json:"afterMean,omitempty"`
	// NBefore and NAfter are the events (counts) or samples (latency) in each window.
	NBefore uint64 `json:"nBefore"`
	NAfter  uint64 `json:"nAfter"`
	// PerConnection says the count test divided by the pod's traffic
	// (connections) rather than by time; see Counts.Traffic.
	PerConnection bool `json:"perConnection,omitempty"`
	// Tested is false when either window had too little traffic (MinEvents).
	Tested bool `json:"tested"`
	// ControlRatio is the control group's after/before change over the same
	// interval (rate ratio for counts, geometric-mean ratio for latency); 0
	// when the row had no control. ControlPods are the pods it pools.
	ControlRatio float64 `json:"controlRatio,omitempty"`
	ControlPods  int     `json:"controlPods,omitempty"`
	// P is the test's one-sided p-value: with a control, the larger of the
	// before/after test's and the control test's (both must reject).
	// PBeforeAfter is the before/after test's alone. PAdj is P Holm-adjusted
	// across the row's family on the node.
	P            float64 `json:"p"`
	PBeforeAfter float64 `json:"pBeforeAfter"`
	PAdj         float64 `json:"pAdj"`
	// ClearsFloors: the rise is at least the minimum ratio and the minimum
	// excess, before/after and beyond the control's.
	ClearsFloors bool `json:"clearsFloors"`
	// Regressed: significant after correction and clears the floors.
	Regressed bool `json:"regressed"`
	// ExplainedByControl: before/after alone would have called the row a
	// regression, but the control group moved the same way.
	ExplainedByControl bool `json:"explainedByControl,omitempty"`

	plainFloors bool // the before/after floors alone
	ctrlUsed    bool // the control moved, and the row was tested against it
}

// IsNode says the row is the node's total rather than one pod's.
func (c Comparison) IsNode() bool { return c.Pod.Name == "" }

// Assessment is the judgement of one interval: the baseline window against the
// soak window so far. Assess computes it without side effects.
type Assessment struct {
	Outcome Outcome      `json:"outcome"`
	Rows    []Comparison `json:"rows"`
	Reasons []string     `json:"reasons"`
	// PlannedResets is the number of resets subtracted as planned by an in-place swap.
	PlannedResets uint64 `json:"plannedResets"`
	PlannedPods   int    `json:"plannedPods"`
	// PodsCompared are pods (and sides) present through both windows.
	PodsCompared int `json:"podsCompared"`
	// PodsNotCompared appeared or went away during a window.
	PodsNotCompared int           `json:"podsNotCompared"`
	Tests           int           `json:"tests"`
	BaselineLength  time.Duration `json:"baselineLength"`
	SoakLength      time.Duration `json:"soakLength"`
	SoakConnections uint64        `json:"soakConnections"`
	// ProbePods are the probe's pods (and sides) with at least MinEvents
	// connections in both windows: the node's probe evidence. ProbeTests and
	// ProbeRegressions are the probe family's.
	ProbePods        int    `json:"probePods"`
	ProbeConnections uint64 `json:"probeConnections"`
	ProbeTests       int    `json:"probeTests"`
	ProbeRegressions int    `json:"probeRegressions"`
	// Control describes the control group ("3 control nodes in zone a"), or
	// is empty when the node was judged before/after alone.
	Control string `json:"control,omitempty"`
	// ExplainedByControl counts rows before/after alone would have failed.
	ExplainedByControl int `json:"explainedByControl,omitempty"`
}

// reasonNoControl is Assess's reason when the judgement had no control group.
const reasonNoControl = "no control nodes (none left unswapped and uncordoned): judged before/after alone"

// reasonControlOff is Assess's reason when the control group is switched off.
const reasonControlOff = "the control group is switched off (gates.controlGroup: Disabled): judged before/after alone"

// Assess compares a baseline window with a soak window for one node. planned
// holds the resets an in-place swap was expected to cause (see PlannedResets);
// pass nil when the node was drained. control holds the same intervals on
// control nodes; nil (or no nodes) judges before/after alone. cfg must come
// from NewConfig.
//
// Rows come in two families, each Holm-corrected on its own at half the
// significance when both have tests (Bonferroni across the two): the
// workload's pods with the node's totals, and the probe's pods. A row with a
// control regresses only when both the before/after test and the control
// test reject, and its rise clears the floors both ways.
func Assess(cfg Config, baseline, soak Window, disp Dispersion, planned map[PodKey]uint64, control *Control) Assessment {
	a := Assessment{BaselineLength: baseline.Duration, SoakLength: soak.Duration}
	soak.Pods = append([]PodWindow(nil), soak.Pods...) // subtractPlanned edits the copy
	removed := subtractPlanned(&soak, planned)
	for _, n := range removed {
		a.PlannedResets += n
	}
	a.PlannedPods = len(removed)
	if cfg.NoControlGroup {
		control = nil
	}
	ctrl := buildControl(cfg, control)
	if ctrl != nil {
		a.Control = ctrl.describe()
	}

	base := make(map[PodKey]*PodWindow, len(baseline.Pods))
	for i := range baseline.Pods {
		base[baseline.Pods[i].PodKey] = &baseline.Pods[i]
	}
	type pair struct{ b, s *PodWindow }
	var pairs []pair
	for i := range soak.Pods {
		s := &soak.Pods[i]
		b, ok := base[s.PodKey]
		if !ok || b.Appeared || s.Appeared || b.UID != s.UID {
			continue
		}
		pairs = append(pairs, pair{b, s})
	}
	a.PodsCompared = len(pairs)
	a.PodsNotCompared = len(unionKeys(baseline, soak)) - len(pairs)

	bs, ss := baseline.Duration.Seconds(), soak.Duration.Seconds()
	var nodeB, nodeS, probeB, probeS Counts
	nodeBL, nodeSL, nodeBR, nodeSR := newHist(), newHist(), newHist(), newHist()
	probeBL, probeSL := newHist(), newHist()
	// Per count metric, what the node's pods would have had after under
	// their controls' change (see againstPredicted).
	expected, unchanged, moved := map[Metric]float64{}, map[Metric]float64{}, map[Metric]bool{}
	for _, p := range pairs {
		rows := compare(cfg, disp, ctrl, p.b.PodKey, p.b.Counts, p.s.Counts, bs, ss,
			p.b.ConnectLatency, p.s.ConnectLatency, p.b.SRTT, p.s.SRTT)
		a.Rows = append(a.Rows, rows...)
		if !cfg.isProbe(p.b.PodKey) && ctrl != nil && bs > 0 {
			for _, r := range rows {
				if r.Metric.IsLatency() {
					continue
				}
				e := float64(r.NBefore) * ss / bs
				unchanged[r.Metric] += e
				if tb, ts := p.b.Counts.Traffic(), p.s.Counts.Traffic(); r.PerConnection && tb > 0 {
					e = float64(r.NBefore) * float64(ts) / float64(tb)
				}
				if r.ctrlUsed {
					e *= r.ControlRatio
					moved[r.Metric] = true
				}
				expected[r.Metric] += e
			}
		}
		a.SoakConnections += p.s.Counts.Connects
		if cfg.isProbe(p.b.PodKey) {
			if p.b.Counts.Traffic() >= cfg.MinEvents && p.s.Counts.Traffic() >= cfg.MinEvents {
				a.ProbePods++
				a.ProbeConnections += p.s.Counts.Traffic()
			}
			probeB, probeS = probeB.add(p.b.Counts), probeS.add(p.s.Counts)
			addHist(&probeBL, p.b.ConnectLatency)
			addHist(&probeSL, p.s.ConnectLatency)
			continue
		}
		nodeB, nodeS = nodeB.add(p.b.Counts), nodeS.add(p.s.Counts)
		addHist(&nodeBL, p.b.ConnectLatency)
		addHist(&nodeSL, p.s.ConnectLatency)
		addHist(&nodeBR, p.b.SRTT)
		addHist(&nodeSR, p.s.SRTT)
	}
	nodeRows := compare(cfg, disp, ctrl, PodKey{}, nodeB, nodeS, bs, ss, nodeBL, nodeSL, nodeBR, nodeSR)
	for i := range nodeRows {
		if r := &nodeRows[i]; r.Tested && moved[r.Metric] {
			r.againstPredicted(cfg.Counts[r.Metric], disp, cfg, unchanged[r.Metric], expected[r.Metric], bs, ss)
		}
	}
	a.Rows = append(a.Rows, nodeRows...)

	a.Tests, a.ProbeTests = holmFamilies(cfg, a.Rows)
	var bad, explained []Comparison
	for _, r := range a.Rows {
		switch {
		case r.Regressed:
			bad = append(bad, r)
			if r.Probe {
				a.ProbeRegressions++
			}
		case r.ExplainedByControl:
			explained = append(explained, r)
		}
	}
	a.ExplainedByControl = len(explained)
	byP := func(rs []Comparison) {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].PAdj < rs[j].PAdj })
	}
	byP(bad)
	const maxReasons = 8
	for i, r := range bad {
		if i == maxReasons {
			a.Reasons = append(a.Reasons, fmt.Sprintf("… and %d more regressions", len(bad)-maxReasons))
			break
		}
		a.Reasons = append(a.Reasons, r.Reason())
	}
	if len(explained) > 0 {
		sort.SliceStable(explained, func(i, j int) bool { return explained[i].PBeforeAfter < explained[j].PBeforeAfter })
		e := explained[0]
		a.Reasons = append(a.Reasons, fmt.Sprintf(
			"the control group (%s) moved the same way: %d rises before/after not counted as the node's, such as %s",
			ctrl.describe(), len(explained), e.Reason()))
	}
	switch {
	case cfg.NoControlGroup:
		a.Reasons = append(a.Reasons, reasonControlOff)
	case ctrl == nil:
		a.Reasons = append(a.Reasons, reasonNoControl)
	}
	if a.PlannedResets > 0 {
		a.Reasons = append(a.Reasons, fmt.Sprintf(
			"planned resets: %d on %d pods (connections older than the drain deadline, on pods that stayed on the node through the swap), not counted as a regression",
			a.PlannedResets, a.PlannedPods))
	}
	if a.ProbePods > 0 {
		a.Reasons = append(a.Reasons, probeLine(a, probeB, probeS, bs, ss, probeBL, probeSL))
	}
	switch {
	case len(bad) > 0:
		a.Outcome = Fail
	case a.Tests+a.ProbeTests == 0 || a.SoakConnections < cfg.MinNodeConnections:
		a.Outcome = Inconclusive
		a.Reasons = append(a.Reasons, fmt.Sprintf(
			"not enough traffic to judge: %d connections in %s of soak (need %d), %d tests possible",
			a.SoakConnections, soak.Duration.Round(time.Second), cfg.MinNodeConnections, a.Tests+a.ProbeTests))
	case a.ProbePods == 0 && !cfg.ProbeOptional:
		a.Outcome = Inconclusive
		a.Reasons = append(a.Reasons, fmt.Sprintf(
			"no probe evidence: no pod of namespace %s with %d connections in both windows (is the nodewise-probe DaemonSet running on this node?)",
			cfg.ProbeNamespace, cfg.MinEvents))
	default:
		a.Outcome = Pass
	}
	return a
}

// holmFamilies Holm-corrects the workload family and the probe family of
// rows on their own, at half the significance each when both have tests,
// and marks the regressions and the rows the control explained. It returns
// the number of tests in each family.
func holmFamilies(cfg Config, rows []Comparison) (workload, probe int) {
	var fam [2][]int
	for i, r := range rows {
		if r.Tested {
			f := 0
			if r.Probe {
				f = 1
			}
			fam[f] = append(fam[f], i)
		}
	}
	scale := 1.0
	if len(fam[0]) > 0 && len(fam[1]) > 0 {
		scale = 2
	}
	for _, idx := range fam {
		ps, plain := make([]float64, len(idx)), make([]float64, len(idx))
		for j, i := range idx {
			ps[j], plain[j] = rows[i].P, rows[i].PBeforeAfter
		}
		adj, adjPlain := Holm(ps), Holm(plain)
		for j, i := range idx {
			r := &rows[i]
			r.PAdj = math.Min(1, scale*adj[j])
			r.Regressed = r.PAdj <= cfg.Significance && r.ClearsFloors
			wouldHave := math.Min(1, scale*adjPlain[j]) <= cfg.Significance && r.plainFloors
			r.ExplainedByControl = wouldHave && !r.Regressed && r.ctrlUsed
		}
	}
	return len(fam[0]), len(fam[1])
}

// probeLine is the probe's before → after line: its evidence at a glance.
func probeLine(a Assessment, b, s Counts, bs, ss float64, bl, sl wire.Log2Histogram) string {
	rate := func(n uint64, sec float64) string { return FormatRate(float64(n)/sec) + "/s" }
	verdict := "no regression"
	if a.ProbeRegressions > 0 {
		verdict = fmt.Sprintf("%d regressions", a.ProbeRegressions)
	}
	return fmt.Sprintf("probe: %d pods, %d connections in the soak; connections %s → %s, resets received %s → %s, resets sent %s → %s, failed connects %s → %s, connect latency p50 %s → %s; %s in %d tests",
		a.ProbePods, a.ProbeConnections, rate(b.Traffic(), bs), rate(s.Traffic(), ss),
		rate(b.ResetsReceived, bs), rate(s.ResetsReceived, ss), rate(b.ResetsSent, bs), rate(s.ResetsSent, ss),
		rate(b.ConnectFailures, bs), rate(s.ConnectFailures, ss),
		FormatMicros(bl.Quantile(0.5)), FormatMicros(sl.Quantile(0.5)), verdict, a.ProbeTests)
}

func unionKeys(ws ...Window) map[PodKey]bool {
	keys := map[PodKey]bool{}
	for _, w := range ws {
		for _, p := range w.Pods {
			keys[p.PodKey] = true
		}
	}
	return keys
}

func compare(cfg Config, disp Dispersion, ctrl *controlGroup, k PodKey, b, s Counts, bs, ss float64, bl, sl, br, sr wire.Log2Histogram) []Comparison {
	var out []Comparison
	probe := cfg.isProbe(k)
	for _, m := range CountMetrics {
		th := cfg.Counts[m]
		if th.Disabled {
			continue
		}
		kb, ks := countOf(b, m), countOf(s, m)
		c := Comparison{Pod: k, Metric: m, Probe: probe, NBefore: kb, NAfter: ks, P: 1, PBeforeAfter: 1, PAdj: 1}
		if bs > 0 && ss > 0 {
			c.Before, c.After = float64(kb)/bs, float64(ks)/ss
		}
		// Counts are tested when the two windows hold enough events between
		// them: 0 before and 40 after is a regression worth testing.
		if kb+ks >= cfg.MinEvents && bs > 0 && ss > 0 {
			c.Tested = true
			ea, eb := bs, ss
			perSecond := PoissonRateTest(kb, bs, ks, ss)
			phi := disp.Of(k, m, cfg.CountDispersion)
			db, ds := deflate(kb, phi), deflate(ks, phi)
			c.ClearsFloors = perSecond.Ratio() >= th.MinRatio && c.After-c.Before >= th.MinExcessPerSecond
			c.P = PoissonRateTest(db, bs, ds, ss).P
			if tb, ts := b.Traffic(), s.Traffic(); tb >= cfg.MinEvents && ts >= cfg.MinEvents {
				// Enough traffic to divide by: test events per connection, so
				// a pod whose traffic doubled with its resets is not a
				// regression. The ratio floor applies per connection too (a
				// burst of traffic moves the per-second ratio); the excess
				// floor stays per second, so a pod whose traffic fell while its
				// resets stayed put is not a regression either.
				perConn := PoissonRateTest(kb, float64(tb), ks, float64(ts))
				c.PerConnection = true
				ea, eb = float64(tb), float64(ts)
				c.P = PoissonRateTest(db, float64(tb), ds, float64(ts)).P
				c.ClearsFloors = perConn.Ratio() >= th.MinRatio && c.After-c.Before >= th.MinExcessPerSecond
			}
			c.PBeforeAfter, c.plainFloors = c.P, c.ClearsFloors
			enough := func(a *controlAgg) bool { return countOf(a.before, m)+countOf(a.after, m) >= cfg.MinEvents }
			rise := func(a *controlAgg) float64 { return countRise(cfg, a, m) }
			if cg := ctrl.forRow(cfg, k, enough, rise); cg != nil && k.Name != "" {
				c.againstControl(cfg, th, disp, cg, m, ea, eb, bs, ss, ctrl.moved(cfg, disp, k, m, cg))
			}
		}
		out = append(out, c)
	}
	for _, m := range LatencyMetrics {
		th := cfg.Latency[m]
		if th.Disabled || k.Name == "" {
			// No node-wide latency row: the node's histogram mixes pods whose
			// traffic shares shift with every burst, so it moves without any
			// pod regressing. Every pod's latency is tested on its own.
			continue
		}
		hb, hs := bl, sl
		if m == v1alpha1.MetricSRTT {
			hb, hs = br, sr
		}
		c := Comparison{Pod: k, Metric: m, Probe: probe, NBefore: hb.Total(), NAfter: hs.Total(), P: 1, PBeforeAfter: 1, PAdj: 1,
			Before: hb.Quantile(0.99), After: hs.Quantile(0.99), BeforeP50: hb.Quantile(0.5), AfterP50: hs.Quantile(0.5)}
		if c.NBefore >= cfg.MinEvents && c.NAfter >= cfg.MinEvents {
			c.Tested = true
			c.P = latencyP(hb, hs)
			c.BeforeMean, c.AfterMean = GeoMean(hb), GeoMean(hs)
			c.ClearsFloors = latencyFloors(th, hb, hs)
			c.PBeforeAfter, c.plainFloors = c.P, c.ClearsFloors
			enough := func(a *controlAgg) bool { _, ok := a.latencyRatio(m); return ok }
			rise := func(a *controlAgg) float64 { f, _ := a.latencyRatio(m); return f }
			if cg := ctrl.forRow(cfg, k, enough, rise); cg != nil {
				// The control's slowdown applied to the node's baseline: the
				// soak is then compared with what the baseline would have
				// become had the node only shared it. A control that got
				// faster does not make the test stricter, and one that moved
				// less than controlMovedLatency leaves the row as it was: its
				// noise would only cost power. A workload's own control may
				// be one pod, whose median reads its slowdown loosely: the
				// node is not blamed for less than its side's pods slowed by.
				f, _ := cg.latencyRatio(m)
				if !probe {
					if fs, ok := ctrl.by[controlKey{side: k.Side}].latencyRatio(m); ok && fs > f {
						f = fs
					}
				}
				c.ControlRatio, c.ControlPods = f, cg.pods
				if f >= controlMovedLatency {
					shifted := scaleHist(hb, f)
					c.ctrlUsed = true
					c.P = math.Max(c.P, latencyP(shifted, hs))
					c.ClearsFloors = c.ClearsFloors && latencyFloors(th, shifted, hs)
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// againstControl adds the control test to a count row that was tested
// before/after, when the control group itself rose (see controlGroup.moved): the node's after/before ratio against the
// control's over the same interval (RatioOfRates), with the same exposure
// (connections when both have enough, else seconds). The rise that is the
// node's own must clear the floors too: a ratio of at least √minRatio beyond
// the control's (half the floor on a log scale, so a control that shares a
// little of the node's rise, as the probes on control nodes that talk to the
// judged node's probe do, does not hide it), and the excess over what the
// control predicts. A control that did not move leaves the row as it was:
// its noise would only cost power.
func (c *Comparison) againstControl(cfg Config, th CountThresholds, disp Dispersion, cg *controlAgg, m Metric, ea, eb, baseSec, soakSec float64, moved bool) {
	ec, ed := cg.beforeSec, cg.afterSec
	if c.PerConnection && cg.before.Traffic() >= cfg.MinEvents && cg.after.Traffic() >= cfg.MinEvents {
		ec, ed = float64(cg.before.Traffic()), float64(cg.after.Traffic())
	} else {
		ea, eb = baseSec, soakSec // per second, as the control
	}
	kb, ks := c.NBefore, c.NAfter
	cb, cs := countOf(cg.before, m), countOf(cg.after, m)
	phi, phiC := disp.Of(c.Pod, m, cfg.CountDispersion), disp.Of(PodKey{}, m, cfg.CountDispersion)
	raw := RatioOfRates(kb, ea, ks, eb, cb, ec, cs, ed)
	c.ControlRatio, c.ControlPods = raw.Theta, cg.pods
	if !moved {
		return
	}
	did := RatioOfRates(deflate(kb, phi), ea, deflate(ks, phi), eb, deflate(cb, phiC), ec, deflate(cs, phiC), ed)
	c.ctrlUsed = true
	c.P = math.Max(c.P, did.P)
	predicted := float64(kb) * eb / ea * raw.Theta
	excess := (float64(ks) - predicted) / soakSec
	c.ClearsFloors = c.ClearsFloors && raw.Rho >= math.Sqrt(th.MinRatio) && excess >= th.MinExcessPerSecond
}

// controlMovedLatency is the control group's latency change (median,
// fitted as lognormal: LogMedian) from which it counts as real.
const controlMovedLatency = 1.05

// controlMovedP is the level at which the control group's own rise counts
// as real: only then is the node compared with it.
const controlMovedP = 0.001

// controlMovedProbeP is controlMovedP for the probe's own control, which
// shares a little of the judged probe's regression (see controlGroup.moved).
const controlMovedProbeP = 1e-6

// againstPredicted tests a node row against the control group pod by pod:
// under H0 each pod's rate moved as its own control did (its workload on the
// control nodes, else the control workload of its side that rose the most:
// forRow), so the node's after count is compared with Σ before × exposure
// ratio × θᵢ. Summing per pod keeps a workload-specific change (a dependency
// failing) from reading as the node's regression on a node that hosts more
// of that workload.
func (c *Comparison) againstPredicted(th CountThresholds, disp Dispersion, cfg Config, before, expected float64, baseSec, soakSec float64) {
	if before <= 0 || expected <= before {
		return
	}
	theta := expected / before // the node's mix-weighted control ratio
	c.ControlRatio, c.ctrlUsed = theta, true
	phi := disp.Of(PodKey{}, c.Metric, cfg.CountDispersion)
	t := PoissonRateTest(deflate(c.NBefore, phi), baseSec, deflate(c.NAfter, phi), soakSec*theta)
	c.P = math.Max(c.P, t.P)
	rho := ratio(float64(c.NAfter)/soakSec, float64(c.NBefore)/baseSec*theta)
	excess := c.After - c.Before*theta
	c.ClearsFloors = c.ClearsFloors && rho >= math.Sqrt(th.MinRatio) && excess >= th.MinExcessPerSecond
}

// latencyP is the latency test's p-value: two views of one question,
// Bonferroni-combined. Did the whole distribution shift up (Mann-Whitney),
// or did its tail grow (more samples in the baseline's top buckets)?
func latencyP(hb, hs wire.Log2Histogram) float64 {
	return math.Min(1, 2*math.Min(MannWhitney(hb, hs).P, TailTest(hb, hs, 0.01).P))
}

// latencyFloors: typical latency (geometric mean), p50 or p99 (interpolated,
// or fitted as lognormal) rose by MinRatio (the relative floor), and p50 or
// p99 rose by MinIncrease (the absolute floor).
func latencyFloors(th LatencyThresholds, hb, hs wire.Log2Histogram) bool {
	inc := float64(th.MinIncrease.Microseconds())
	ratio := func(b, a float64) bool { return b > 0 && a/b >= th.MinRatio }
	b50, a50, b99, a99 := hb.Quantile(0.5), hs.Quantile(0.5), hb.Quantile(0.99), hs.Quantile(0.99)
	fb, fa := LognormalP99(hb), LognormalP99(hs)
	return (ratio(GeoMean(hb), GeoMean(hs)) || ratio(b50, a50) || ratio(b99, a99) || ratio(fb, fa)) &&
		(a50-b50 >= inc || a99-b99 >= inc || fa-fb >= inc)
}

// deflate divides a count by the dispersion factor (quasi-Poisson): events
// that arrive in clumps of about φ carry the information of count/φ
// independent events.
func deflate(k uint64, phi float64) uint64 {
	if phi <= 1 {
		return k
	}
	return uint64(math.Round(float64(k) / phi))
}

func countOf(c Counts, m Metric) uint64 {
	switch m {
	case v1alpha1.MetricResetsReceived:
		return c.ResetsReceived
	case v1alpha1.MetricResetsSent:
		return c.ResetsSent
	case v1alpha1.MetricConnectFailures:
		return c.ConnectFailures
	case v1alpha1.MetricRetransmits:
		return c.Retransmits
	}
	return 0
}

// Reason is the row as a sentence, such as
// "pod shop/cart-7d9: resets received 0.2/s → 3.1/s, p<0.001".
func (c Comparison) Reason() string {
	who := "node"
	switch {
	case c.Probe:
		who = "probe " + c.Pod.String()
	case !c.IsNode():
		who = "pod " + c.Pod.String()
	}
	ctrl := ""
	if c.ControlRatio > 0 {
		ctrl = fmt.Sprintf(", control ×%.2g", c.ControlRatio)
	}
	if c.Metric.IsLatency() {
		return fmt.Sprintf("%s: %s p99 %s → %s, p50 %s → %s%s, %s", who, metricLabel(c.Metric),
			FormatMicros(c.Before), FormatMicros(c.After), FormatMicros(c.BeforeP50), FormatMicros(c.AfterP50), ctrl, FormatP(c.PAdj))
	}
	return fmt.Sprintf("%s: %s %s/s → %s/s%s, %s", who, metricLabel(c.Metric), FormatRate(c.Before), FormatRate(c.After), ctrl, FormatP(c.PAdj))
}

// FormatP prints a p-value the way reasons do: p<0.001, or p=0.004.
func FormatP(p float64) string {
	if p < 0.001 {
		return "p<0.001"
	}
	return fmt.Sprintf("p=%.3f", p)
}

// FormatRate prints a rate per second with two significant figures.
func FormatRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r >= 100:
		return fmt.Sprintf("%.0f", r)
	default:
		return fmt.Sprintf("%.2g", r)
	}
}

// FormatMicros prints microseconds as µs, ms or s.
func FormatMicros(us float64) string {
	switch {
	case math.IsNaN(us) || us == 0:
		return "0"
	case us < 1000:
		return fmt.Sprintf("%.0fµs", us)
	case us < 1e6:
		return fmt.Sprintf("%.3gms", us/1000)
	default:
		return fmt.Sprintf("%.3gs", us/1e6)
	}
}
