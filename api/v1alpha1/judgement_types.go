package v1alpha1

// Outcome is the judge's decision for one node, one interval or one gate.
type Outcome string

const (
	OutcomePass         Outcome = "Pass"
	OutcomeFail         Outcome = "Fail"
	OutcomeInconclusive Outcome = "Inconclusive"
)

// NodeJudgement is the judge's summary of a node's last judgement, the type
// the judge (package health) builds and the orchestrator persists with the
// node's verdict in status.nodes[].judgement; `nodewise explain` prints it.
// It carries the counters that must survive an orchestrator restart
// (consecutive failures and query errors) and the before/after rows. It holds
// only strings and integers (CRDs carry no floats) and stays small: the node
// rows plus at most health.MaxSummaryPodRows pod rows.
type NodeJudgement struct {
	// Judgements counts the intervals judged so far for this node.
	Judgements int32 `json:"judgements"`
	// ConsecutiveFailures counts failing intervals in a row; the node fails
	// when it reaches gates.consecutiveFailures.
	ConsecutiveFailures int32 `json:"consecutiveFailures"`
	// ConsecutiveQueryErrors counts external-gate evaluations in a row that
	// could not query their source; the gate fails at maxConsecutiveErrors.
	// +optional
	ConsecutiveQueryErrors int32 `json:"consecutiveQueryErrors,omitempty"`
	// IntervalOutcome is the outcome of the last interval alone (Pass, Fail,
	// Inconclusive), before the consecutive-failure rule and the inconclusive
	// policy.
	// +optional
	IntervalOutcome Outcome `json:"intervalOutcome,omitempty"`
	BaselineSeconds int32   `json:"baselineSeconds"`
	SoakSeconds     int32   `json:"soakSeconds"`
	PodsCompared    int32   `json:"podsCompared"`
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
	// Enrollment is the node's count of ambient pods enrolled in the mesh
	// at the end of the soak ("enrolled 10/10"); empty when its agent does
	// not check enrollment.
	// +optional
	Enrollment string `json:"enrollment,omitempty"`
	// EnrollmentPods are the ambient pods not enrolled at the end of the
	// soak, one line each with the check that failed and whether it fails
	// the node (enrolled pods are only counted, in Enrollment).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	EnrollmentPods []string `json:"enrollmentPods,omitempty"`
	// TrafficOutcome is what the traffic figures alone decided this
	// interval, apart from enrollment (set when enrollment was checked).
	// +optional
	TrafficOutcome Outcome `json:"trafficOutcome,omitempty"`
	// PodAges are the established connections by age of the pods in Rows,
	// at the baseline's end (just before the swap) and at the soak's end:
	// what an in-place swap cuts, and what the new ztunnel carries again.
	// +optional
	// +kubebuilder:validation:MaxItems=12
	PodAges []PodAges `json:"podAges,omitempty"`
	// JudgedAt is when the judgement was made (RFC 3339).
	// +optional
	JudgedAt string `json:"judgedAt,omitempty"`
	// BaselineFrom, SwapAt and SoakFrom are the windows judged (RFC 3339,
	// the orchestrator's clock): the baseline from BaselineFrom to SwapAt,
	// the swap from SwapAt to SoakFrom, the soak from SoakFrom to JudgedAt.
	// The dashboard plots the agents' history over them. Empty from gates
	// that judge no windows.
	// +optional
	BaselineFrom string `json:"baselineFrom,omitempty"`
	// +optional
	SwapAt string `json:"swapAt,omitempty"`
	// +optional
	SoakFrom string `json:"soakFrom,omitempty"`
	// ControlNodes names the control nodes the judgement compared with, in
	// the plan's order, the first MaxJudgedControls of them.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MaxLength=253
	ControlNodes []string `json:"controlNodes,omitempty"`
	// Decision says which kind of decision the judgement took and when:
	// "failed early at 0:12 of 5:00 soak, sequential test", "failed at the
	// soak's end, fixed test". Empty while no decision was taken.
	// +optional
	// +kubebuilder:validation:MaxLength=160
	Decision string `json:"decision,omitempty"`
}

