package health

import (
	"sort"
	"strconv"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// MaxSummaryPodRows bounds the pod rows in a judgement, keeping status small
// (the CRD allows 64 rows: the node rows plus these).
const MaxSummaryPodRows = 12

// summarize builds the persisted judgement of an assessment.
func summarize(a Assessment, now time.Time) *v1alpha1.NodeJudgement {
	s := &v1alpha1.NodeJudgement{
		IntervalOutcome: a.Outcome,
		BaselineSeconds: int32(a.BaselineLength.Seconds()),
		SoakSeconds:     int32(a.SoakLength.Seconds()),
		PodsCompared:    int32(a.PodsCompared),
		PodsNotCompared: int32(a.PodsNotCompared),
		Tests:           int32(a.Tests),
		PlannedResets:   int64(a.PlannedResets),
		JudgedAt:        now.UTC().Format(time.RFC3339),
	}
	var pods []Comparison
	for _, r := range a.Rows {
		if r.Regressed {
			s.Regressions++
		}
		if r.IsNode() {
			s.Rows = append(s.Rows, r.Row())
		} else if r.Tested {
			pods = append(pods, r)
		}
	}
	sort.SliceStable(pods, func(i, j int) bool {
		if pods[i].Regressed != pods[j].Regressed {
			return pods[i].Regressed
		}
		return pods[i].PAdj < pods[j].PAdj
	})
	for i, r := range pods {
		if i == MaxSummaryPodRows {
			break
		}
		s.Rows = append(s.Rows, r.Row())
	}
	return s
}

// Row formats a comparison for the summary and the explain table.
func (c Comparison) Row() v1alpha1.JudgementRow {
	r := v1alpha1.JudgementRow{Metric: c.Metric, Regressed: c.Regressed}
	if !c.IsNode() {
		r.Pod = c.Pod.String()
	}
	if c.Metric.IsLatency() {
		r.Before = "p50 " + FormatMicros(c.BeforeP50) + " p99 " + FormatMicros(c.Before)
		r.After = "p50 " + FormatMicros(c.AfterP50) + " p99 " + FormatMicros(c.After)
	} else {
		r.Before = FormatRate(c.Before) + "/s"
		r.After = FormatRate(c.After) + "/s"
	}
	r.Values = c.values()
	switch {
	case !c.Tested:
		r.Note = "too little traffic to test"
	default:
		r.P = FormatP(c.PAdj)
		if !c.Regressed && c.PAdj <= 0.05 && !c.ClearsFloors {
			r.Note = "significant but below the ratio/excess floors"
		}
	}
	return r
}

// values are the comparison's numbers as the persisted row keeps them.
func (c Comparison) values() *v1alpha1.RowValues {
	v := &v1alpha1.RowValues{Before: formatValue(c.Before), After: formatValue(c.After),
		NBefore: int64(c.NBefore), NAfter: int64(c.NAfter), Probe: c.Probe}
	if c.Metric.IsLatency() {
		v.BeforeP50, v.AfterP50 = formatValue(c.BeforeP50), formatValue(c.AfterP50)
	}
	if c.ControlRatio != 0 {
		v.ControlShift, v.ControlPods = formatValue(c.ControlRatio), int32(c.ControlPods)
	}
	if c.Tested {
		v.PAdj = formatValue(c.PAdj)
	}
	return v
}

// formatValue writes a number for RowValues: four significant digits.
func formatValue(f float64) string { return strconv.FormatFloat(f, 'g', 4, 64) }
