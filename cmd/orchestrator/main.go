// Command orchestrator runs the NodeRollout controller: flags → orchestrator.Config → Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/apis/v1alpha1"
)

func main() {
	var (
		cfg        orchestrator.Config
		kubeconfig string
		hold       string
		debug      bool
	)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (empty: in-cluster)")
	flag.StringVar(&cfg.Namespace, "namespace", envOr("POD_NAMESPACE", "nodewise-system"), "namespace of the leader Lease")
	flag.StringVar(&cfg.Identity, "identity", os.Getenv("POD_NAME"), "leader-election identity (default: hostname)")
	flag.DurationVar(&cfg.LeaseDuration, "lease-duration", 0, "leader Lease duration (default 15s)")
	flag.DurationVar(&cfg.RenewDeadline, "renew-deadline", 0, "leader renew deadline (default 10s)")
	flag.DurationVar(&cfg.RetryPeriod, "retry-period", 0, "leader-election retry period (default 2s)")
	flag.DurationVar(&cfg.Resync, "resync", 0, "re-plan period without events (default 2s)")
	flag.DurationVar(&cfg.EvictRetryDelay, "evict-retry-delay", 0, "delay after a refused eviction (default and minimum 5s)")
	flag.StringVar(&cfg.MetricsAddr, "metrics-addr", ":8080", "address of /metrics and /healthz (empty: off)")
	flag.StringVar(&hold, "test-hold-after-persist", "", "test hook: block after first persisting this node step")
	flag.BoolVar(&debug, "debug", false, "debug logging")
	flag.Parse()

	log, err := newLogger(debug)
	if err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
	cfg.Logger = log
	cfg.HoldAfterPersist = v1alpha1.NodeState(hold)
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg.RESTConfig, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		log.Fatal("loading kubeconfig", zap.Error(err))
	}
	o, err := orchestrator.New(cfg)
	if err != nil {
		log.Fatal("configuring", zap.Error(err))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := o.Run(ctx); err != nil {
		log.Fatal("orchestrator stopped", zap.Error(err))
	}
}

func newLogger(debug bool) (*zap.Logger, error) {
	c := zap.NewProductionConfig()
	if debug {
		c.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	return c.Build()
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
