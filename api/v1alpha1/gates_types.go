package v1alpha1

import "time"

// GatesSpec says how a node's soak is judged before the rollout moves on.
// The judge (package health) reads it through health/gatespec; the orchestrator
// only passes it through. Every field is optional: an empty `gates: {}` judges
// every metric with the defaults documented on each field (and in docs/health.md).
//
// Numbers that are not integers (ratios, rates, significance) are decimal strings,
// because CRDs cannot carry floats portably; CEL rules check their ranges.
//
// +kubebuilder:validation:XValidation:rule="!has(self.interval) || (self.interval.matches('[1-9]') && duration(self.interval) >= duration('1s'))",message="gates.interval must be a positive duration of at least 1s, such as 1m"
// +kubebuilder:validation:XValidation:rule="!has(self.maxSnapshotAge) || self.maxSnapshotAge.matches('[1-9]')",message="gates.maxSnapshotAge must be a positive duration such as 30s"
type GatesSpec struct {
	// Interval is how often the judge compares the soak so far with the baseline
	// (default 1m). A node fails only after ConsecutiveFailures failing intervals.
	// +optional
	Interval *Duration `json:"interval,omitempty"`
	// ConsecutiveFailures is how many failing intervals in a row fail the node (default 2).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
	// Inconclusive says what too little traffic to judge means: Pass moves on,
	// Pause holds the node and the rollout until there is enough traffic or a
	// person decides, Fail halts (default Pause).
	// +optional
	Inconclusive InconclusivePolicy `json:"inconclusive,omitempty"`
	// Probe says whether a node must show the nodewise-probe DaemonSet's
	// traffic to be judged: Required (default) holds a node without probe
	// evidence as Inconclusive; Optional judges such a node on its workload
	// alone (for a cluster that does not run the probe).
	// +kubebuilder:validation:Enum=Required;Optional
	// +optional
	Probe ProbePolicy `json:"probe,omitempty"`
	// ControlGroup says whether each node's change is compared with the
	// same interval's change on control nodes (not yet swapped, not
	// cordoned, in its zone or else the cluster), so a change the whole
	// cluster shows (a traffic surge, a dependency failing) is not read as
	// the node's regression: Enabled (default) or Disabled, which judges
	// every node before/after alone, as the last wave is judged.
	// +kubebuilder:validation:Enum=Enabled;Disabled
	// +optional
	ControlGroup ControlGroupPolicy `json:"controlGroup,omitempty"`
	// Method is how the soak is judged: Fixed (default) first decides at
	// the soak's end; Sequential also tests the soak so far every few
	// seconds with a small share of the significance spent on each look,
	// and fails the node as soon as a regression is conclusive. Both pass a
	// node only at the soak's end.
	// +kubebuilder:validation:Enum=Sequential;Fixed
	// +optional
	Method DecisionMethod `json:"method,omitempty"`
	// Significance is the family-wise false-alarm rate of one judgement of one
	// node, across all its pods and metrics (Holm correction), as a decimal in
	// (0, 0.5] (default "0.005").
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)?(\.[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) <= 0.5",message="gates.significance must be a decimal in (0, 0.5], such as 0.01"
	// +optional
	Significance string `json:"significance,omitempty"`
	// CountDispersion is the least quasi-Poisson dispersion φ the count tests
	// assume, a decimal ≥ 1 (default "1"). The judge measures φ per pod from the
	// baseline's snapshots (resets come in clumps); this is the floor under it,
	// and the value used when the baseline has fewer than three snapshots.
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)?(\.[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="double(self) >= 1.0",message="gates.countDispersion must be a decimal of at least 1"
	// +optional
	CountDispersion string `json:"countDispersion,omitempty"`
	// MinEvents is the fewest events (counts, or latency samples) in each window
	// before a pod's metric is tested at all (default 20). Fewer is "not enough traffic".
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinEvents int32 `json:"minEvents,omitempty"`
	// MinNodeConnections is the fewest connections the whole node must make in
	// the soak window; fewer makes the node's verdict Inconclusive (default 100).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinNodeConnections int32 `json:"minNodeConnections,omitempty"`
	// MaxSnapshotAge is how old an agent snapshot may be before the agent counts
	// as stale, which fails the gate (default 30s).
	// +optional
	MaxSnapshotAge *Duration `json:"maxSnapshotAge,omitempty"`
	// Counts overrides the thresholds of the count metrics. Metrics not listed use
	// their defaults; list a metric with disabled: true to skip it.
	// +listType=map
	// +listMapKey=metric
	// +kubebuilder:validation:MaxItems=4
	// +optional
	Counts []CountGate `json:"counts,omitempty"`
	// Latency overrides the thresholds of the latency metrics, like Counts.
	// +listType=map
	// +listMapKey=metric
	// +kubebuilder:validation:MaxItems=2
	// +optional
	Latency []LatencyGate `json:"latency,omitempty"`
	// Prometheus adds external gates: instant queries with thresholds.
	// +optional
	Prometheus *PrometheusGates `json:"prometheus,omitempty"`
	// Conformance runs a user-supplied Job before the first wave or node
	// (and, as When says, between waves or after the canaries); its
	// failure or timeout halts. See docs/sidecar.md and docs/health.md.
	// +optional
	Conformance *ConformanceGate `json:"conformance,omitempty"`
}

// InconclusivePolicy is what an Inconclusive verdict does to the rollout.
// +kubebuilder:validation:Enum=Pass;Pause;Fail
type InconclusivePolicy string

// ProbePolicy says whether probe evidence is required (see GatesSpec.Probe).
type ProbePolicy string

// The probe policies.
const (
	ProbeRequired ProbePolicy = "Required"
	ProbeOptional ProbePolicy = "Optional"
)

// ControlGroupPolicy says whether the control group is used (see
// GatesSpec.ControlGroup).
type ControlGroupPolicy string

// The control group policies.
const (
	ControlGroupEnabled  ControlGroupPolicy = "Enabled"
	ControlGroupDisabled ControlGroupPolicy = "Disabled"
)

// DecisionMethod is how the soak is judged (see GatesSpec.Method).
type DecisionMethod string

// The decision methods.
const (
	MethodSequential DecisionMethod = "Sequential"
	MethodFixed      DecisionMethod = "Fixed"
)

const (
	InconclusivePass  InconclusivePolicy = "Pass"
	InconclusivePause InconclusivePolicy = "Pause"
	InconclusiveFail  InconclusivePolicy = "Fail"
)

// Metric names a per-pod measurement the node agent reports and the judge
// compares: a counter (a CountGate's metric) or a latency histogram (a
// LatencyGate's metric). It is the type the judge uses and persists.
type Metric string

const (
	MetricResetsReceived  Metric = "resetsReceived"
	MetricResetsSent      Metric = "resetsSent"
	MetricConnectFailures Metric = "connectFailures"
	MetricRetransmits     Metric = "retransmits"
	MetricConnectLatency  Metric = "connectLatency"
	MetricSRTT            Metric = "srtt"
)

// IsLatency says whether the metric is a latency histogram (else a counter).
func (m Metric) IsLatency() bool { return m == MetricConnectLatency || m == MetricSRTT }

// CountGate is a one-sided Poisson rate test on one counter: a pod regresses
// when its rate rose significantly AND by at least MinRatio AND by at least
// MinExcessPerSecond.
type CountGate struct {
	// Metric is one of the counters.
	// +kubebuilder:validation:Enum=resetsReceived;resetsSent;connectFailures;retransmits
	Metric Metric `json:"metric"`
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// MinRatio is the smallest after/before rate ratio that counts, a decimal ≥ 1 (default "2").
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)?(\.[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="double(self) >= 1.0",message="minRatio must be a decimal of at least 1, such as 2"
	// +optional
	MinRatio string `json:"minRatio,omitempty"`
	// MinExcessPerSecond is the smallest rate increase that counts, in events per
	// second, a decimal ≥ 0 (default "0.05").
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)?(\.[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +optional
	MinExcessPerSecond string `json:"minExcessPerSecond,omitempty"`
}

// LatencyGate is a one-sided Mann-Whitney U test on one latency histogram: a
// pod regresses when its latency shifted up significantly AND its p50 or p99
// grew by at least MinRatio AND by at least MinIncrease.
type LatencyGate struct {
	// Metric is one of the latency histograms.
	// +kubebuilder:validation:Enum=connectLatency;srtt
	Metric Metric `json:"metric"`
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// MinRatio is the smallest after/before ratio of p50 or p99 that counts, a decimal ≥ 1 (default "1.25").
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)?(\.[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="double(self) >= 1.0",message="minRatio must be a decimal of at least 1, such as 1.25"
	// +optional
	MinRatio string `json:"minRatio,omitempty"`
	// MinIncrease is the smallest increase of that quantile that counts (default 500us).
	// +optional
	MinIncrease *Duration `json:"minIncrease,omitempty"`
}

// PrometheusGates are instant queries against a Prometheus server. A query
// that errors MaxConsecutiveErrors times in a row fails the gate.
type PrometheusGates struct {
	// Address is the server's base URL, such as
	// http://prometheus.monitoring.svc:9090. The orchestrator queries only a
	// cluster Service (<service>.<namespace>.svc[.<cluster domain>]) or a host
	// its --gate-address-allow lists; any other host fails the node unqueried.
	// +kubebuilder:validation:Pattern=`^https?://`
	Address string `json:"address"`
	// Timeout bounds one query, retries included (default 10s).
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]') && duration(self) >= duration('100ms')",message="prometheus.timeout must be a positive duration of at least 100ms, such as 10s"
	// +optional
	Timeout *Duration `json:"timeout,omitempty"`
	// MaxConsecutiveErrors is how many failed evaluations in a row fail the gate (default 3).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConsecutiveErrors int32 `json:"maxConsecutiveErrors,omitempty"`
	// NoData says what a query that returns nothing to compare (no series,
	// or only NaN samples) means, for every query that does not set its own:
	// Inconclusive (default) holds the node until the query returns data or a
	// person decides, Pass ignores the query, Fail halts. A renamed metric
	// returns nothing, so Pass lets it pass every node.
	// +optional
	NoData NoDataPolicy `json:"noData,omitempty"`
	// Queries are the user's own instant queries with thresholds. A
	// NodeRollout needs at least one; a RevisionMigration may leave them out
	// and be gated by the built-in gates alone.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Queries []PrometheusQuery `json:"queries,omitempty"`
	// BuiltIn tunes the sidecar wing's built-in gates (RevisionMigration
	// only), which run whenever an address is set: istiod's rejected
	// configs per revision, and the migrated namespaces' retries per request
	// against the not-yet-migrated ones'.
	// +optional
	BuiltIn *BuiltInGates `json:"builtIn,omitempty"`
}

// DefaultBuiltInSoak and DefaultBuiltInBaseline are builtIn.soak's and
// builtIn.baseline's defaults.
const (
	DefaultBuiltInSoak     = time.Minute
	DefaultBuiltInBaseline = 5 * time.Minute
)

// BuiltInGates are a RevisionMigration's built-in Prometheus gates. Each
// judges a wave once it has soaked on the new proxy; a query that returns
// nothing (many clusters scrape neither istiod's counters nor Envoy's retry
// counters) passes with a reason saying so, because the gate has nothing to
// say, and never holds the wave.
type BuiltInGates struct {
	// Disabled turns both built-in gates off for this migration.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// Soak is how long a wave is watched once Ready before these gates
	// judge it (default 1m); until then they hold the wave.
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="builtIn.soak must be a positive duration"
	// +optional
	Soak *Duration `json:"soak,omitempty"`
	// Baseline is how far before the wave started the retry gate's
	// baseline reaches (default 5m).
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="builtIn.baseline must be a positive duration"
	// +optional
	Baseline *Duration `json:"baseline,omitempty"`
	// +optional
	ConfigAcceptance ConfigAcceptanceGate `json:"configAcceptance,omitempty"`
	// +optional
	Retries RetryGate `json:"retries,omitempty"`
}

// ConfigAcceptanceGate fails a wave when proxies rejected (NACKed) the new
// revision's configuration during its soak: istiod's counter
// pilot_total_xds_rejects{type}, split by revision.
type ConfigAcceptanceGate struct {
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// RevisionLabel is the label that carries the istiod revision on its
	// series (default istio_io_rev: the pod label istio.io/rev as the usual
	// kubernetes-pods scrape job's labelmap writes it).
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	RevisionLabel string `json:"revisionLabel,omitempty"`
	// MaxRejects is how many rejected xDS responses the new revision may
	// count during the soak (default 0: any rejection fails the wave).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxRejects int32 `json:"maxRejects,omitempty"`
}

// RetryGate fails a wave whose namespaces' retries per request rose more
// than the control namespaces' did: Envoy's counters
// envoy_cluster_upstream_rq_retry / envoy_cluster_upstream_rq_total from the
// sidecars, over the soak against the baseline before the wave.
type RetryGate struct {
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// NamespaceLabel is the label that carries the pod's namespace on the
	// sidecars' series (default namespace).
	// +kubebuilder:validation:Pattern=`^[a-zA-Z_][a-zA-Z0-9_]*$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	NamespaceLabel string `json:"namespaceLabel,omitempty"`
	// MaxRise is how many times more the migrated namespaces' retries per
	// request may rise than the control namespaces' over the same interval,
	// a decimal of at least 1 (default "2").
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)?(\.[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="double(self) >= 1.0",message="retries.maxRise must be a decimal of at least 1, such as 2"
	// +optional
	MaxRise string `json:"maxRise,omitempty"`
	// MinExcess is the smallest rise in retries per request that counts
	// (default "0.01": one more retry per hundred requests).
	// +kubebuilder:validation:Pattern=`^(0|[1-9][0-9]*)?(\.[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +optional
	MinExcess string `json:"minExcess,omitempty"`
	// MinRequests is the fewest requests each side needs in the soak for a
	// comparison (default 100); with fewer the gate passes with a reason.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinRequests int32 `json:"minRequests,omitempty"`
}

// PrometheusQuery is one PromQL instant query and its threshold. The query may
// use $node, replaced by the node's name. Every sample the query returns is
// compared with the threshold, NaN samples left out; a result with nothing
// left to compare is what NoData says.
type PrometheusQuery struct {
	// Name is how reasons and status refer to the query.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`
	// FailWhen says which side of Threshold fails: Above or Below.
	FailWhen ThresholdDirection `json:"failWhen"`
	// Threshold is a decimal, such as "0.99" or "0.250".
	// +kubebuilder:validation:Pattern=`^-?(0|[1-9][0-9]*)?(\.[0-9]+)?([eE][-+]?[0-9]+)?$`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	Threshold string `json:"threshold"`
	// NoData overrides prometheus.noData for this query.
	// +optional
	NoData NoDataPolicy `json:"noData,omitempty"`
}

// NoDataPolicy is what a Prometheus query that returns nothing to compare
// counts as (see PrometheusGates.NoData).
// +kubebuilder:validation:Enum=Inconclusive;Pass;Fail
type NoDataPolicy string

// The no-data policies.
const (
	NoDataInconclusive NoDataPolicy = "Inconclusive"
	NoDataPass         NoDataPolicy = "Pass"
	NoDataFail         NoDataPolicy = "Fail"
)

// ThresholdDirection says which side of a threshold fails.
// +kubebuilder:validation:Enum=Above;Below
type ThresholdDirection string

const (
	FailAbove ThresholdDirection = "Above"
	FailBelow ThresholdDirection = "Below"
)
