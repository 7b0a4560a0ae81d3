package judgegate

import (
	"context"
	"time"

	"github.com/nodewise/nodewise/health/remote"
)

// alertReadTimeout bounds one read of the alerts, without retries: the
// read runs in the planning pass, and an unreachable server holds every
// start anyway (the next pass reads again).
const alertReadTimeout = 5 * time.Second

// FiringAlerts implements gate.Gate: it reads the firing alerts of the Prometheus at address through
// the judge's client (its transport, TLS and address policy: a host the
// policy refuses is an error, so it holds starts).
func (g *Gate) FiringAlerts(ctx context.Context, address string) ([]map[string]string, error) {
	g.mu.Lock()
	c, ok := g.alertClients[address]
	g.mu.Unlock()
	if !ok {
		var err error
		c, err = remote.NewPrometheus(remote.PrometheusGateConfig{
			Address: address, Addresses: g.cfg.GateAddresses, Timeout: alertReadTimeout, RetryMax: -1, Logger: g.cfg.Logger,
		})
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		if g.alertClients == nil {
			g.alertClients = map[string]*remote.Prometheus{}
		}
		g.alertClients[address] = c
		g.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, alertReadTimeout)
	defer cancel()
	return c.FiringAlerts(ctx)
}
