package metrics

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/rest"
)

// Metrics are the orchestrator's Prometheus metrics, registered in an injected registry.
type Metrics struct {
	NodesByState *prometheus.GaugeVec
	StepSeconds  *prometheus.HistogramVec
	Halts        *prometheus.CounterVec
	Halted       *prometheus.GaugeVec
	// NodeState is 1 for each node of a rollout that is in a step or
	// Failed, labelled with that state: the per-node series of the rollout
	// dashboard. Pending, Done, Skipped and RolledBack nodes have none, so a
	// rollout has at most its parallelism plus its failures, whatever its size.
	NodeState   *prometheus.GaugeVec
	APIRequests *prometheus.CounterVec
	IsLeader    prometheus.Gauge
	// Passes counts reconcile passes by kind: full (every node observed
	// and planned), views (an event's pass where a changed node moves the
	// plan: planned from the kept views, only the changed nodes' rebuilt)
	// and skipped (an event's pass whose changed nodes cannot change the
	// plan, planner.Unmoved: their views rebuilt, nothing planned, nothing
	// written).
	Passes *prometheus.CounterVec
	// NodeViews counts the node views the passes built: a full pass builds
	// one per node, an event's pass one per changed node.
	NodeViews prometheus.Counter
	// NotOnDelete is 1 for each data-plane DaemonSet (ztunnel, istio-cni)
	// in the Istio namespace whose updateStrategy is not OnDelete, 0 for
	// one that is: the DaemonSet controller, not nodewise, replaces its
	// pods. Watched whether or not a rollout runs.
	NotOnDelete *prometheus.GaugeVec
}

// NewMetrics declares every metric once and registers it in reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		NodesByState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodewise_rollout_nodes", Help: "Nodes of each NodeRollout by state.",
		}, []string{"rollout", "state"}),
		StepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nodewise_rollout_step_duration_seconds", Help: "Time a node spent in each rollout step.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}, []string{"step"}),
		Halts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodewise_rollout_halts_total", Help: "Rollout halts by reason.",
		}, []string{"reason"}),
		Halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodewise_rollout_halted", Help: "1 while the NodeRollout is Halted (waiting for a person), else 0.",
		}, []string{"rollout"}),
		NodeState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodewise_rollout_node_state", Help: "1 for each node of a NodeRollout in a step or Failed, by state (other nodes have no series).",
		}, []string{"rollout", "node", "state"}),
		APIRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodewise_api_requests_total", Help: "Kubernetes API requests the orchestrator made, by verb and resource.",
		}, []string{"verb", "resource"}),
		IsLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodewise_orchestrator_leader", Help: "1 while this replica holds the leader Lease.",
		}),
		Passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodewise_reconcile_passes_total", Help: "Reconcile passes by kind: full (every node observed and planned), views (an event's changed node moved the plan: planned from the kept node views, only the changed ones built), skipped (an event's changed nodes could not change the plan: only their views built).",
		}, []string{"kind"}),
		NodeViews: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nodewise_reconcile_node_views_total", Help: "Node views the reconcile passes built (one per node in a full pass, one per changed node in an event's pass).",
		}),
		NotOnDelete: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodewise_dataplane_not_ondelete", Help: "1 for each data-plane DaemonSet (ztunnel, istio-cni) in the Istio namespace whose updateStrategy is not OnDelete (the DaemonSet controller replaces its pods, not nodewise), 0 when it is OnDelete.",
		}, []string{"namespace", "daemonset"}),
	}
	for _, c := range []prometheus.Collector{m.NodesByState, m.StepSeconds, m.Halts, m.Halted, m.NodeState, m.APIRequests, m.IsLeader, m.Passes, m.NodeViews, m.NotOnDelete} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// PruneRollouts deletes the series of every rollout not in live (the
// per-rollout gauges: nodes by state, halted, per-node state), so a
// deleted NodeRollout's series end with it rather than at the next restart.
func (m *Metrics) PruneRollouts(live map[string]bool) {
	for _, name := range m.rollouts() {
		if !live[name] {
			l := prometheus.Labels{"rollout": name}
			m.NodesByState.DeletePartialMatch(l)
			m.Halted.DeletePartialMatch(l)
			m.NodeState.DeletePartialMatch(l)
		}
	}
}

// rollouts are the rollouts that have a series in a per-rollout gauge.
func (m *Metrics) rollouts() []string {
	ch := make(chan prometheus.Metric)
	go func() {
		m.NodesByState.Collect(ch)
		m.Halted.Collect(ch)
		m.NodeState.Collect(ch)
		close(ch)
	}()
	seen := map[string]bool{}
	var out []string
	for metric := range ch {
		var d dto.Metric
		if metric.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "rollout" && !seen[l.GetValue()] {
				seen[l.GetValue()] = true
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// CountRequests wraps cfg's transport so every request is counted by verb and resource.
func (m *Metrics) CountRequests(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			verb, res := classify(r)
			m.APIRequests.WithLabelValues(verb, res).Inc()
			return rt.RoundTrip(r)
		})
	})
	return c
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// classify maps a request to a Kubernetes verb (get, list, watch, create,
// update, patch, delete) and resource[/subresource].
func classify(r *http.Request) (verb, resource string) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return strings.ToLower(r.Method), "other"
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:] // namespaced resource; "namespaces/<ns>" alone is a namespace
	}
	named := len(parts) >= 2
	resource = "other"
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	switch r.Method {
	case http.MethodGet:
		switch {
		case r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	default:
		verb = strings.ToLower(r.Method)
	}
	return verb, resource
}
