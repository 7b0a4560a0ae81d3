package health

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Comparison is one row of the before/after table: one metric of one pod and
// side, or of the whole node (Pod.Name empty).
type Comparison struct {
	Pod    PodKey `json:"pod"`
	Metric Metric `json:"metric"`
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
	// P is the test's one-sided p-value; PAdj the Holm-adjusted one across the node.
	P    float64 `json:"p"`
	PAdj float64 `json:"pAdj"`
	// ClearsFloors: the rise is at least the minimum ratio and the minimum excess.
	ClearsFloors bool `json:"clearsFloors"`
	// Regressed: significant after correction and clears the floors.
	Regressed bool `json:"regressed"`
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
}

// Assess compares a baseline window with a soak window for one node. planned
// holds the resets an in-place swap was expected to cause (see PlannedResets);
// pass nil when the node was drained. cfg must come from NewConfig.
func Assess(cfg Config, baseline, soak Window, disp Dispersion, planned map[PodKey]uint64) Assessment {
	a := Assessment{BaselineLength: baseline.Duration, SoakLength: soak.Duration}
	soak.Pods = append([]PodWindow(nil), soak.Pods...) // subtractPlanned edits the copy
	removed := subtractPlanned(&soak, planned)
	for _, n := range removed {
		a.PlannedResets += n
	}
	a.PlannedPods = len(removed)

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
	var nodeB, nodeS Counts
	nodeBL, nodeSL, nodeBR, nodeSR := newHist(), newHist(), newHist(), newHist()
	for _, p := range pairs {
		a.Rows = append(a.Rows, compare(cfg, disp, p.b.PodKey, p.b.Counts, p.s.Counts, bs, ss,
			p.b.ConnectLatency, p.s.ConnectLatency, p.b.SRTT, p.s.SRTT)...)
		nodeB, nodeS = nodeB.add(p.b.Counts), nodeS.add(p.s.Counts)
		addHist(&nodeBL, p.b.ConnectLatency)
		addHist(&nodeSL, p.s.ConnectLatency)
		addHist(&nodeBR, p.b.SRTT)
		addHist(&nodeSR, p.s.SRTT)
	}
	a.Rows = append(a.Rows, compare(cfg, disp, PodKey{}, nodeB, nodeS, bs, ss, nodeBL, nodeSL, nodeBR, nodeSR)...)
	a.SoakConnections = nodeS.Connects

	// Holm across every test run on the node in this interval.
	var ps []float64
	var idx []int
	for i, r := range a.Rows {
		if r.Tested {
			ps = append(ps, r.P)
			idx = append(idx, i)
		}
	}
	a.Tests = len(ps)
	for j, adj := range Holm(ps) {
		r := &a.Rows[idx[j]]
		r.PAdj = adj
		r.Regressed = adj <= cfg.Significance && r.ClearsFloors
	}
	var bad []Comparison
	for _, r := range a.Rows {
		if r.Regressed {
			bad = append(bad, r)
		}
	}
	sort.SliceStable(bad, func(i, j int) bool { return bad[i].PAdj < bad[j].PAdj })
	const maxReasons = 8
	for i, r := range bad {
		if i == maxReasons {
			a.Reasons = append(a.Reasons, fmt.Sprintf("… and %d more regressions", len(bad)-maxReasons))
			break
		}
		a.Reasons = append(a.Reasons, r.Reason())
	}
	if a.PlannedResets > 0 {
		a.Reasons = append(a.Reasons, fmt.Sprintf(
			"planned resets: %d on %d pods (connections older than the drain deadline, node swapped in place), not counted as a regression",
			a.PlannedResets, a.PlannedPods))
	}
	switch {
	case len(bad) > 0:
		a.Outcome = Fail
	case a.Tests == 0 || a.SoakConnections < cfg.MinNodeConnections:
		a.Outcome = Inconclusive
		a.Reasons = append(a.Reasons, fmt.Sprintf(
			"not enough traffic to judge: %d connections in %s of soak (need %d), %d tests possible",
			a.SoakConnections, soak.Duration.Round(time.Second), cfg.MinNodeConnections, a.Tests))
	default:
		a.Outcome = Pass
	}
	return a
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

func compare(cfg Config, disp Dispersion, k PodKey, b, s Counts, bs, ss float64, bl, sl, br, sr Log2Histogram) []Comparison {
	var out []Comparison
	for _, m := range CountMetrics {
		th := cfg.Counts[m]
		if th.Disabled {
			continue
		}
		kb, ks := countOf(b, m), countOf(s, m)
		c := Comparison{Pod: k, Metric: m, NBefore: kb, NAfter: ks, P: 1, PAdj: 1}
		if bs > 0 && ss > 0 {
			c.Before, c.After = float64(kb)/bs, float64(ks)/ss
		}
		// Counts are tested when the two windows hold enough events between
		// them: 0 before and 40 after is a regression worth testing.
		if kb+ks >= cfg.MinEvents && bs > 0 && ss > 0 {
			c.Tested = true
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
				c.P = PoissonRateTest(db, float64(tb), ds, float64(ts)).P
				c.ClearsFloors = perConn.Ratio() >= th.MinRatio && c.After-c.Before >= th.MinExcessPerSecond
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
		c := Comparison{Pod: k, Metric: m, NBefore: hb.Total(), NAfter: hs.Total(), P: 1, PAdj: 1,
			Before: hb.Quantile(0.99), After: hs.Quantile(0.99), BeforeP50: hb.Quantile(0.5), AfterP50: hs.Quantile(0.5)}
		if c.NBefore >= cfg.MinEvents && c.NAfter >= cfg.MinEvents {
			c.Tested = true
			// Two views of one question, Bonferroni-combined: did the whole
			// distribution shift up (Mann-Whitney), or did its tail grow (more
			// samples in the baseline's top buckets)?
			c.P = math.Min(1, 2*math.Min(MannWhitney(hb, hs).P, TailTest(hb, hs, 0.01).P))
			c.BeforeMean, c.AfterMean = hb.GeoMean(), hs.GeoMean()
			// The relative floor: typical latency (geometric mean), p50 or p99
			// (interpolated, or fitted as lognormal) rose by MinRatio. The
			// absolute floor: p50 or p99 rose by MinIncrease.
			inc := float64(th.MinIncrease.Microseconds())
			ratio := func(b, a float64) bool { return b > 0 && a/b >= th.MinRatio }
			fb, fa := hb.LognormalP99(), hs.LognormalP99()
			c.ClearsFloors = (ratio(c.BeforeMean, c.AfterMean) || ratio(c.BeforeP50, c.AfterP50) || ratio(c.Before, c.After) || ratio(fb, fa)) &&
				(c.AfterP50-c.BeforeP50 >= inc || c.After-c.Before >= inc || fa-fb >= inc)
		}
		out = append(out, c)
	}
	return out
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
	if !c.IsNode() {
		who = "pod " + c.Pod.String()
	}
	if c.Metric.IsLatency() {
		return fmt.Sprintf("%s: %s p99 %s → %s, p50 %s → %s, %s", who, metricLabel(c.Metric),
			FormatMicros(c.Before), FormatMicros(c.After), FormatMicros(c.BeforeP50), FormatMicros(c.AfterP50), FormatP(c.PAdj))
	}
	return fmt.Sprintf("%s: %s %s/s → %s/s, %s", who, metricLabel(c.Metric), FormatRate(c.Before), FormatRate(c.After), FormatP(c.PAdj))
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
