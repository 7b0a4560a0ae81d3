package health

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// worstFirst orders regressed rows: the smallest adjusted p first, as
// FormatP prints it (every p under 0.001 ties); among ties a pod's row
// before the node's totals (it says where), then the larger rise.
func worstFirst(rows []Comparison) {
	shown := func(c Comparison) float64 {
		if c.PAdj < 0.001 {
			return 0
		}
		return c.PAdj
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		switch {
		case shown(a) != shown(b):
			return shown(a) < shown(b)
		case a.IsNode() != b.IsNode():
			return !a.IsNode()
		}
		return rise(a) > rise(b)
	})
}

// rise is a row's after/before ratio (+Inf from zero).
func rise(c Comparison) float64 {
	if c.Before <= 0 {
		return math.Inf(1)
	}
	return c.After / c.Before
}

// headline is the row as a headline names it: who, the metric, before →
// after, p. "probe: resets sent 0/s → 3.1/s (p<0.001)". The probe is named
// as the family (its pod is the node's one DaemonSet pod), the node's totals
// as "all pods".
func (c Comparison) headline() string {
	who := "all pods"
	switch {
	case c.Probe:
		who = "probe"
	case !c.IsNode():
		who = "pod " + c.Pod.String()
	}
	if c.Metric.IsLatency() {
		return fmt.Sprintf("%s: %s p99 %s → %s (%s)", who, metricLabel(c.Metric), FormatMicros(c.Before), FormatMicros(c.After), FormatP(c.PAdj))
	}
	return fmt.Sprintf("%s: %s %s/s → %s/s (%s)", who, metricLabel(c.Metric), FormatRate(c.Before), FormatRate(c.After), FormatP(c.PAdj))
}

// evidence is the headline of failing findings, worst first: the soak's
// regressed rows, then the swap window's, then the external gates'
// failures, the first named and the rest counted.
func evidence(regressed []Comparison, swap SwapWindow, gateFailures []string) string {
	var lead string
	swapped := swap.worst()
	switch {
	case len(regressed) > 0:
		lead = regressed[0].headline()
	case len(swapped) > 0:
		lead = swap.headline(swapped[0])
	case len(gateFailures) > 0:
		lead = firstLine(gateFailures[0])
	default:
		return ""
	}
	if n := len(regressed) + len(swapped) + len(gateFailures) - 1; n > 0 {
		return Lead(append([]string{lead}, make([]string, n)...))
	}
	return Cut(lead, HeadlineMax)
}

// regressedRows are a's regressed rows, worst first.
func regressedRows(a Assessment) []Comparison { return regressed(a.Rows) }

// regressed are the regressed rows of rows, worst first.
func regressed(rows []Comparison) []Comparison {
	var out []Comparison
	for _, r := range rows {
		if r.Regressed {
			out = append(out, r)
		}
	}
	worstFirst(out)
	return out
}

// passHeadline says what a pass rests on: the tests, the pods they covered
// and the probe's, or that only the probe had the traffic to test.
func passHeadline(a Assessment) string {
	pods := map[PodKey]bool{}
	for _, r := range a.Rows {
		if r.Tested && !r.Probe && !r.IsNode() {
			pods[r.Pod] = true
		}
	}
	switch {
	case a.Tests > 0 && a.ProbeTests > 0:
		return fmt.Sprintf("no regression in %d tests: %d over %d pods, %d on the probe", a.Tests+a.ProbeTests, a.Tests, len(pods), a.ProbeTests)
	case a.Tests > 0:
		return fmt.Sprintf("no regression in %d tests over %d pods", a.Tests, len(pods))
	default:
		return fmt.Sprintf("no regression in the probe's %d tests; no workload pod had the traffic to test", a.ProbeTests)
	}
}

// nothingToTest is the headline of an interval with too little to judge.
func nothingToTest(cfg Config, a Assessment) string {
	if a.Tests+a.ProbeTests == 0 || a.SoakConnections < cfg.MinNodeConnections {
		return fmt.Sprintf("nothing to test: %d connections in %s of soak (need %d)", a.SoakConnections, a.SoakLength.Round(time.Second), cfg.MinNodeConnections)
	}
	return fmt.Sprintf("no probe evidence: no %s pod with %d connections in both windows", cfg.ProbeNamespace, cfg.MinEvents)
}

// joinHeadline is parts joined with "; ", cut to HeadlineMax.
func joinHeadline(parts ...string) string {
	return Cut(strings.Join(parts, "; "), HeadlineMax)
}
