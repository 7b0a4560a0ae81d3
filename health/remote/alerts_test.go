package remote

import (
	"context"
	"testing"

	"github.com/nodewise/nodewise/test/promrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// FiringAlerts against a real Prometheus whose rules fire one alert (and
// keep another inactive): it returns the firing one with its labels, and an
// error once the server is gone (callers fail closed on it).
func TestFiringAlertsAgainstRealServer(t *testing.T) {
	srv := promrig.StartWithRules(t, `groups:
  - name: maintenance
    rules:
      - alert: MaintenanceFreeze
        expr: vector(1)
        labels: {team: sre}
      - alert: NeverFires
        expr: vector(1) == 2
`)
	c, err := NewPrometheus(PrometheusGateConfig{Address: srv.URL, Addresses: loopbackAllowed, RetryMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	var firing []map[string]string
	testkit.WaitFor(t, rigBound, "the rule's alert to fire", func() (bool, error) {
		firing, err = c.FiringAlerts(context.Background())
		return err == nil && len(firing) > 0, nil
	})
	if len(firing) != 1 || firing[0]["alertname"] != "MaintenanceFreeze" || firing[0]["team"] != "sre" {
		t.Fatalf("firing %v, want MaintenanceFreeze{team=sre} alone", firing)
	}
	srv.Kill()
	if _, err := c.FiringAlerts(context.Background()); err == nil {
		t.Fatal("no error reading alerts from a server that is gone")
	}
}
