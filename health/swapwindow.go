package health

import (
	"fmt"
	"math"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// SwapMetrics are the counts the swap window is judged on: what a hand-over
// that breaks connections leaves behind (retransmits and latency are the
// soak's).
var SwapMetrics = []Metric{v1alpha1.MetricConnectFailures, v1alpha1.MetricResetsReceived, v1alpha1.MetricResetsSent}

// SwapWindow is the swap itself judged, apart from the soak: the node's
// failed connects and its resets beyond those the drain deadline plans,
// between the last baseline snapshot (the cordon) and the soak's first
// (the node back in service), each tested against the baseline's rate.
// It is a family of its own: a hand-over that refuses or resets
// connections fails the node whichever swap mode ran, though the soak
// after it is clean.
type SwapWindow struct {
	// Length is the swap window's, from the cordon to the soak's start.
	Length time.Duration
	// Pods are the pods (and sides) through the baseline and the swap.
	Pods int
	// Drained are the resets taken out as the old ztunnel's: at most one
	// per connection open at the swap's start.
	Drained uint64
	// Rows are the node's totals, one per SwapMetrics metric not disabled:
	// Before the baseline's rate, After the swap window's, both per second.
	Rows []Comparison
}

// Regressions counts the swap window's regressed rows.
func (s SwapWindow) Regressions() int { return len(s.worst()) }

// OpenAtSwap counts, for each pod and side, the connections open in the
// last snapshot before the swap, of any age: the old ztunnel resets every
// one that outlives its drain deadline, which falls in the swap window on
// a node swapped in place, so that many resets are the swap's plan there.
// PlannedResets is the soak's cautious share of it (only connections
// already older than the deadline, which surely outlive it).
func OpenAtSwap(beforeSwap wire.Snapshot) map[PodKey]uint64 {
	return PlannedResets(beforeSwap, 0)
}

// assessSwap judges the swap window swap against the baseline window base:
// the pods present through both (the same UID, none appeared), with at
// most one reset per connection in open (OpenAtSwap) taken out as the old
// ztunnel's, summed over the node; each metric's count tested per second
// against the baseline's with the baseline's dispersion, Holm-corrected
// across the family at cfg.Significance, and regressed only when its rise
// clears the count gate's floors too. A row needs MinEvents between the
// two windows to be tested. Failed connects are never planned: a swap that
// leaves the node a listener refuses none.
func assessSwap(cfg Config, base, swap Window, disp Dispersion, open map[PodKey]uint64) SwapWindow {
	out := SwapWindow{Length: swap.Duration}
	swap.Pods = append([]PodWindow(nil), swap.Pods...) // subtractPlanned edits the copy
	for _, n := range subtractPlanned(&swap, open) {
		out.Drained += n
	}
	before := make(map[PodKey]*PodWindow, len(base.Pods))
	for i := range base.Pods {
		before[base.Pods[i].PodKey] = &base.Pods[i]
	}
	var nb, ns Counts
	for i := range swap.Pods {
		s := &swap.Pods[i]
		b, ok := before[s.PodKey]
		if !ok || b.Appeared || s.Appeared || b.UID != s.UID {
			continue
		}
		out.Pods++
		nb, ns = nb.add(b.Counts), ns.add(s.Counts)
	}
	bs, ss := base.Duration.Seconds(), swap.Duration.Seconds()
	var tested []int
	for _, m := range SwapMetrics {
		th := cfg.Counts[m]
		if th.Disabled {
			continue
		}
		kb, ks := countOf(nb, m), countOf(ns, m)
		c := Comparison{Metric: m, NBefore: kb, NAfter: ks, P: 1, PBeforeAfter: 1, PAdj: 1}
		if bs > 0 && ss > 0 {
			c.Before, c.After = float64(kb)/bs, float64(ks)/ss
			if kb+ks >= cfg.MinEvents {
				c.Tested = true
				phi := disp.Of(PodKey{}, m, cfg.CountDispersion)
				c.P = PoissonRateTest(deflate(kb, phi), bs, deflate(ks, phi), ss).P
				c.PBeforeAfter = c.P
				c.ClearsFloors = PoissonRateTest(kb, bs, ks, ss).Ratio() >= th.MinRatio && c.After-c.Before >= th.MinExcessPerSecond
				tested = append(tested, len(out.Rows))
			}
		}
		out.Rows = append(out.Rows, c)
	}
	ps := make([]float64, len(tested))
	for j, i := range tested {
		ps[j] = out.Rows[i].P
	}
	for j, adj := range Holm(ps) {
		r := &out.Rows[tested[j]]
		r.PAdj = math.Min(1, adj)
		r.Regressed = r.PAdj <= cfg.Significance && r.ClearsFloors
	}
	return out
}

// headline is a regressed swap row as a headline names it: "swap window:
// failed connects 0/s → 41/s over 28s (p<0.001)".
func (s SwapWindow) headline(c Comparison) string {
	return fmt.Sprintf("swap window: %s %s/s → %s/s over %s (%s)", metricLabel(c.Metric), FormatRate(c.Before), FormatRate(c.After),
		s.Length.Round(time.Second), FormatP(c.PAdj))
}

// reasons are the swap window's lines in the verdict's reasons: each
// regressed row, worst first, then the window's counts as one line.
func (s SwapWindow) reasons() []string {
	var out []string
	for _, r := range s.worst() {
		out = append(out, fmt.Sprintf("%s: %d in the %s swap window against %d in the baseline; counted against the node",
			s.headline(r), r.NAfter, s.Length.Round(time.Second), r.NBefore))
	}
	line := fmt.Sprintf("swap window (cordon to soak, %s, %d pods through it):", s.Length.Round(time.Second), s.Pods)
	for i, r := range s.Rows {
		sep := ","
		if i == 0 {
			sep = ""
		}
		line += fmt.Sprintf("%s %d %s", sep, r.NAfter, metricLabel(r.Metric))
		if !r.Tested {
			line += " (too few to test)"
		}
	}
	if s.Drained > 0 {
		line += fmt.Sprintf("; %d resets of connections open at the swap's start not counted (the old ztunnel resets what outlives its drain deadline)", s.Drained)
	}
	if s.Regressions() == 0 {
		line += "; no regression"
	}
	return append(out, line)
}

// worst are the regressed rows, the smallest adjusted p first.
func (s SwapWindow) worst() []Comparison { return regressed(s.Rows) }
