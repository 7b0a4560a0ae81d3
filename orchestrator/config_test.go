package orchestrator

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestConfigDefaults: a config with only its REST config gets every
// default, and the defaults pass validation.
func TestConfigDefaults(t *testing.T) {
	c := Config{RESTConfig: &rest.Config{}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"Namespace", c.Namespace, "nodewise-system"},
		{"IstioNamespace", c.IstioNamespace, istio.DefaultNamespace},
		{"ZtunnelSwap", c.ZtunnelSwap, model.SwapSurge},
		{"Identity", c.Identity, host},
		{"LeaseDuration", c.LeaseDuration, 15 * time.Second},
		{"RenewDeadline", c.RenewDeadline, 10 * time.Second},
		{"RetryPeriod", c.RetryPeriod, 2 * time.Second},
		{"Resync", c.Resync, 2 * time.Second},
		{"EvictRetryDelay", c.EvictRetryDelay, 5 * time.Second},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if c.SkewPolicy == nil || c.Registry == nil || c.Logger == nil || c.Now == nil {
		t.Errorf("skew policy, registry, logger or clock left nil: %+v", c)
	}
}

// TestConfigKeepsWhatIsSet: set values are not overwritten by defaults.
func TestConfigKeepsWhatIsSet(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := Config{RESTConfig: &rest.Config{}, Namespace: "ops", IstioNamespace: "mesh", Identity: "me", ZtunnelSwap: model.SwapReplace,
		LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 5 * time.Second, Resync: time.Minute, EvictRetryDelay: 9 * time.Second, Registry: reg}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "ops" || c.IstioNamespace != "mesh" || c.Identity != "me" || c.ZtunnelSwap != model.SwapReplace ||
		c.LeaseDuration != 30*time.Second || c.Resync != time.Minute || c.EvictRetryDelay != 9*time.Second || c.Registry != reg {
		t.Errorf("config changed: %+v", c)
	}
}

// TestConfigRejects: every invalid field is reported, all at once.
func TestConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		want []string
	}{
		{"no REST config", Config{}, []string{"RESTConfig: required"}},
		{"swap kind", Config{RESTConfig: &rest.Config{}, ZtunnelSwap: "rolling"}, []string{`ZtunnelSwap: "rolling" is not surge or replace`}},
		{"renew past lease", Config{RESTConfig: &rest.Config{}, LeaseDuration: 5 * time.Second}, []string{"LeaseDuration 5s > RenewDeadline 10s > RetryPeriod 2s > 0 must hold"}},
		{"negative retry", Config{RESTConfig: &rest.Config{}, RetryPeriod: -time.Second}, []string{"must hold"}},
		{"evict retry too short", Config{RESTConfig: &rest.Config{}, EvictRetryDelay: time.Second}, []string{"EvictRetryDelay: 1s is below the 5s minimum"}},
		{"several", Config{ZtunnelSwap: "x", EvictRetryDelay: time.Second}, []string{"RESTConfig", "ZtunnelSwap", "EvictRetryDelay"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestNew: New validates the config, registers the metrics and builds both
// clients; a bad config, a registry that already holds the metrics, or a
// REST config the client refuses is an error.
func TestNew(t *testing.T) {
	reg := prometheus.NewRegistry()
	o, err := New(Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}, Identity: "a", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	if o.kube == nil || o.rollouts == nil || o.metrics == nil || o.log == nil || o.cfg.Namespace != "nodewise-system" {
		t.Errorf("orchestrator %+v: clients, metrics, log or defaults missing", o)
	}
	if _, err := New(Config{Identity: "a"}); err == nil || !strings.Contains(err.Error(), "orchestrator config: RESTConfig: required") {
		t.Errorf("no REST config: %v", err)
	}
	if _, err := New(Config{RESTConfig: &rest.Config{}, Identity: "b", Registry: reg}); err == nil || !strings.Contains(err.Error(), "registering metrics") {
		t.Errorf("metrics registered twice: %v", err)
	}
	// A rate limit with no burst: the client refuses to be built.
	if _, err := New(Config{RESTConfig: &rest.Config{Host: "https://127.0.0.1:1", QPS: 5}, Identity: "c"}); err == nil || !strings.Contains(err.Error(), "building the Kubernetes client") {
		t.Errorf("a QPS with no burst: %v", err)
	}
}

// TestPassPace: passes start at least minPass apart, or five times what the
// last one took.
func TestPassPace(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, minPass},
		{time.Millisecond, minPass},
		{100 * time.Millisecond, 500 * time.Millisecond},
	} {
		if got := passPace(tc.took); got != tc.want {
			t.Errorf("passPace(%s) = %s, want %s", tc.took, got, tc.want)
		}
	}
}
