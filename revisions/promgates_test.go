package revisions

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/test/promrig"
)

// fakeIstiod serves an istiod's /metrics: istio_build{component="pilot"} and
// pilot_total_xds_rejects{type}, whose series (as istiod's) appear only at
// the first rejection.
type fakeIstiod struct {
	rejects *prometheus.CounterVec
	srv     *httptest.Server
}

func newFakeIstiod(t *testing.T) *fakeIstiod {
	reg := prometheus.NewRegistry()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "istio_build", Help: "Istio component build info"}, []string{"component", "tag"})
	f := &fakeIstiod{rejects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pilot_total_xds_rejects", Help: "Total number of XDS responses from pilot rejected by proxy."}, []string{"type"})}
	reg.MustRegister(build, f.rejects)
	build.WithLabelValues("pilot", "1.28.1").Set(1)
	f.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(f.srv.Close)
	return f
}

// fakeSidecars serves one namespace's sidecars' Envoy cluster counters,
// moving at rps requests per second with the given share retried.
type fakeSidecars struct {
	mu         sync.Mutex
	retryShare float64
	srv        *httptest.Server
}

func newFakeSidecars(t *testing.T, ctx context.Context, rps, share float64) *fakeSidecars {
	reg := prometheus.NewRegistry()
	total := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_cluster_upstream_rq_total", Help: "upstream requests"}, []string{"cluster_name"})
	retry := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "envoy_cluster_upstream_rq_retry", Help: "upstream request retries"}, []string{"cluster_name"})
	reg.MustRegister(total, retry)
	f := &fakeSidecars{retryShare: share}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	// A scrape never lands between a tick's two counters.
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		metrics.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	const cluster = "outbound|8080||backend.shared.svc.cluster.local"
	total.WithLabelValues(cluster)
	retry.WithLabelValues(cluster)
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				f.mu.Lock()
				n := rps / 20
				total.WithLabelValues(cluster).Add(n)
				retry.WithLabelValues(cluster).Add(n * f.retryShare)
				f.mu.Unlock()
			}
		}
	}()
	return f
}

func (f *fakeSidecars) setShare(s float64) {
	f.mu.Lock()
	f.retryShare = s
	f.mu.Unlock()
}

