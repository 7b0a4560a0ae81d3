package demo

import (
	"context"
	"fmt"
	"io"
	"net"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/dashboard"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
)

// startDashboard serves the dashboard of the demo's cluster on addr (or, when
// that is taken, on a free loopback port), prints its URL with the run's
// session token, and stops it when the returned func is called. With the
// node agents (nil: none) its node pages plot the judged windows from
// their history.
func startDashboard(ctx context.Context, nwc *v1alpha1.Client, kube kubernetes.Interface, agents *judgegate.AgentConfig, addr string, out io.Writer, log *zap.Logger) (func(), error) {
	token, err := dashboard.NewToken()
	if err != nil {
		return nil, err
	}
	cfg := dashboard.Config{Rollouts: nwc.NodeRollouts(), Migrations: nwc.RevisionMigrations(), Log: log,
		Token: token, LoginHint: "open the dashboard URL with ?token= that `nodewise demo` printed when it started",
		Freshness: &dashboard.FreshnessConfig{Client: kube, Target: freshness.Target{MaxMinorsBehind: 1}}}
	if agents != nil {
		history, err := judgegate.Agents(*agents, kube, log)
		if err != nil {
			return nil, err
		}
		cfg.History = history
	}
	srv, err := dashboard.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("listening for the dashboard: %w", err)
		}
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ctx, ln); err != nil && ctx.Err() == nil {
			log.Error("serving the dashboard", zap.Error(err))
		}
	}()
	fmt.Fprintf(out, "   dashboard: %s (the rollouts below, live; `nodewise dashboard` serves the same with the KUBECONFIG above)\n", srv.URL(ln.Addr().String()))
	return func() { stop(); <-done }, nil
}
