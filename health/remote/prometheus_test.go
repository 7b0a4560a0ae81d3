package remote

import (
	"strings"
	"testing"
	"time"
)

// rigBound is how long the tests wait for a real Prometheus's scrapes and
// rules (testkit.WaitFor): a bound on a broken rig, not a timing assertion.
const rigBound = time.Minute

// loopbackAllowed lets the clients reach a Prometheus on 127.0.0.1, which
// the default policy (cluster Services only) refuses.
var loopbackAllowed = AddressPolicy{Allow: []string{"127.0.0.1"}}

var qSuccess = PromQuery{Name: "success-rate", Query: `min by (service) (shop_request_success_ratio{node="$node"})`, Threshold: 0.99}

func TestNewPrometheusGateValidation(t *testing.T) {
	for _, c := range []struct {
		cfg  PrometheusGateConfig
		want string
	}{
		{PrometheusGateConfig{Address: "prometheus:9090", Queries: []PromQuery{qSuccess}}, "must be an http:// or https:// URL"},
		{PrometheusGateConfig{Address: "http://p.m.svc:9090"}, "at least one query"},
		{PrometheusGateConfig{Address: "http://p.m.svc:9090", Queries: []PromQuery{{Name: "Bad Name", Query: "up"}}}, "lower-case"},
		{PrometheusGateConfig{Address: "http://p.m.svc:9090", Queries: []PromQuery{qSuccess, qSuccess}}, "used twice"},
		{PrometheusGateConfig{Address: "http://p.m.svc:9090", Queries: []PromQuery{{Name: "x", Query: " "}}}, "must not be empty"},
		{PrometheusGateConfig{Address: "http://p.m.svc:9090", Queries: []PromQuery{qSuccess}, MaxConsecutiveErrors: -1}, "at least 1"},
		{PrometheusGateConfig{Address: "http://p.m.svc:9090", Queries: []PromQuery{{Name: "x", Query: "up", NoData: "Ignore"}}}, `noData "Ignore": must be Inconclusive, Pass or Fail`},
		{PrometheusGateConfig{Address: "http://p:9090", Queries: []PromQuery{qSuccess}}, "gate address not allowed"},
	} {
		if _, err := NewPrometheusGate(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
