package health

import (
	"fmt"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Metric names a per-pod measurement the judge compares: the API's metric
// names, the ones NodeRollout spec.gates uses.
type Metric = v1alpha1.Metric

// CountMetrics and LatencyMetrics are every metric the judge knows, in report order.
var (
	CountMetrics   = []Metric{v1alpha1.MetricResetsReceived, v1alpha1.MetricResetsSent, v1alpha1.MetricConnectFailures, v1alpha1.MetricRetransmits}
	LatencyMetrics = []Metric{v1alpha1.MetricConnectLatency, v1alpha1.MetricSRTT}
)

// metricLabel is how a metric reads in reasons and the explain table.
func metricLabel(m Metric) string {
	switch m {
	case v1alpha1.MetricResetsReceived:
		return "resets received"
	case v1alpha1.MetricResetsSent:
		return "resets sent"
	case v1alpha1.MetricConnectFailures:
		return "failed connects"
	case v1alpha1.MetricRetransmits:
		return "retransmits"
	case v1alpha1.MetricConnectLatency:
		return "connect latency"
	case v1alpha1.MetricSRTT:
		return "srtt"
	}
	return string(m)
}

// InconclusivePolicy says what too little traffic to judge does (the API's
// spec.gates.inconclusive).
type InconclusivePolicy = v1alpha1.InconclusivePolicy

// CountThresholds are the floors a count's rise must clear besides significance.
type CountThresholds struct {
	Disabled           bool
	MinRatio           float64 // after/before rate ratio, ≥ 1
	MinExcessPerSecond float64 // after − before rate, ≥ 0
}

// LatencyThresholds are the floors a latency shift must clear besides significance.
type LatencyThresholds struct {
	Disabled    bool
	MinRatio    float64       // after/before ratio of p50 or p99, ≥ 1
	MinIncrease time.Duration // after − before of that same quantile, ≥ 0
}

// Config holds every threshold of the judge. The zero value of each field means
// its default (see Defaults); NewConfig validates and fills them in.
type Config struct {
	Significance        float64 // family-wise α per judgement of a node (Holm)
	CountDispersion     float64 // prior quasi-Poisson φ, ≥ 1: used where the baseline cannot measure φ, and the least φ used anywhere
	MinEvents           uint64  // per window, before a pod's metric is tested
	MinNodeConnections  uint64  // in the soak window, or the node is Inconclusive
	ConsecutiveFailures int     // failing intervals in a row before Fail
	Inconclusive        InconclusivePolicy
	MaxSnapshotAge      time.Duration
	Counts              map[Metric]CountThresholds
	Latency             map[Metric]LatencyThresholds
	// ProbeNamespace holds the probe workload (default nodewise-probe): its
	// pods are judged as a family of their own, reported apart from the
	// workload's, and required on every node.
	ProbeNamespace string
	// ProbeOptional judges a node without probe evidence on its workload
	// alone. By default a node without probe evidence is Inconclusive: a
	// drained node would otherwise be judged on nothing.
	ProbeOptional bool
	// NoControlGroup judges every node before/after alone, whatever control
	// nodes the caller names (spec.gates.controlGroup: Disabled), and the
	// reasons say the control group is switched off.
	NoControlGroup bool
	// Sequential also looks at the soak every LookEvery, each look at a
	// small share of the significance, and the end's judgement tests at
	// the rest (spec.gates.method: Sequential; sequential.go). By default
	// (Fixed) the node is first judged at the soak's end, at the whole
	// Significance.
	Sequential bool
}

// DefaultProbeNamespace is the namespace of the nodewise-probe DaemonSet (deploy/probe).
const DefaultProbeNamespace = "nodewise-probe"

// isProbe says the pod is the probe's.
func (c Config) isProbe(k PodKey) bool { return k.Name != "" && k.Namespace == c.ProbeNamespace }

// Defaults are the thresholds used for every field left zero. docs/health.md
// explains each one, and the acceptance simulation (sim_test.go) measures them.
func Defaults() Config {
	c := Config{
		Significance:        0.005,
		CountDispersion:     1,
		MinEvents:           20,
		MinNodeConnections:  100,
		ConsecutiveFailures: 2,
		Inconclusive:        v1alpha1.InconclusivePause,
		MaxSnapshotAge:      30 * time.Second,
		Counts:              map[Metric]CountThresholds{},
		Latency:             map[Metric]LatencyThresholds{},
		ProbeNamespace:      DefaultProbeNamespace,
	}
	for _, m := range CountMetrics {
		c.Counts[m] = CountThresholds{MinRatio: 2, MinExcessPerSecond: 0.05}
	}
	for _, m := range LatencyMetrics {
		c.Latency[m] = LatencyThresholds{MinRatio: 1.25, MinIncrease: 500 * time.Microsecond}
	}
	return c
}

// NewConfig fills the zero fields of c with Defaults and validates the result.
// Errors name the field and what is allowed.
func NewConfig(c Config) (Config, error) {
	d := Defaults()
	if c.Significance == 0 {
		c.Significance = d.Significance
	}
	if c.CountDispersion == 0 {
		c.CountDispersion = d.CountDispersion
	}
	if c.MinEvents == 0 {
		c.MinEvents = d.MinEvents
	}
	if c.MinNodeConnections == 0 {
		c.MinNodeConnections = d.MinNodeConnections
	}
	if c.ConsecutiveFailures == 0 {
		c.ConsecutiveFailures = d.ConsecutiveFailures
	}
	if c.Inconclusive == "" {
		c.Inconclusive = d.Inconclusive
	}
	if c.MaxSnapshotAge == 0 {
		c.MaxSnapshotAge = d.MaxSnapshotAge
	}
	if c.ProbeNamespace == "" {
		c.ProbeNamespace = d.ProbeNamespace
	}
	counts := map[Metric]CountThresholds{}
	for m, v := range d.Counts {
		counts[m] = v
	}
	for m, v := range c.Counts {
		if _, ok := d.Counts[m]; !ok {
			return Config{}, fmt.Errorf("gates.counts: unknown metric %q (known: resetsReceived, resetsSent, connectFailures, retransmits)", m)
		}
		if v.MinRatio == 0 {
			v.MinRatio = d.Counts[m].MinRatio
		}
		if v.MinRatio < 1 {
			return Config{}, fmt.Errorf("gates.counts[%s].minRatio %g: must be at least 1", m, v.MinRatio)
		}
		if v.MinExcessPerSecond < 0 {
			return Config{}, fmt.Errorf("gates.counts[%s].minExcessPerSecond %g: must not be negative", m, v.MinExcessPerSecond)
		}
		counts[m] = v
	}
	lat := map[Metric]LatencyThresholds{}
	for m, v := range d.Latency {
		lat[m] = v
	}
	for m, v := range c.Latency {
		if _, ok := d.Latency[m]; !ok {
			return Config{}, fmt.Errorf("gates.latency: unknown metric %q (known: connectLatency, srtt)", m)
		}
		if v.MinRatio == 0 {
			v.MinRatio = d.Latency[m].MinRatio
		}
		if v.MinRatio < 1 {
			return Config{}, fmt.Errorf("gates.latency[%s].minRatio %g: must be at least 1", m, v.MinRatio)
		}
		if v.MinIncrease < 0 {
			return Config{}, fmt.Errorf("gates.latency[%s].minIncrease %s: must not be negative", m, v.MinIncrease)
		}
		lat[m] = v
	}
	c.Counts, c.Latency = counts, lat
	switch {
	case c.Significance <= 0 || c.Significance > 0.5:
		return Config{}, fmt.Errorf("gates.significance %g: must be in (0, 0.5]", c.Significance)
	case c.CountDispersion < 1:
		return Config{}, fmt.Errorf("gates.countDispersion %g: must be at least 1", c.CountDispersion)
	case c.ConsecutiveFailures < 1:
		return Config{}, fmt.Errorf("gates.consecutiveFailures %d: must be at least 1", c.ConsecutiveFailures)
	case c.MaxSnapshotAge < 0:
		return Config{}, fmt.Errorf("gates.maxSnapshotAge %s: must be positive", c.MaxSnapshotAge)
	}
	switch c.Inconclusive {
	case v1alpha1.InconclusivePass, v1alpha1.InconclusivePause, v1alpha1.InconclusiveFail:
	default:
		return Config{}, fmt.Errorf("gates.inconclusive %q: must be Pass, Pause or Fail", c.Inconclusive)
	}
	return c, nil
}
