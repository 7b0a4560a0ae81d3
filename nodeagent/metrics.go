package nodeagent

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodewise/nodewise/health/wire"
)

var podLabels = []string{"namespace", "pod", "side"}

// collector turns the current snapshot into Prometheus metrics on every
// scrape, so /metrics and /v1/snapshot never disagree.
type collector struct {
	snapshot func() (wire.Snapshot, error)
	// histograms: each pod side's three histograms too (87 of its 93 series).
	histograms bool

	resetsSent, resetsReceived, connects, accepts, failures, retransmits *prometheus.Desc
	connectLatency, srtt, ages                                           *prometheus.Desc
	scrapeErrors                                                         prometheus.Counter
}

func newCollector(snapshot func() (wire.Snapshot, error), histograms bool) *collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("nodewise_pod_tcp_"+name, help, podLabels, nil)
	}
	return &collector{
		snapshot:       snapshot,
		histograms:     histograms,
		resetsSent:     d("resets_sent_total", "TCP resets sent by sockets in the pod's network namespace."),
		resetsReceived: d("resets_received_total", "TCP resets received by sockets in the pod's network namespace."),
		connects:       d("connects_total", "Active opens that reached ESTABLISHED."),
		accepts:        d("accepts_total", "Passive opens that reached ESTABLISHED."),
		failures:       d("connect_failures_total", "Active opens that failed (all errno classes; /v1/snapshot splits them)."),
		retransmits:    d("retransmits_total", "Retransmitted segments."),
		connectLatency: d("connect_latency_seconds", "SYN_SENT to ESTABLISHED time of active opens (log2 buckets; the sum is estimated from bucket midpoints)."),
		srtt:           d("srtt_seconds", "Smoothed RTT sampled when a connection leaves ESTABLISHED (log2 buckets; the sum is estimated)."),
		ages:           d("connection_age_seconds", "Established connections by age now (a gauge histogram: it goes down as connections close)."),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodewise_agent_snapshot_errors_total",
			Help: "Snapshots that failed while serving /metrics.",
		}),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.resetsSent, c.resetsReceived, c.connects, c.accepts, c.failures, c.retransmits, c.connectLatency, c.srtt, c.ages} {
		ch <- d
	}
	c.scrapeErrors.Describe(ch)
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	defer c.scrapeErrors.Collect(ch)
	s, err := c.snapshot()
	if err != nil {
		c.scrapeErrors.Inc()
		return
	}
	for _, p := range s.Pods {
		lv := []string{p.Namespace, p.Name, string(p.Side)}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lv...)
		}
		counter(c.resetsSent, p.ResetsSent)
		counter(c.resetsReceived, p.ResetsReceived)
		counter(c.connects, p.Connects)
		counter(c.accepts, p.Accepts)
		var fails uint64
		for _, n := range p.ConnectFailures {
			fails += n
		}
		counter(c.failures, fails)
		counter(c.retransmits, p.Retransmits)
		if !c.histograms {
			continue
		}
		ch <- log2Histogram(c.connectLatency, p.ConnectLatency, lv)
		ch <- log2Histogram(c.srtt, p.SRTT, lv)
		ch <- ageHistogram(c.ages, p.ConnAges, lv)
	}
}

// log2Histogram exposes a log2 µs histogram with the upper bound of bucket
// i, 2^(i+1) µs, as its le.
func log2Histogram(d *prometheus.Desc, h wire.Log2Histogram, lv []string) prometheus.Metric {
	buckets := map[float64]uint64{}
	var count uint64
	var sum float64
	for i, n := range h.Buckets {
		count += n
		lo := 0.0
		if i > 0 {
			lo = math.Ldexp(1, i)
		}
		hi := math.Ldexp(1, i+1)
		sum += float64(n) * (lo + hi) / 2 / 1e6
		if i < len(h.Buckets)-1 {
			buckets[hi/1e6] = count
		}
	}
	return prometheus.MustNewConstHistogram(d, count, sum, buckets, lv...)
}

func ageHistogram(d *prometheus.Desc, ages []uint64, lv []string) prometheus.Metric {
	buckets := map[float64]uint64{}
	var count uint64
	for i, n := range ages {
		count += n
		if i < len(wire.AgeBucketBoundsSeconds) {
			buckets[wire.AgeBucketBoundsSeconds[i]] = count
		}
	}
	return prometheus.MustNewConstHistogram(d, count, 0, buckets, lv...)
}
