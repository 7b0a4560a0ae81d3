package health

import (
	"sort"
	"time"
)

// Summary is what the judge persists about one node's judgement: counters that
// must survive an orchestrator restart (consecutive failures and query errors)
// and the before/after rows that `nodewise explain` prints. Every field is a
// string or an integer so the orchestrator can copy it into NodeRollout.status
// as is (CRDs carry no floats). It stays small: the node rows plus at most
// MaxSummaryPodRows pod rows.
type Summary struct {
	// Judgements counts the intervals judged so far for this node.
	Judgements int32 `json:"judgements"`
	// ConsecutiveFailures counts failing intervals in a row; the node fails
	// when it reaches gates.consecutiveFailures.
	ConsecutiveFailures int32 `json:"consecutiveFailures"`
	// ConsecutiveQueryErrors counts external-gate evaluations in a row that
	// could not query their source; the gate fails at maxConsecutiveErrors.
	ConsecutiveQueryErrors int32 `json:"consecutiveQueryErrors,omitempty"`
	// IntervalOutcome is the outcome of the last interval alone, before the
	// consecutive-failure rule and the inconclusive policy.
	IntervalOutcome Outcome `json:"intervalOutcome,omitempty"`
	BaselineSeconds int32   `json:"baselineSeconds"`
	SoakSeconds     int32   `json:"soakSeconds"`
	PodsCompared    int32   `json:"podsCompared"`
	PodsNotCompared int32   `json:"podsNotCompared,omitempty"`
	Tests           int32   `json:"tests"`
	Regressions     int32   `json:"regressions"`
	// PlannedResets were subtracted as caused by an in-place swap.
	PlannedResets int64 `json:"plannedResets,omitempty"`
	// Rows: the node's totals, then the pod rows with the smallest p-values.
	Rows []SummaryRow `json:"rows,omitempty"`
	// JudgedAt is when the judgement was made (RFC 3339).
	JudgedAt string `json:"judgedAt,omitempty"`
}

// SummaryRow is one line of the before/after table, formatted for people.
type SummaryRow struct {
	// Pod is namespace/name (with " (proxy)" for ztunnel's sockets in the pod);
	// empty for the node's totals.
	Pod    string `json:"pod,omitempty"`
	Metric Metric `json:"metric"`
	// Before and After are "0.2/s" for counts and "p99 4.1ms" style for latency.
	Before    string `json:"before"`
	After     string `json:"after"`
	P         string `json:"p,omitempty"` // Holm-adjusted, "p<0.001"; empty when untested
	Regressed bool   `json:"regressed,omitempty"`
	// Note says why a row was not tested, or which floors it did not clear.
	Note string `json:"note,omitempty"`
}

// MaxSummaryPodRows bounds the pod rows in a Summary, keeping status small.
const MaxSummaryPodRows = 12

// summarize builds the persisted summary of an assessment.
func summarize(a Assessment, now time.Time) *Summary {
	s := &Summary{
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
func (c Comparison) Row() SummaryRow {
	r := SummaryRow{Metric: c.Metric, Regressed: c.Regressed}
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
