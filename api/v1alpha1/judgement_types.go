package v1alpha1

// NodeJudgement is the judge's summary of a node's last judgement, persisted
// with its verdict: a copy of health.Summary with the same JSON field names,
// so `nodewise explain` reads it as a health.Summary. It holds only strings
// and integers (CRDs carry no floats) and stays small: the node rows plus at
// most health.MaxSummaryPodRows pod rows.
type NodeJudgement struct {
	// Judgements counts the intervals judged so far for this node.
	Judgements int32 `json:"judgements"`
	// ConsecutiveFailures counts failing intervals in a row.
	ConsecutiveFailures int32 `json:"consecutiveFailures"`
	// ConsecutiveQueryErrors counts external-gate evaluations in a row that could not query their source.
	// +optional
	ConsecutiveQueryErrors int32 `json:"consecutiveQueryErrors,omitempty"`
	// IntervalOutcome is the last interval's own outcome (Pass, Fail, Inconclusive).
	// +optional
	IntervalOutcome string `json:"intervalOutcome,omitempty"`
	BaselineSeconds int32  `json:"baselineSeconds"`
	SoakSeconds     int32  `json:"soakSeconds"`
	PodsCompared    int32  `json:"podsCompared"`
	// +optional
	PodsNotCompared int32 `json:"podsNotCompared,omitempty"`
	Tests           int32 `json:"tests"`
	Regressions     int32 `json:"regressions"`
	// PlannedResets were subtracted as caused by an in-place swap.
	// +optional
	PlannedResets int64 `json:"plannedResets,omitempty"`
	// Rows: the node's totals, then the pod rows with the smallest p-values.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Rows []JudgementRow `json:"rows,omitempty"`
	// JudgedAt is when the judgement was made (RFC 3339).
	// +optional
	JudgedAt string `json:"judgedAt,omitempty"`
}

// JudgementRow is one line of the before/after table (health.SummaryRow).
type JudgementRow struct {
	// Pod is namespace/name; empty for the node's totals.
	// +optional
	Pod    string `json:"pod,omitempty"`
	Metric string `json:"metric"`
	Before string `json:"before"`
	After  string `json:"after"`
	// P is the Holm-adjusted p-value, formatted; empty when untested.
	// +optional
	P string `json:"p,omitempty"`
	// +optional
	Regressed bool `json:"regressed,omitempty"`
	// Note says why a row was not tested, or which floors it did not clear.
	// +optional
	Note string `json:"note,omitempty"`
}
