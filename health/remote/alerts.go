package remote

import (
	"context"
	"fmt"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// FiringAlerts reads the server's alerts (/api/v1/alerts) and returns the
// labels of each one firing (pending ones are left out). An error means
// the alerts could not be read: a caller that blocks on alerts fails closed.
func (c *Prometheus) FiringAlerts(ctx context.Context) ([]map[string]string, error) {
	res, err := c.api.Alerts(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading alerts from %s: %w", c.base.Redacted(), err)
	}
	var out []map[string]string
	for _, a := range res.Alerts {
		if a.State != promv1.AlertStateFiring {
			continue
		}
		ls := make(map[string]string, len(a.Labels))
		for k, v := range a.Labels {
			ls[string(k)] = string(v)
		}
		out = append(out, ls)
	}
	return out, nil
}
