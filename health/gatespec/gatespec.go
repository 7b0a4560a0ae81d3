// Package gatespec turns NodeRollout spec.gates (api/v1alpha1)
// into the judge's configuration and external gates. It is the one place that
// knows both shapes, so package health stays free of API types and the
// orchestrator never parses thresholds itself.
package gatespec

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/remote"
)

// DefaultInterval is how often a node is judged during its soak when
// spec.gates.interval is not set.
const DefaultInterval = time.Minute

// MinInterval and MinPrometheusTimeout are the least spec.gates.interval and
// spec.gates.prometheus.timeout accepted (the CRD's CEL rules say the
// same): a judge every nanosecond is a busy loop against the agents, a
// query bounded by a nanosecond never answers.
const (
	MinInterval          = time.Second
	MinPrometheusTimeout = 100 * time.Millisecond
)

// Interval returns spec.gates.interval or its default.
func Interval(g v1alpha1.GatesSpec) (time.Duration, error) {
	if g.Interval == nil {
		return DefaultInterval, nil
	}
	if err := g.Interval.Err(); err != nil {
		return 0, fmt.Errorf("gates.interval: %w", err)
	}
	if g.Interval.Duration < MinInterval {
		return 0, fmt.Errorf("gates.interval %s: must be a positive duration of at least %s, such as 1m", g.Interval.Duration, MinInterval)
	}
	return g.Interval.Duration, nil
}

// Config converts spec.gates into a validated health.Config with every default
// filled in. Errors name the field, like the API server's CEL messages.
func Config(g v1alpha1.GatesSpec) (health.Config, error) {
	c := health.Config{
		MinEvents:           uint64(max(g.MinEvents, 0)),
		MinNodeConnections:  uint64(max(g.MinNodeConnections, 0)),
		ConsecutiveFailures: int(g.ConsecutiveFailures),
		Inconclusive:        g.Inconclusive,
		ProbeOptional:       g.Probe == v1alpha1.ProbeOptional,
		NoControlGroup:      g.ControlGroup == v1alpha1.ControlGroupDisabled,
		Sequential:          g.Method == v1alpha1.MethodSequential,
		Counts:              map[health.Metric]health.CountThresholds{},
		Latency:             map[health.Metric]health.LatencyThresholds{},
	}
	switch g.ControlGroup {
	case "", v1alpha1.ControlGroupEnabled, v1alpha1.ControlGroupDisabled:
	default:
		return health.Config{}, fmt.Errorf("gates.controlGroup %q: must be Enabled or Disabled", g.ControlGroup)
	}
	switch g.Method {
	case "", v1alpha1.MethodSequential, v1alpha1.MethodFixed:
	default:
		return health.Config{}, fmt.Errorf("gates.method %q: must be Sequential or Fixed", g.Method)
	}
	if g.MinEvents < 0 {
		return health.Config{}, fmt.Errorf("gates.minEvents %d: must be at least 1", g.MinEvents)
	}
	if g.MinNodeConnections < 0 {
		return health.Config{}, fmt.Errorf("gates.minNodeConnections %d: must not be negative", g.MinNodeConnections)
	}
	if g.ConsecutiveFailures < 0 {
		return health.Config{}, fmt.Errorf("gates.consecutiveFailures %d: must be at least 1", g.ConsecutiveFailures)
	}
	var err error
	if c.Significance, err = decimal("gates.significance", g.Significance); err != nil {
		return health.Config{}, err
	}
	if c.CountDispersion, err = decimal("gates.countDispersion", g.CountDispersion); err != nil {
		return health.Config{}, err
	}
	if g.MaxSnapshotAge != nil {
		if err := g.MaxSnapshotAge.Err(); err != nil {
			return health.Config{}, fmt.Errorf("gates.maxSnapshotAge: %w", err)
		}
		if g.MaxSnapshotAge.Duration <= 0 {
			return health.Config{}, fmt.Errorf("gates.maxSnapshotAge %s: must be a positive duration such as 30s", g.MaxSnapshotAge.Duration)
		}
		c.MaxSnapshotAge = g.MaxSnapshotAge.Duration
	}
	if _, err := Interval(g); err != nil {
		return health.Config{}, err
	}
	for _, cg := range g.Counts {
		m := cg.Metric
		if _, dup := c.Counts[m]; dup {
			return health.Config{}, fmt.Errorf("gates.counts: metric %q listed twice", cg.Metric)
		}
		t := health.CountThresholds{Disabled: cg.Disabled}
		if t.MinRatio, err = decimal(fmt.Sprintf("gates.counts[%s].minRatio", cg.Metric), cg.MinRatio); err != nil {
			return health.Config{}, err
		}
		if cg.MinExcessPerSecond == "" {
			t.MinExcessPerSecond = health.Defaults().Counts[v1alpha1.MetricResetsReceived].MinExcessPerSecond
		} else if t.MinExcessPerSecond, err = decimal(fmt.Sprintf("gates.counts[%s].minExcessPerSecond", cg.Metric), cg.MinExcessPerSecond); err != nil {
			return health.Config{}, err
		}
		c.Counts[m] = t
	}
	for _, lg := range g.Latency {
		m := lg.Metric
		if _, dup := c.Latency[m]; dup {
			return health.Config{}, fmt.Errorf("gates.latency: metric %q listed twice", lg.Metric)
		}
		t := health.LatencyThresholds{Disabled: lg.Disabled}
		if t.MinRatio, err = decimal(fmt.Sprintf("gates.latency[%s].minRatio", lg.Metric), lg.MinRatio); err != nil {
			return health.Config{}, err
		}
		if lg.MinIncrease == nil {
			t.MinIncrease = health.Defaults().Latency[v1alpha1.MetricConnectLatency].MinIncrease
		} else if err := lg.MinIncrease.Err(); err != nil {
			return health.Config{}, fmt.Errorf("gates.latency[%s].minIncrease: %w", lg.Metric, err)
		} else {
			t.MinIncrease = lg.MinIncrease.Duration
		}
		c.Latency[m] = t
	}
	return health.NewConfig(c)
}

