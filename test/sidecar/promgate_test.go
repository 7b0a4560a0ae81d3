package sidecar

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/test/promrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// fakeIstiod serves an istiod's /metrics as the real Prometheus scrapes it:
// istio_build{component="pilot"} and, while nacking, a
// pilot_total_xds_rejects{type="lds"} that grows by one every scrape.
func fakeIstiod(t *testing.T, nacking bool) string {
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# TYPE istio_build gauge\nistio_build{component=\"pilot\",tag=\"test\"} 1\n")
		if nacking {
			n++
			fmt.Fprintf(w, "# TYPE pilot_total_xds_rejects counter\npilot_total_xds_rejects{type=\"lds\"} %d\n", n)
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestBuiltInNACKGateHaltsCanary: with only spec.gates.prometheus.address
// set (no queries of the user's), a migration to a revision whose istiod
// keeps counting rejected LDS responses, as the real Prometheus scrapes it,
// halts at its canary wave with the counts in the reason and the table; the
// second wave's pods never move.
func TestBuiltInNACKGateHaltsCanary(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx := e.ctx
	e.namespace("nk-1", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "1"}, app{name: "web", replicas: 2})
	e.namespace("nk-2", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "2"}, app{name: "web", replicas: 2})
	e.allOn(2*time.Minute, "1.27.3", 2, "nk-1", "nk-2")
	before := podUIDs(t, ctx, e.c.Client, "nk-2")
	prom := promrig.Start(t,
		promrig.Target{Addr: fakeIstiod(t, false), Labels: map[string]string{"istio_io_rev": "1-27"}},
		promrig.Target{Addr: fakeIstiod(t, true), Labels: map[string]string{"istio_io_rev": "1-28"}}).URL
	// As in a cluster whose Prometheus scrapes istiod: the series exist
	// before the migration (without them the gate passes, saying so).
	pc, err := remote.NewPrometheus(remote.PrometheusGateConfig{Address: prom, Addresses: remote.AddressPolicy{Allow: []string{"127.0.0.1"}}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "both istiods scraped", func() (bool, error) {
		s, err := pc.Query(ctx, `count(istio_build{component="pilot"})`, time.Time{})
		return err == nil && len(s) == 1 && s[0].Value == 2, fmt.Errorf("%v %v", s, err)
	})
	e.controller(revisions.SpecGates(remote.AddressPolicy{Allow: []string{"127.0.0.1"}}, zaptest.NewLogger(t).Named("gates")))
	if _, err = e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "nk"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", Waves: tierWaves("1", "2"),
			RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
			Gates: &v1alpha1.GatesSpec{Prometheus: &v1alpha1.PrometheusGates{Address: prom,
				BuiltIn: &v1alpha1.BuiltInGates{Soak: &v1alpha1.Duration{Duration: 3 * time.Second}}}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := e.waitPhase("nk", 3*time.Minute, v1alpha1.MigrationHalted)
	t.Logf("halted: %s", rm.Status.Reason)
	if !strings.HasPrefix(rm.Status.Reason, "wave tier-1 failed its gate: revision 1-28: ") ||
		!strings.HasSuffix(rm.Status.Reason, " xDS rejects (lds) in the wave's soak, 0 on 1-27") {
		t.Fatalf("halt reason %q", rm.Status.Reason)
	}
	j := rm.Status.Waves[0].Judgement
	if j == nil || j.Outcome != string(health.Fail) || len(j.Rows) == 0 || j.Rows[0].Metric != revisions.MetricXDSRejects || !j.Rows[0].Regressed {
		t.Fatalf("canary judgement %+v", j)
	}
	if rm.Status.CurrentWave != 0 || rm.Status.Namespaces[1].Phase != v1alpha1.NamespacePending {
		t.Fatalf("the second wave started: %+v", rm.Status)
	}
	e.allOn(time.Minute, "1.28.1", 2, "nk-1")
	after := podUIDs(t, ctx, e.c.Client, "nk-2")
	for uid := range before {
		if !after[uid] {
			t.Fatalf("nk-2's pods changed after the halt: %v -> %v", before, after)
		}
	}
}