func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// The built-in gates against the real Prometheus scraping fake istiods and
// sidecars, four migrations on one timeline: a baseline, the wave's start
// (Since), Ready a second later, then a 5 s soak.
//
//   - nack: 1-27 -> 1-28, and istiod 1-28 counts 12 LDS rejections during
//     the soak (its series born there): Fail, with the counts of both revisions.
//   - retries: the wave's retries per request rise ×5 while the control's
//     stay: Fail.
//   - cluster-wide: both sides' retries rise ×5: Pass.
//   - no data: no istiod and no sidecar series: Pass, saying so.
func TestBuiltInGatesAgainstRealPrometheus(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	i27, i28, i29 := newFakeIstiod(t), newFakeIstiod(t), newFakeIstiod(t)
	const base = 0.02
	side := map[string]*fakeSidecars{}
	targets := []promrig.Target{
		{Addr: hostOf(i27.srv), Labels: map[string]string{"istio_io_rev": "1-27"}},
		{Addr: hostOf(i28.srv), Labels: map[string]string{"istio_io_rev": "1-28"}},
		{Addr: hostOf(i29.srv), Labels: map[string]string{"istio_io_rev": "1-29"}},
	}
	for _, ns := range []string{"b-wave", "b-ctrl", "c-wave", "c-ctrl"} {
		side[ns] = newFakeSidecars(t, ctx, 400, base)
		targets = append(targets, promrig.Target{Addr: hostOf(side[ns].srv), Labels: map[string]string{"namespace": ns}})
	}
	addr := promrig.Start(t, targets...).URL
	pc, err := remote.NewPrometheus(remote.PrometheusGateConfig{Address: addr, Addresses: remote.AddressPolicy{Allow: []string{"127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		up, err := pc.Query(ctx, `sum(up)`, time.Time{})
		if err == nil && len(up) == 1 && up[0].Value == float64(len(targets)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("targets never all up: %v %v", up, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(6 * time.Second) // the baseline

	since := time.Now()
	side["b-wave"].setShare(5 * base)
	side["c-wave"].setShare(5 * base)
	side["c-ctrl"].setShare(5 * base)
	ready := since.Add(time.Second)
	spec := func() *v1alpha1.GatesSpec {
		return &v1alpha1.GatesSpec{Prometheus: &v1alpha1.PrometheusGates{Address: addr, BuiltIn: &v1alpha1.BuiltInGates{
			Soak: &v1alpha1.Duration{Duration: 5 * time.Second}, Baseline: &v1alpha1.Duration{Duration: 5 * time.Second}}}}
	}
	gates := SpecGates(remote.AddressPolicy{Allow: []string{"127.0.0.1"}}, zap.NewNop())
	waves := map[string]WaveInput{
		"nack":         {From: "1-27", To: "1-28", Namespaces: []string{"a-wave"}, Control: []string{"a-ctrl"}},
		"retries":      {From: "1-27", To: "1-29", Namespaces: []string{"b-wave"}, Control: []string{"b-ctrl"}},
		"cluster-wide": {From: "1-27", To: "1-29", Namespaces: []string{"c-wave"}, Control: []string{"c-ctrl"}},
		"no-data":      {From: "9-1", To: "9-2", Namespaces: []string{"d-wave"}, Control: []string{"d-ctrl"}},
	}
	for name, in := range waves {
		in.Migration, in.Wave, in.Since, in.ReadyAt, in.Spec = name, "canary", since, ready, spec()
		waves[name] = in
	}
	time.Sleep(time.Until(since.Add(2 * time.Second)))
	i28.rejects.WithLabelValues("lds").Add(12) // the series is born inside the soak
	// Still soaking: held, not judged.
	if v, err := gates.Judge(ctx, waves["nack"]); err != nil || v.Outcome != health.Inconclusive || !strings.Contains(v.Reasons[0], "soaking") {
		t.Fatalf("during the soak: %+v %v", v, err)
	}
	time.Sleep(time.Until(ready.Add(6 * time.Second)))

	judge := func(name string) health.Verdict {
		t.Helper()
		v, err := gates.Judge(ctx, waves[name])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %s %q", name, v.Outcome, v.Reasons)
		if v.Summary != nil {
			for _, r := range v.Summary.Rows {
				t.Logf("  %s %s: %s -> %s %s regressed=%t", r.Pod, r.Metric, r.Before, r.After, r.Note, r.Regressed)
			}
		}
		return v
	}
	t.Run("a revision whose istiod NACKs fails the wave", func(t *testing.T) {
		v := judge("nack")
		want := "revision 1-28: 12 xDS rejects (lds) in the wave's soak, 0 on 1-27"
		if v.Outcome != health.Fail || len(v.Reasons) != 1 || v.Reasons[0] != want {
			t.Fatalf("got %s %q, want Fail %q", v.Outcome, v.Reasons, want)
		}
		if v.Summary == nil || len(v.Summary.Rows) == 0 || !v.Summary.Rows[0].Regressed || v.Summary.Rows[0].After != "12 (lds)" {
			t.Fatalf("table: %+v", v.Summary)
		}
	})
	t.Run("retries rising x5 on the migrated side only fail the wave", func(t *testing.T) {
		v := judge("retries")
		if v.Outcome != health.Fail || len(v.Reasons) != 1 {
			t.Fatalf("got %s %q", v.Outcome, v.Reasons)
		}
		m := regexp.MustCompile(`^retry volume on 1-29: the wave's namespaces [0-9.]+ -> [0-9.]+ retries per request, against the not-yet-migrated namespaces' [0-9.]+ -> [0-9.]+ over the same interval: ×([0-9.]+) the control's rise, more than the ×2 allowed$`).FindStringSubmatch(v.Reasons[0])
		if m == nil {
			t.Fatalf("reason %q", v.Reasons[0])
		}
		if r := parseFloat(t, m[1]); r < 4 || r > 6 {
			t.Fatalf("rise ×%g against the control, want about ×5", r)
		}
		// istiod 1-29 is scraped and rejected nothing: that gate passed.
		if v.Summary.Rows[0].Metric != MetricXDSRejects || v.Summary.Rows[0].Regressed || v.Summary.Rows[0].After != "0" || v.Summary.Rows[0].Before != "0 on 1-27" {
			t.Fatalf("config acceptance row: %+v", v.Summary.Rows[0])
		}
	})
	t.Run("a cluster-wide retry rise on both sides passes", func(t *testing.T) {
		v := judge("cluster-wide")
		if v.Outcome != health.Pass || v.Summary == nil || len(v.Summary.Rows) != 2 {
			t.Fatalf("got %s %q %+v", v.Outcome, v.Reasons, v.Summary)
		}
		r := v.Summary.Rows[1]
		if r.Metric != MetricRetriesPerRequest || r.Regressed || r.Note != "" {
			t.Fatalf("retry row %+v", r)
		}
		// The migrated side did rise ×5: it passed because the control did too.
		if got := parseFloat(t, r.After); math.Abs(got-5*base) > base {
			t.Fatalf("migrated retries per request %g, want about %g", got, 5*base)
		}
	})
	t.Run("no data passes with a reason", func(t *testing.T) {
		v := judge("no-data")
		all := strings.Join(v.Reasons, "\n")
		if v.Outcome != health.Pass || len(v.Reasons) != 2 ||
			!strings.Contains(all, "config acceptance: Prometheus has no istiod series of revision 9-2") ||
			!strings.Contains(all, "retry volume: Prometheus has no envoy_cluster_upstream_rq_total of the wave's namespaces") {
			t.Fatalf("got %s %q", v.Outcome, v.Reasons)
		}
	})
	t.Run("turned off per migration", func(t *testing.T) {
		in := waves["nack"]
		in.Migration = "nack-off"
		in.Spec = spec()
		in.Spec.Prometheus.BuiltIn.Disabled = true
		if v, err := gates.Judge(ctx, in); err != nil || v.Outcome != health.Pass || len(v.Reasons) != 0 {
			t.Fatalf("disabled built-ins: %+v %v", v, err)
		}
	})
}

func parseFloat(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return f
}

func TestBuiltInOf(t *testing.T) {
	cfg, on, err := builtInOf(&v1alpha1.PrometheusGates{Address: "http://p:9090"})
	if err != nil || !on || cfg.soak != time.Minute || cfg.baseline != 5*time.Minute || cfg.revisionLabel != "istio_io_rev" ||
		cfg.namespaceLabel != "namespace" || cfg.maxRise != 2 || cfg.minExcess != 0.01 || cfg.minRequests != 100 || cfg.maxRejects != 0 || cfg.maxErrors != 3 {
		t.Fatalf("defaults %+v %t %v", cfg, on, err)
	}
	off := &v1alpha1.BuiltInGates{ConfigAcceptance: v1alpha1.ConfigAcceptanceGate{Disabled: true}, Retries: v1alpha1.RetryGate{Disabled: true}}
	if _, on, err := builtInOf(&v1alpha1.PrometheusGates{BuiltIn: off}); on || err != nil {
		t.Fatalf("both gates off: on=%t %v", on, err)
	}
	for _, bad := range []struct {
		b    v1alpha1.BuiltInGates
		want string
	}{
		{v1alpha1.BuiltInGates{Soak: &v1alpha1.Duration{Duration: -time.Second}}, "builtIn.soak"},
		{v1alpha1.BuiltInGates{ConfigAcceptance: v1alpha1.ConfigAcceptanceGate{RevisionLabel: "istio.io/rev"}}, "revisionLabel"},
		{v1alpha1.BuiltInGates{ConfigAcceptance: v1alpha1.ConfigAcceptanceGate{MaxRejects: -1}}, "maxRejects"},
		{v1alpha1.BuiltInGates{Retries: v1alpha1.RetryGate{MaxRise: "0.5"}}, "retries.maxRise"},
		{v1alpha1.BuiltInGates{Retries: v1alpha1.RetryGate{MinExcess: "x"}}, "retries.minExcess"},
	} {
		_, _, err := builtInOf(&v1alpha1.PrometheusGates{BuiltIn: &bad.b})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%+v: %v, want an error naming %s", bad.b, err, bad.want)
		}
		spec := v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 1},
			Gates: &v1alpha1.GatesSpec{Prometheus: &v1alpha1.PrometheusGates{Address: "http://p:9090", BuiltIn: &bad.b}}}
		if err := Validate(spec); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Validate %+v: %v", bad.b, err)
		}
	}
}

// compareRetries, the retry gate's decision, in a table.
func TestCompareRetries(t *testing.T) {
	cfg, _, _ := builtInOf(&v1alpha1.PrometheusGates{})
	side := func(base, soak float64) sideRates {
		return sideRates{baseRetries: base * 1000, baseRequests: 1000, retries: soak * 1000, requests: 1000}
	}
	for _, c := range []struct {
		name      string
		w, c      sideRates
		regressed bool
		note      string
	}{
		{"wave x5, control flat", side(0.02, 0.1), side(0.02, 0.02), true, ""},
		{"both x5", side(0.02, 0.1), side(0.02, 0.1), false, ""},
		{"wave x1.5: within maxRise", side(0.02, 0.03), side(0.02, 0.02), false, ""},
		{"nothing to a trickle: below minExcess", side(0, 0.005), side(0, 0), false, ""},
		{"nothing to 5%", side(0, 0.05), side(0, 0), true, ""},
		{"no baseline: against the control's level", sideRates{retries: 100, requests: 1000}, side(0.02, 0.02), true, "no baseline before the wave"},
		{"no control: against its own baseline", side(0.02, 0.1), sideRates{}, true, "no control traffic"},
		{"neither", sideRates{retries: 100, requests: 1000}, sideRates{}, false, "nothing to judge"},
	} {
		v := compareRetries(cfg, c.w, c.c)
		if v.regressed != c.regressed || !strings.Contains(v.note, c.note) {
			t.Errorf("%s: regressed=%t note %q (ratio %.2f), want regressed=%t and a note with %q", c.name, v.regressed, v.note, v.ratio, c.regressed, c.note)
		}
	}
}
