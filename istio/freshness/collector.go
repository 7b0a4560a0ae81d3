package freshness

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio/inventory"
)

// CollectorConfig configures the freshness metrics.
type CollectorConfig struct {
	Client   kubernetes.Interface
	Registry prometheus.Registerer
	Log      *zap.Logger
	Options  inventory.Options
	Target   Target
	Keys     Keys
	// Interval between observations (default 5m: restart cadences are
	// days, and each observation lists every pod and ReplicaSet).
	Interval time.Duration
}

// Collector publishes the latest report's counts per team and namespace (a
// bounded label set: never per pod or workload). Scrapes never touch the API.
type Collector struct {
	cfg     CollectorConfig
	pods    *prometheus.Desc
	stale   *prometheus.Desc
	lagging *prometheus.Desc
	overAge *prometheus.Desc
	window  *prometheus.Desc
	never   *prometheus.Desc
	// waypoints and staleWaypoints are per namespace.
	waypoints      *prometheus.Desc
	staleWaypoints *prometheus.Desc
	errors         prometheus.Counter
	mu             sync.Mutex
	report         *Report
}

// NewCollector validates cfg and registers the collector on cfg.Registry.
func NewCollector(cfg CollectorConfig) (*Collector, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("freshness collector: Client is required")
	case cfg.Registry == nil:
		return nil, errors.New("freshness collector: Registry is required")
	case cfg.Interval < 0:
		return nil, errors.New("freshness collector: Interval must be > 0")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Minute
	}
	tn := []string{"team", "namespace"}
	c := &Collector{
		cfg:     cfg,
		pods:    prometheus.NewDesc("nodewise_freshness_pods", "Sidecar pods by team and namespace.", tn, nil),
		stale:   prometheus.NewDesc("nodewise_freshness_stale_pods", "Sidecar pods whose proxy is older than the designated version.", tn, nil),
		lagging: prometheus.NewDesc("nodewise_freshness_lagging_pods", "Sidecar pods more minor releases behind the designated version than the target allows.", tn, nil),
		overAge: prometheus.NewDesc("nodewise_freshness_over_age_pods", "Sidecar pods older than the target's maximum age (0 when no age target is set).", tn, nil),
		window: prometheus.NewDesc("nodewise_freshness_exposure_window_seconds",
			"Estimated time until every stale proxy of a team runs the designated version without forcing (team=\"\" is the fleet); the workloads no restart is expected to fix are counted apart.", []string{"team"}, nil),
		never: prometheus.NewDesc("nodewise_freshness_never_workloads",
			"Stale workloads no restart of their own is expected to fix (no restart history, or pinned to an older revision), by team (team=\"\" is the fleet).", []string{"team"}, nil),
		waypoints: prometheus.NewDesc("nodewise_freshness_waypoints", "Ambient waypoints (Gateways of class istio-waypoint with a running pod) by namespace.", []string{"namespace"}, nil),
		staleWaypoints: prometheus.NewDesc("nodewise_freshness_stale_waypoints",
			"Ambient waypoints whose oldest pod runs a proxy older than the designated version, by namespace.", []string{"namespace"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodewise_freshness_errors_total",
			Help: "Freshness observations that failed; the metrics keep the last good one.",
		}),
	}
	for _, m := range []prometheus.Collector{c, c.errors} {
		if err := cfg.Registry.Register(m); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Run observes at once and then every Interval until ctx ends. It returns
// nil on cancellation.
func (c *Collector) Run(ctx context.Context) error {
	wait.UntilWithContext(ctx, c.Refresh, c.cfg.Interval)
	return nil
}

// Refresh observes once and swaps in the new report.
func (c *Collector) Refresh(ctx context.Context) {
	r, err := Observe(ctx, c.cfg.Client, c.cfg.Options, c.cfg.Target, c.cfg.Keys, time.Now())
	if err != nil {
		c.errors.Inc()
		c.cfg.Log.Warn("freshness observation failed", zap.Error(err))
		return
	}
	c.mu.Lock()
	c.report = &r
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.pods, c.stale, c.lagging, c.overAge, c.window, c.never, c.waypoints, c.staleWaypoints} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	r := c.report
	c.mu.Unlock()
	if r == nil {
		return
	}
	type key struct{ team, ns string }
	sums := map[key]*[4]int{}
	for _, w := range r.Workloads {
		k := key{w.Team, w.Namespace}
		if sums[k] == nil {
			sums[k] = &[4]int{}
		}
		s := sums[k]
		s[0] += w.Pods
		s[1] += w.Stale
		s[2] += w.Lagging
		s[3] += w.OverAge
	}
	for k, s := range sums {
		for i, d := range []*prometheus.Desc{c.pods, c.stale, c.lagging, c.overAge} {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(s[i]), k.team, k.ns)
		}
	}
	for _, g := range append([]Group{{Exposure: r.Fleet.Exposure}}, r.Teams...) {
		ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, g.Exposure.Window.Seconds(), g.Name)
		ch <- prometheus.MustNewConstMetric(c.never, prometheus.GaugeValue, float64(g.Exposure.Never), g.Name)
	}
	stale := map[string]int{}
	for _, w := range r.Waypoints.Behind {
		stale[w.Namespace]++
	}
	for ns, n := range r.Waypoints.PerNamespace {
		ch <- prometheus.MustNewConstMetric(c.waypoints, prometheus.GaugeValue, float64(n), ns)
		ch <- prometheus.MustNewConstMetric(c.staleWaypoints, prometheus.GaugeValue, float64(stale[ns]), ns)
	}
}
