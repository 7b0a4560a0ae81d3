package health

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/test/promrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// promRig is a real Prometheus on loopback scraping a real /metrics endpoint.
type promRig struct {
	addr    string
	srv     *promrig.Server
	success *prometheus.GaugeVec
	rejects prometheus.Counter
}

func startPromRig(t *testing.T) *promRig {
	t.Helper()
	reg := prometheus.NewRegistry()
	r := &promRig{
		success: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "shop_request_success_ratio", Help: "caller-side success ratio"}, []string{"service", "node"}),
		rejects: prometheus.NewCounter(prometheus.CounterOpts{Name: "pilot_total_xds_rejects", Help: "istiod config rejections"}),
	}
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "shop_request_duration_seconds", Help: "caller-side latency",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}}, []string{"node"})
	reg.MustRegister(r.success, r.rejects, latency)
	r.success.WithLabelValues("cart", "node-a").Set(0.999)
	r.success.WithLabelValues("checkout", "node-b").Set(0.5) // another node: never judged here
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		for range 100 { // traffic between scrapes
			latency.WithLabelValues("node-a").Observe(0.008)
		}
		metrics.ServeHTTP(w, req)
	}))
	t.Cleanup(target.Close)

	r.srv = promrig.Start(t, promrig.Target{Addr: strings.TrimPrefix(target.URL, "http://")})
	r.addr = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

// rigBound is how long the tests wait for the rig's scrapes (testkit.WaitFor):
// a bound on a broken rig, not a timing assertion.
const rigBound = time.Minute