// decimal parses one of the spec's decimal strings; empty means "default" (0).
func decimal(field, s string) (float64, error) {
	if s == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s %q: must be a decimal number", field, s)
	}
	return f, nil
}

// Prometheus builds the Prometheus gate of spec.gates.prometheus, or nil when
// there is none. An address whose host addrs does not allow is an error
// that wraps health.ErrAddressRefused, and no request is ever sent to it.
// Call Validate on the gate at plan/apply time to have the server reject
// malformed queries before the rollout starts.
func Prometheus(g v1alpha1.GatesSpec, addrs remote.AddressPolicy, log *zap.Logger) (*remote.PrometheusGate, error) {
	p := g.Prometheus
	if p == nil {
		return nil, nil
	}
	cfg := remote.PrometheusGateConfig{Address: p.Address, Addresses: addrs, MaxConsecutiveErrors: int(p.MaxConsecutiveErrors), Logger: log}
	switch p.NoData {
	case "", v1alpha1.NoDataInconclusive, v1alpha1.NoDataPass, v1alpha1.NoDataFail:
	default:
		return nil, fmt.Errorf("gates.prometheus.noData %q: must be Inconclusive, Pass or Fail", p.NoData)
	}
	if p.MaxConsecutiveErrors < 0 {
		return nil, fmt.Errorf("gates.prometheus.maxConsecutiveErrors %d: must be at least 1", p.MaxConsecutiveErrors)
	}
	if p.Timeout != nil {
		if err := p.Timeout.Err(); err != nil {
			return nil, fmt.Errorf("gates.prometheus.timeout: %w", err)
		}
		if p.Timeout.Duration < MinPrometheusTimeout {
			return nil, fmt.Errorf("gates.prometheus.timeout %s: must be a positive duration of at least %s, such as 10s", p.Timeout.Duration, MinPrometheusTimeout)
		}
		cfg.Timeout = p.Timeout.Duration
	}
	for _, q := range p.Queries {
		th, err := strconv.ParseFloat(q.Threshold, 64)
		if err != nil {
			return nil, fmt.Errorf("gates.prometheus.queries[%s].threshold %q: must be a decimal number", q.Name, q.Threshold)
		}
		var above bool
		switch q.FailWhen {
		case v1alpha1.FailAbove:
			above = true
		case v1alpha1.FailBelow:
		default:
			return nil, fmt.Errorf("gates.prometheus.queries[%s].failWhen %q: must be Above or Below", q.Name, q.FailWhen)
		}
		noData := q.NoData
		if noData == "" {
			noData = p.NoData
		}
		cfg.Queries = append(cfg.Queries, remote.PromQuery{Name: q.Name, Query: q.Query, FailAbove: above, Threshold: th, NoData: noData})
	}
	return remote.NewPrometheusGate(cfg)
}

// Validate checks spec.gates the way the judge will read it, and asks the
// Prometheus server (if any) to evaluate every query once, so `nodewise plan`
// and `apply` reject a malformed PromQL query (errors.Is(err,
// health.ErrBadQuery)), an address addrs refuses (health.ErrAddressRefused,
// before any request) or an unreachable server before the rollout starts.
func Validate(ctx context.Context, g v1alpha1.GatesSpec, addrs remote.AddressPolicy, log *zap.Logger) error {
	if _, err := Config(g); err != nil {
		return err
	}
	prom, err := Prometheus(g, addrs, log)
	if err != nil || prom == nil {
		return err
	}
	return prom.Validate(ctx)
}
