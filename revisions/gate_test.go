package revisions

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/remote"
)

// A real health.PrometheusGate against a stand-in Prometheus API: the wave's
// namespaces reach the query, a bad success rate fails the wave, and an
// unreachable server holds it until MaxConsecutiveErrors, then fails it.
func TestExternalGatesPrometheus(t *testing.T) {
	var queries []string
	rate := "0.999"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rate == "down" {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		queries = append(queries, r.FormValue("query"))
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"destination_workload_namespace":"shop"},"value":[1700000000,"%s"]}]}}`, rate)
	}))
	defer srv.Close()
	pg, err := remote.NewPrometheusGate(remote.PrometheusGateConfig{
		Address: srv.URL, MaxConsecutiveErrors: 2, RetryMax: -1, Addresses: remote.AddressPolicy{Allow: []string{"127.0.0.1"}},
		Queries: []remote.PromQuery{{Name: "success-rate", Query: `caller_success{namespace=~"$node"}`, Threshold: 0.995}},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := ExternalGates(pg)
	in := WaveInput{Migration: "m", Wave: "canary", Namespaces: []string{"shop", "cart.v2"}}
	v, err := g.Judge(context.Background(), in)
	if err != nil || v.Outcome != health.Pass {
		t.Fatalf("healthy wave: %+v %v", v, err)
	}
	if len(queries) != 1 || !strings.Contains(queries[0], `namespace=~"^(shop|cart\.v2)$"`) {
		t.Fatalf("query sent: %q", queries)
	}
	re := regexp.MustCompile(WaveSubject(in.Namespaces))
	if !re.MatchString("cart.v2") || re.MatchString("cartXv2") || re.MatchString("shop2") {
		t.Fatal("wave subject matches the wrong namespaces")
	}
	rate = "0.97"
	if v, _ := g.Judge(context.Background(), in); v.Outcome != health.Fail || !strings.Contains(strings.Join(v.Reasons, ";"), "success-rate") {
		t.Fatalf("failing wave: %+v", v)
	}
	rate = "down"
	if v, _ := g.Judge(context.Background(), in); v.Outcome != health.Inconclusive {
		t.Fatalf("first error should hold the wave: %+v", v)
	}
	if v, _ := g.Judge(context.Background(), in); v.Outcome != health.Fail {
		t.Fatalf("second error in a row should fail the wave: %+v", v)
	}
}

// SpecGates fails a wave whose spec.gates.prometheus.address the policy
// refuses, without a request; allowed, the same spec queries the server, and
// an empty result holds the wave.
func TestSpecGatesAddressPolicy(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	defer srv.Close()
	spec := &v1alpha1.GatesSpec{Prometheus: &v1alpha1.PrometheusGates{Address: srv.URL,
		Queries: []v1alpha1.PrometheusQuery{{Name: "success-rate", Query: "up", FailWhen: v1alpha1.FailBelow, Threshold: "1"}}}}
	in := WaveInput{Migration: "m", Wave: "canary", Namespaces: []string{"shop"}, Spec: spec}
	v, err := SpecGates(remote.AddressPolicy{}, zap.NewNop()).Judge(context.Background(), in)
	if err != nil || v.Outcome != health.Fail || !strings.Contains(strings.Join(v.Reasons, ";"), "gate address not allowed") || hits.Load() != 0 {
		t.Fatalf("refused address: %+v %v, %d requests", v, err, hits.Load())
	}
	v, err = SpecGates(remote.AddressPolicy{Allow: []string{"127.0.0.1"}}, zap.NewNop()).Judge(context.Background(), in)
	if err != nil || v.Outcome != health.Inconclusive || !strings.Contains(strings.Join(v.Reasons, ";"), "query success-rate returned no samples") || hits.Load() != 1 {
		t.Fatalf("allowed address, empty result: %+v %v, %d requests", v, err, hits.Load())
	}
}

type trackingGate struct{ nodes []string }

func (g *trackingGate) Track(_ context.Context, nodes []string) { g.nodes = append(g.nodes, nodes...) }
func (g *trackingGate) Judge(context.Context, WaveInput) (health.Verdict, error) {
	return health.Verdict{Outcome: health.Pass}, nil
}

// Gates passes the controller's Track on to the gates that sample nodes, so
// an AgentGate combined with the spec's gates has samples from before a wave.
func TestGatesForwardTrack(t *testing.T) {
	a, b := &trackingGate{}, &trackingGate{}
	g := Gates(SpecGates(remote.AddressPolicy{}, zap.NewNop()), a, b)
	tr, ok := g.(NodeTracker)
	if !ok {
		t.Fatal("Gates(...) is not a NodeTracker: an AgentGate inside it would never be told the nodes")
	}
	tr.Track(context.Background(), []string{"n1", "n2"})
	if len(a.nodes) != 2 || len(b.nodes) != 2 {
		t.Errorf("tracked %v and %v, want [n1 n2] each", a.nodes, b.nodes)
	}
}