func (r *promRig) gate(t *testing.T, queries ...remote.PromQuery) *remote.PrometheusGate {
	t.Helper()
	g, err := remote.NewPrometheusGate(remote.PrometheusGateConfig{Address: "http://" + r.addr, Queries: queries, Timeout: 2 * time.Second,
		Addresses:    loopbackAllowed, // as an operator allows a Prometheus outside the cluster's Services
		RetryWaitMin: 10 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// loopbackAllowed lets the gates reach the rig's Prometheus on 127.0.0.1,
// which the default policy (cluster Services only) refuses.
var loopbackAllowed = remote.AddressPolicy{Allow: []string{"127.0.0.1"}}

var (
	qSuccess = remote.PromQuery{Name: "success-rate", Query: `min by (service) (shop_request_success_ratio{node="$node"})`, Threshold: 0.99}
	qP99     = remote.PromQuery{Name: "p99", Query: `histogram_quantile(0.99, sum by (le) (rate(shop_request_duration_seconds_bucket{node="$node"}[5s])))`, FailAbove: true, Threshold: 0.25}
	qRejects = remote.PromQuery{Name: "istiod-rejections", Query: `sum(pilot_total_xds_rejects)`, FailAbove: true, Threshold: 0}
)

func TestPrometheusGateAgainstRealServer(t *testing.T) {
	r := startPromRig(t)
	ctx := context.Background()
	all := r.gate(t, qSuccess, qP99, qRejects)
	testkit.WaitFor(t, rigBound, "the first scrapes", func() (bool, error) {
		s, err := all.Query(ctx, `rate(shop_request_duration_seconds_count[5s]) > 0`, time.Time{})
		return err == nil && len(s) > 0, err
	})

	t.Run("healthy passes", func(t *testing.T) {
		res, err := all.Check(ctx, "node-a")
		if err != nil || len(res.Failures) != 0 || len(res.NoData) != 0 {
			t.Fatalf("healthy: %v %+v", err, res)
		}
		if err := all.Validate(ctx); err != nil {
			t.Fatalf("valid queries: %v", err)
		}
		// The gate compared real numbers, not empty results.
		for _, q := range []remote.PromQuery{qSuccess, qP99} {
			s, err := all.Query(ctx, strings.ReplaceAll(q.Query, "$node", "node-a"), time.Time{})
			if err != nil || len(s) != 1 || s[0].Value <= 0 || s[0].Value > 1 {
				t.Fatalf("%s returned %v %v, want one sample in (0, 1]", q.Name, s, err)
			}
		}
	})

	t.Run("a query with no data is inconclusive by default", func(t *testing.T) {
		// A renamed metric returns no series; a ratio of nothing returns NaN.
		renamed := remote.PromQuery{Name: "renamed", Query: `min(shop_request_success_ratio_v2{node="$node"})`, Threshold: 0.99}
		nan := remote.PromQuery{Name: "nan-ratio", Query: `(shop_request_success_ratio{node="$node"} - shop_request_success_ratio{node="$node"}) / 0`, Threshold: 0.99}
		for _, q := range []remote.PromQuery{renamed, nan} {
			s, err := all.Query(ctx, strings.ReplaceAll(q.Query, "$node", "node-a"), time.Time{})
			if err != nil || (q.Name == "renamed") != (len(s) == 0) {
				t.Fatalf("%s returned %v %v: the rig no longer makes the case this tests", q.Name, s, err)
			}
		}
		res, err := r.gate(t, qSuccess, renamed, nan).Check(ctx, "node-a")
		if err != nil || len(res.Failures) != 0 || len(res.NoData) != 2 ||
			!strings.Contains(res.NoData[0], "query renamed returned no samples for node node-a") ||
			!strings.Contains(res.NoData[1], "query nan-ratio returned only NaN (1 samples) for node node-a") {
			t.Fatalf("no data: %v %+v", err, res)
		}
		j, in, _ := judgeScenario(t, 1, nil)
		in.External = []ExternalGate{r.gate(t, qSuccess, renamed)}
		if v := mustJudge(t, j, in); v.Outcome != Inconclusive || !hasReason(v, "gate prometheus: query renamed returned no samples for node") {
			t.Fatalf("judge with a renamed metric: %s %q, want Inconclusive naming the query", v.Outcome, v.Reasons)
		}
		// Without it, the same node passes: the hold was the empty query's.
		in.External = []ExternalGate{r.gate(t, qSuccess)}
		if v := mustJudge(t, j, in); v.Outcome != Pass {
			t.Fatalf("judge without the renamed query: %s %q", v.Outcome, v.Reasons)
		}
		// noData: Pass ignores the query, Fail fails on it.
		renamed.NoData, nan.NoData = v1alpha1.NoDataPass, v1alpha1.NoDataFail
		res, err = r.gate(t, renamed, nan).Check(ctx, "node-a")
		if err != nil || len(res.NoData) != 0 || len(res.Failures) != 1 || !strings.Contains(res.Failures[0], "query nan-ratio returned only NaN") || !strings.Contains(res.Failures[0], "noData: Fail") {
			t.Fatalf("noData Pass and Fail: %v %+v", err, res)
		}
		in.Gates.ConsecutiveFailures = 1
		in.External = []ExternalGate{r.gate(t, renamed, nan)}
		if v := mustJudge(t, j, in); v.Outcome != Fail || !hasReason(v, "gate prometheus: query nan-ratio returned only NaN") {
			t.Fatalf("judge with noData: Fail: %s %q", v.Outcome, v.Reasons)
		}
	})

	t.Run("malformed query is a clear error at plan time", func(t *testing.T) {
		bad := r.gate(t, qSuccess, remote.PromQuery{Name: "broken", Query: `sum(rate(shop_request_duration_seconds_count[5m])`, Threshold: 1})
		err := bad.Validate(ctx)
		if !errors.Is(err, remote.ErrBadQuery) || !strings.Contains(err.Error(), "queries[broken]") || !strings.Contains(err.Error(), "parse error") {
			t.Fatalf("malformed query: %v", err)
		}
		t.Logf("plan-time error: %v", err)
	})

	t.Run("threshold crossed fails", func(t *testing.T) {
		r.success.WithLabelValues("cart", "node-a").Set(0.9)
		r.rejects.Add(2)
		testkit.WaitFor(t, rigBound, "the new values to be scraped", func() (bool, error) {
			res, err := all.Check(ctx, "node-a")
			return err == nil && len(res.Failures) == 2, err
		})
		res, _ := all.Check(ctx, "node-a")
		fails := res.Failures
		if !strings.Contains(strings.Join(fails, "\n"), `query success-rate: 0.9{service="cart"} is below the threshold 0.99`) ||
			!strings.Contains(strings.Join(fails, "\n"), "query istiod-rejections: 2 is above the threshold 0") {
			t.Fatalf("failures %q", fails)
		}
		j, in, _ := judgeScenario(t, 1, nil)
		in.Gates.ConsecutiveFailures = 1
		in.External = []ExternalGate{all}
		v := mustJudge(t, j, in)
		if v.Outcome != Fail || !hasReason(v, "gate prometheus: query success-rate") {
			t.Fatalf("judge: %s %q", v.Outcome, v.Reasons)
		}
	})

	t.Run("server down fails after N errors", func(t *testing.T) {
		r.srv.Kill()
		j, in, _ := judgeScenario(t, 1, nil)
		in.External = []ExternalGate{all}
		var prev *v1alpha1.NodeJudgement
		for i, want := range []Outcome{Inconclusive, Inconclusive, Fail} {
			in.Previous = prev
			v := mustJudge(t, j, in)
			if v.Outcome != want || !hasReason(v, "connection refused") {
				t.Fatalf("evaluation %d with the server down: %s %q, want %s", i+1, v.Outcome, v.Reasons, want)
			}
			if want == Fail && !hasReason(v, "3 evaluations in a row could not query") {
				t.Fatalf("the failing reason must say how many errors in a row: %q", v.Reasons)
			}
			prev = v.Summary
		}
		if err := all.Validate(ctx); err == nil || errors.Is(err, remote.ErrBadQuery) {
			t.Fatalf("validation with the server down: %v", err)
		}
	})
}
