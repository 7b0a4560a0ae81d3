// Command orchestrator runs nodewise's controllers: flags → config → run.
//
//	--controllers=noderollout   the NodeRollout controller (default)
//	--controllers=revisions     the RevisionMigration controller and the proxy inventory
//
// Each set campaigns for its own Lease, so each can run under its own
// ServiceAccount: the NodeRollout one may not write DaemonSets, the revision
// one must (to restart sidecar DaemonSets).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
)

func main() {
	var (
		cfg         orchestrator.Config
		agents      judgegate.AgentConfig
		kubeconfig  string
		controllers string
		istioNS     string
		skewMax     []string
		hold        string
		debug       bool
		issuer      issuerFlags
		notifyTo    notifyFlags
	)
	flag.StringVar(&controllers, "controllers", "noderollout", "controllers to run, comma-separated: noderollout, revisions")
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (empty: in-cluster)")
	flag.StringVar(&cfg.Namespace, "namespace", envOr("POD_NAMESPACE", "nodewise-system"), "namespace of the leader Leases")
	flag.StringVar(&cfg.Identity, "identity", os.Getenv("POD_NAME"), "leader-election identity (default: hostname)")
	flag.DurationVar(&cfg.LeaseDuration, "lease-duration", 0, "leader Lease duration (default 15s)")
	flag.DurationVar(&cfg.RenewDeadline, "renew-deadline", 0, "leader renew deadline (default 10s)")
	flag.DurationVar(&cfg.RetryPeriod, "retry-period", 0, "leader-election retry period (default 2s)")
	flag.DurationVar(&cfg.Resync, "resync", 0, "re-plan period without events (default 2s)")
	flag.DurationVar(&cfg.EvictRetryDelay, "evict-retry-delay", 0, "delay after a refused eviction (default and minimum 5s)")
	flag.StringVar(&cfg.MetricsAddr, "metrics-addr", ":8080", "address of /metrics and /healthz (empty: off)")
	flag.StringVar(&agents.CAFile, "agent-ca", "", "CA bundle of the node agents' serving certificates; with --agent-token-file it turns on the judge (default gate: readiness only)")
	flag.StringVar(&agents.TokenFile, "agent-token-file", "", "bearer token the node agents accept (with --agent-issuer: this pod's projected ServiceAccount token for audience nodewise-agent)")
	flag.BoolVar(&issuer.enabled, "agent-issuer", false, "sign the node agents' certificate requests (signer nodewise.io/agent-serving) from the CA in Secret <namespace>/nodewise-agent-ca, created and rotated here, and trust that CA instead of --agent-ca")
	flag.DurationVar(&issuer.caValidity, "agent-ca-validity", 0, "life of the agents' CA, rotated with a third left (default 8760h)")
	flag.DurationVar(&issuer.certValidity, "agent-cert-validity", 0, "life of each agent certificate, renewed at two thirds (default 168h)")
	flag.IntVar(&agents.Port, "agent-port", 9443, "the node agents' port on each node's InternalIP")
	flag.StringVar(&agents.ServerName, "agent-server-name", "", "name to verify in the agents' certificates (default: the node IP)")
	flag.StringVar(&notifyTo.webhook, "notify-webhook", notifyTo.defaultWebhook(), "webhook for halts, completions and canary verdicts (default $"+webhookEnv+"; empty: off)")
	flag.StringVar(&notifyTo.format, "notify-format", "slack", "webhook body: slack ({\"text\": ...}) or generic (the event as JSON)")
	flag.StringVar(&istioNS, "istio-namespace", istio.DefaultNamespace, "where istiod and its injector webhooks live (revisions controller)")
	flag.Func("skew-max-behind", "widen preflight's skew policy: component=minors (ztunnel, istio-cni, sidecar); repeatable", func(v string) error {
		skewMax = append(skewMax, v)
		return nil
	})
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, runConfig{orchestrator: cfg, agents: agents, kubeconfig: kubeconfig, controllers: controllers, istioNamespace: istioNS, skewMaxBehind: skewMax, issuer: issuer, notify: notifyTo}); err != nil {
		log.Error("orchestrator stopped", zap.Error(err))
		os.Exit(1)
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
