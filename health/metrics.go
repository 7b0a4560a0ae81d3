package health

import "github.com/prometheus/client_golang/prometheus"

// judgeMetrics are the judge's Prometheus metrics, registered on the registry
// JudgeConfig.Registry names (never the global one).
type judgeMetrics struct {
	judgements    *prometheus.CounterVec
	failedClosed  *prometheus.CounterVec
	gateQueryErrs prometheus.Counter
}

func newJudgeMetrics(reg prometheus.Registerer) (*judgeMetrics, error) {
	m := &judgeMetrics{
		judgements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodewise_judgements_total",
			Help: "Judgements of a node's soak against its baseline, by outcome (Pass, Fail, Inconclusive).",
		}, []string{"outcome"}),
		failedClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodewise_judge_failed_closed_total",
			Help: "Judgements failed because the judge could not trust its input, by cause (agent_unavailable, agent_stale, window, no_baseline).",
		}, []string{"cause"}),
		gateQueryErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodewise_gate_query_errors_total",
			Help: "External gate evaluations (Prometheus queries) that could not query their source.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.judgements, m.failedClosed, m.gateQueryErrs} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