// MaxJudgedControls bounds NodeJudgement.ControlNodes: a zone's control
// group can hold thousands of nodes, and a plot pools a few as well as many.
const MaxJudgedControls = 8

// PodAges are one pod's connection ages before → after (the agent's
// connection-age gauge histogram at each window's end). About 100 bytes
// of JSON, so the judgement stays within the status budget.
type PodAges struct {
	// Pod is namespace/name as in JudgementRow.Pod.
	// +kubebuilder:validation:MaxLength=330
	Pod    string   `json:"pod"`
	Before ConnAges `json:"before"`
	After  ConnAges `json:"after"`
}

// ConnAges summarise a connection-age histogram. Ages are the lower bounds,
// in seconds, of the agent's age buckets (health.AgeBucketBoundsSeconds),
// so "60" reads "at least 60 s".
type ConnAges struct {
	// Open is the number of established connections.
	Open int64 `json:"open"`
	// Median and Oldest are the lower bounds of the buckets holding the
	// median and the oldest connection; empty when none was open.
	// +optional
	// +kubebuilder:validation:MaxLength=12
	Median string `json:"median,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=12
	Oldest string `json:"oldest,omitempty"`
}

// JudgementRow is one line of the before/after table, formatted for people.
type JudgementRow struct {
	// Pod is namespace/name (with " (proxy)" for ztunnel's sockets in the
	// pod); empty for the node's totals.
	// +optional
	Pod    string `json:"pod,omitempty"`
	Metric Metric `json:"metric"`
	// Before and After are "0.2/s" for counts and "p50 1.2ms p99 4.1ms" for latency.
	Before string `json:"before"`
	After  string `json:"after"`
	// P is the Holm-adjusted p-value, formatted ("p<0.001"); empty when untested.
	// +optional
	P string `json:"p,omitempty"`
	// +optional
	Regressed bool `json:"regressed,omitempty"`
	// Note says why a row was not tested, or which floors it did not clear.
	// +optional
	Note string `json:"note,omitempty"`
	// Values are the row's numbers behind Before, After and P, for the
	// dashboard to draw after the agents have moved on (absent in
	// judgements written before they were recorded).
	// +optional
	Values *RowValues `json:"values,omitempty"`
}

// RowValues are one before/after row's numbers. CRDs carry no floats, so
// each number is a decimal string as strconv.FormatFloat(v, 'g', 4, 64)
// writes it ("0.25", "1.2e-05"); an empty string is a number not measured.
// A row stays under 200 bytes of JSON, so the judgement's 64 rows keep the
// status budget (orchestrator/statusbudget.go) as they did.
type RowValues struct {
	// Before and After are rates per second for counts and p99 in
	// microseconds for latency.
	// +kubebuilder:validation:MaxLength=24
	Before string `json:"before"`
	// +kubebuilder:validation:MaxLength=24
	After string `json:"after"`
	// BeforeP50 and AfterP50 are the medians in microseconds (latency only).
	// +optional
	// +kubebuilder:validation:MaxLength=24
	BeforeP50 string `json:"beforeP50,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=24
	AfterP50 string `json:"afterP50,omitempty"`
	// NBefore and NAfter are the events (counts) or samples (latency) in each window.
	// +optional
	NBefore int64 `json:"nBefore,omitempty"`
	// +optional
	NAfter int64 `json:"nAfter,omitempty"`
	// ControlShift is the control group's after/before ratio over the same
	// interval (rate ratio for counts, geometric-mean ratio for latency);
	// empty when the row had no control group. ControlPods are the pods it pools.
	// +optional
	// +kubebuilder:validation:MaxLength=24
	ControlShift string `json:"controlShift,omitempty"`
	// +optional
	ControlPods int32 `json:"controlPods,omitempty"`
	// PAdj is the Holm-adjusted one-sided p-value; empty when untested.
	// +optional
	// +kubebuilder:validation:MaxLength=24
	PAdj string `json:"pAdj,omitempty"`
	// Probe marks the probe workload's row: traffic that crosses the node's
	// ztunnel even when the node is drained.
	// +optional
	Probe bool `json:"probe,omitempty"`
}
