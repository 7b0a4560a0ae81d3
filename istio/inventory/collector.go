package inventory

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// CollectorConfig configures the metrics collector.
type CollectorConfig struct {
	Client   kubernetes.Interface
	Registry prometheus.Registerer
	Log      *zap.Logger
	Options  Options
	// Interval between observations (default 30s).
	Interval time.Duration
}

// Collector publishes nodewise_proxy_pods{namespace,revision,version,mode}
// from the latest observation. Run refreshes it; scrapes never touch the API.
type Collector struct {
	cfg    CollectorConfig
	desc   *prometheus.Desc
	errors prometheus.Counter
	lastOK prometheus.Gauge
	mu     sync.Mutex
	counts map[Key]int
}

// NewCollector validates cfg and registers the collector's metrics on cfg.Registry.
func NewCollector(cfg CollectorConfig) (*Collector, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("inventory collector: Client is required")
	case cfg.Registry == nil:
		return nil, errors.New("inventory collector: Registry is required (inject one; the global registry is not used)")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Interval == 0 {
		cfg.Interval = 30 * time.Second
	}
	if cfg.Interval < 0 {
		return nil, errors.New("inventory collector: Interval must be > 0")
	}
	c := &Collector{
		cfg: cfg,
		desc: prometheus.NewDesc("nodewise_proxy_pods",
			"Meshed pods by namespace, proxy revision, proxy version and mode (sidecar or ambient).",
			[]string{"namespace", "revision", "version", "mode"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodewise_inventory_errors_total",
			Help: "Inventory observations that failed; nodewise_proxy_pods keeps the last good one.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodewise_inventory_last_success_timestamp_seconds",
			Help: "Unix time of the last successful inventory observation.",
		}),
	}
	for _, m := range []prometheus.Collector{c, c.errors, c.lastOK} {
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

// Refresh observes once and swaps in the new counts.
func (c *Collector) Refresh(ctx context.Context) {
	inv, err := Observe(ctx, c.cfg.Client, c.cfg.Options)
	if err != nil {
		c.errors.Inc()
		c.cfg.Log.Warn("inventory observation failed", zap.Error(err))
		return
	}
	c.mu.Lock()
	c.counts = inv.Counts()
	c.mu.Unlock()
	c.lastOK.SetToCurrentTime()
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, n := range c.counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k.Namespace, k.Revision, k.Version, string(k.Mode))
	}
}
