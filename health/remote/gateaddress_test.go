package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

func TestAddressPolicy(t *testing.T) {
	extra := AddressPolicy{ClusterDomain: "corp.example", Allow: []string{"prom.example.com", "*.metrics.example.net", "10.1.2.3"}}
	for _, c := range []struct {
		policy AddressPolicy
		url    string
		ok     bool
	}{
		{AddressPolicy{}, "http://prometheus.monitoring.svc:9090", true},
		{AddressPolicy{}, "http://prometheus.monitoring.svc.cluster.local:9090", true},
		{AddressPolicy{}, "https://Prometheus.Monitoring.SVC.cluster.local.", true},                 // case and the root dot
		{AddressPolicy{}, "http://prometheus-0.prometheus-operated.monitoring.svc:9090", true},      // a headless Service's pod
		{AddressPolicy{}, "http://prometheus.monitoring:9090", false},                               // short name: search list falls through to public DNS
		{AddressPolicy{}, "http://monitoring.svc:9090", false},                                      // no namespace
		{AddressPolicy{}, "http://a.b.c.d.svc:9090", false},                                         // too many labels for a Service
		{AddressPolicy{}, "http://prometheus.monitoring.svc.evil.com", false},                       // not the cluster domain
		{AddressPolicy{}, "http://prometheus.monitoring.svc.corp.example", false},                   // another cluster domain
		{AddressPolicy{}, "http://169.254.169.254/latest/meta-data", false},                         // cloud metadata
		{AddressPolicy{}, "http://127.0.0.1:9090", false},                                           // loopback
		{AddressPolicy{}, "http://[::1]:9090", false},                                               // loopback v6
		{extra, "http://prometheus.monitoring.svc.corp.example:9090", true},                         // its cluster domain
		{extra, "http://prometheus.monitoring.svc.cluster.local:9090", false},                       // not its cluster domain
		{extra, "https://prom.example.com", true},                                                   // exact, any port
		{extra, "https://prom.example.com:8443", true},                                              //
		{extra, "https://prom.example.com.evil.org", false},                                         // exact means exact
		{extra, "https://eu.metrics.example.net", true},                                             // wildcard
		{extra, "https://a.b.metrics.example.net", true},                                            // wildcard, deeper
		{extra, "https://metrics.example.net", false},                                               // the wildcard's domain itself
		{extra, "https://evilmetrics.example.net", false},                                           // label boundary
		{extra, "http://10.1.2.3:9090", true},                                                       // IP
		{extra, "http://10.1.2.4:9090", false},                                                      //
		{AddressPolicy{Allow: []string{"::1"}}, "http://[0:0:0:0:0:0:0:1]:9090", true},              // IPs compare as IPs
		{AddressPolicy{Allow: []string{"127.0.0.1"}}, "http://127.0.0.1.nip.io:9090", false},        // a name is not the IP
		{AddressPolicy{Allow: []string{"127.0.0.1"}}, "http://user:pw@127.0.0.1:9090/prefix", true}, //
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		err = c.policy.Check(u)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrAddressRefused)) {
			t.Errorf("%+v %s: %v, want allowed=%v", c.policy, c.url, err, c.ok)
		}
	}
}

func TestAddressPolicyValidate(t *testing.T) {
	for _, p := range []string{"", "*", "*.com", "http://prom.example.com", "prom.example.com:9090", "prom.example.com/x", "a.*.example.com", ".example.com", "a..b"} {
		if err := CheckHostPattern(p); err == nil {
			t.Errorf("pattern %q accepted", p)
		}
	}
	for _, p := range []string{"prom.example.com", "*.example.com", "10.0.0.1", "::1", "localhost"} {
		if err := CheckHostPattern(p); err != nil {
			t.Errorf("pattern %q: %v", p, err)
		}
	}
	if err := (AddressPolicy{ClusterDomain: "cluster.local/"}).Validate(); err == nil {
		t.Error("bad cluster domain accepted")
	}
}

// countingProm is a stand-in Prometheus answering every query with the
// scalar 1, counting the requests it gets.
func countingProm(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[0,"1"]}}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// A gate whose address the policy refuses is never built, so it sends no
// request; the error names the host and what is allowed.
func TestPrometheusGateRefusesAddress(t *testing.T) {
	srv, hits := countingProm(t)
	_, err := NewPrometheusGate(PrometheusGateConfig{Address: srv.URL, Queries: []PromQuery{qSuccess}})
	if !errors.Is(err, ErrAddressRefused) || !strings.Contains(err.Error(), `host "127.0.0.1"`) ||
		!strings.Contains(err.Error(), "gates.prometheus.address") || !strings.Contains(err.Error(), "--gate-address-allow") {
		t.Fatalf("loopback with the default policy: %v", err)
	}
	if hits.Load() != 0 {
		t.Fatalf("a refused address got %d requests", hits.Load())
	}
}

// A redirect is a request to another host: the allowed server redirecting
// to a host the policy refuses gets an error, and the other host nothing.
func TestPrometheusGateRefusesRedirect(t *testing.T) {
	other, elsewhere := countingProm(t)
	otherURL, _ := url.Parse(other.URL)
	target := "http://localhost:" + otherURL.Port() // same server, a host name the policy does not list
	var redirect atomic.Bool
	redirect.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if redirect.Load() {
			http.Redirect(w, r, target+r.URL.RequestURI(), http.StatusFound)
			return
		}
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"scalar","result":[0,"1"]}}`))
	}))
	defer srv.Close()
	g, err := NewPrometheusGate(PrometheusGateConfig{Address: srv.URL, Addresses: loopbackAllowed, RetryMax: -1,
		Queries: []PromQuery{{Name: "up", Query: "1", Threshold: 0.5}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.Check(context.Background(), "node-a")
	if !errors.Is(err, ErrAddressRefused) || !strings.Contains(err.Error(), `host "localhost"`) {
		t.Fatalf("redirect to a refused host: %v", err)
	}
	if elsewhere.Load() != 0 {
		t.Fatalf("the refused host got %d requests", elsewhere.Load())
	}
	redirect.Store(false) // the same gate, no redirect: it works
	if res, err := g.Check(context.Background(), "node-a"); err != nil || len(res.Failures)+len(res.NoData) != 0 {
		t.Fatalf("no redirect: %+v %v", res, err)
	}
}
