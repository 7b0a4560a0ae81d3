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
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/buildinfo"
	"github.com/nodewise/nodewise/cmd/internal/usage"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/silence"
)

func main() {
	var help strings.Builder
	rc, err := parseFlags(os.Args[1:], &help)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Print(help.String())
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	case rc.showVersion:
		fmt.Println("orchestrator", buildinfo.Version())
		return
	case rc.checkAgents:
		if err := runCheckAgents(context.Background(), rc, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "orchestrator --check-agents:", err)
			os.Exit(1)
		}
		return
	}
	log, err := newLogger(rc.debug)
	if err != nil {
		fmt.Fprintln(os.Stderr, "orchestrator:", err)
		os.Exit(1)
	}
	rc.orchestrator.Logger = log
	rc.orchestrator.Registry = prometheus.NewRegistry()
	if err := buildinfo.Register(rc.orchestrator.Registry, "orchestrator"); err != nil {
		log.Error("registering the build metrics", zap.Error(err))
		os.Exit(1)
	}
	log.Info("starting", zap.String("version", buildinfo.Version()), zap.String("controllers", rc.controllers))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, rc); err != nil {
		log.Error("orchestrator stopped", zap.Error(err))
		os.Exit(1)
	}
}

// testOnlyFlags are hooks the crash tests use; --help leaves them out.
var testOnlyFlags = []string{"test-hold-after-persist"}

// parseFlags reads args into a runConfig; -h writes every flag but the
// test-only ones, with descriptions, to out and returns flag.ErrHelp.
func parseFlags(args []string, out io.Writer) (runConfig, error) {
	fs := flag.NewFlagSet("orchestrator", flag.ContinueOnError)
	fs.SetOutput(out)
	usage.Set(fs, "orchestrator runs nodewise's controllers: the NodeRollout controller (ztunnel and istio-cni,\n"+
		"node by node) and the RevisionMigration controller (sidecar namespaces in waves), each under its own Lease.", testOnlyFlags...)
	var (
		rc   runConfig
		hold string
		am   silence.Config
	)
	cfg, agents := &rc.orchestrator, &rc.agents
	cfg.Version = buildinfo.Version() // on the leader Lease, for `nodewise version`
	fs.StringVar(&rc.controllers, "controllers", "noderollout", "controllers to run, comma-separated: noderollout, revisions")
	fs.StringVar(&rc.kubeconfig, "kubeconfig", "", "kubeconfig path (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	fs.StringVar(&cfg.Namespace, "namespace", envOr("POD_NAMESPACE", "nodewise-system"), "namespace of the leader Leases and of spec.promotion's kubeconfig Secrets (default $POD_NAMESPACE, then nodewise-system)")
	fs.StringVar(&rc.agentNamespace, "agent-namespace", "", "namespace of the node agents' DaemonSet and ServiceAccount nodewise-agent, whose certificate requests --agent-issuer signs and whose pods --check-agents asks (default --namespace)")
	fs.StringVar(&cfg.Identity, "identity", os.Getenv("POD_NAME"), "leader-election identity (default $POD_NAME, then the hostname)")
	fs.DurationVar(&cfg.LeaseDuration, "lease-duration", 0, "leader Lease duration (default 15s)")
	fs.DurationVar(&cfg.RenewDeadline, "renew-deadline", 0, "leader renew deadline (default 10s)")
	fs.DurationVar(&cfg.RetryPeriod, "retry-period", 0, "leader-election retry period (default 2s)")
	fs.DurationVar(&cfg.Resync, "resync", 0, "re-plan period without events (default 2s)")
	fs.DurationVar(&cfg.EvictRetryDelay, "evict-retry-delay", 0, "delay after a refused eviction (default and minimum 5s)")
	fs.StringVar(&cfg.MetricsAddr, "metrics-addr", ":8080", "address of /metrics and /healthz (empty: off)")
	fs.StringVar(&cfg.Address, "advertise-address", "", "host:port where the other replicas reach --metrics-addr, written on the leader Leases: a standby takes over as soon as the leader's process is gone, not a lease duration later (default $POD_IP with --metrics-addr's port, or --metrics-addr when it names a host; neither: the Lease expires)")
	fs.StringVar(&rc.dashboardAddr, "dashboard-addr", "", "loopback address of the read-only dashboard, a port of its own, reached with kubectl port-forward (e.g. 127.0.0.1:3100; empty: off)")
	fs.Func("ztunnel-swap", "how ztunnel is swapped on each node: surge (default: make-before-break, a new pod Ready beside the old one) or replace (delete, then the DaemonSet recreates)", func(v string) error {
		cfg.ZtunnelSwap = model.SwapKind(v)
		return nil
	})
	fs.Func("kured-daemonset", "Kured's DaemonSet as namespace/name, whose lock annotation rollouts with spec.coordination.kuredLock take hold while a node is in flight (default kube-system/kured: Kured's --ds-namespace/--ds-name)", func(v string) error {
		ns, name, ok := strings.Cut(v, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("%q is not namespace/name", v)
		}
		cfg.KuredNamespace, cfg.KuredDaemonSet = ns, name
		return nil
	})
	fs.DurationVar(&cfg.KuredLockTTL, "kured-lock-ttl", 0, "TTL written in Kured's lock while nodewise holds it (by the API server's clock), renewed at a quarter of it: Kured takes the lock this long after an orchestrator that crashed last renewed it (default 10m, minimum 2s)")
	fs.StringVar(&agents.CAFile, "agent-ca", "", "CA bundle of the node agents' serving certificates; with --agent-token-file it turns on the judge (default gate: readiness only)")
	fs.StringVar(&agents.TokenFile, "agent-token-file", "", "bearer token the node agents accept (with --agent-issuer: this pod's projected ServiceAccount token for audience nodewise-agent)")
	fs.BoolVar(&rc.issuer.enabled, "agent-issuer", false, "sign the node agents' certificate requests (signer nodewise.io/agent-serving) from the CA in Secret <namespace>/nodewise-agent-ca, created and rotated here, and trust that CA instead of --agent-ca")
	fs.DurationVar(&rc.issuer.caValidity, "agent-ca-validity", 0, "life of the agents' CA, rotated with a third left (default 8760h)")
	fs.DurationVar(&rc.issuer.certValidity, "agent-cert-validity", 0, "life of each agent certificate, renewed by the agent at 70-90% of it (default 168h)")
	fs.StringVar(&rc.notify.webhook, "notify-webhook", rc.notify.defaultWebhook(), "webhook for halts, completions and canary verdicts (default $"+webhookEnv+"; empty: off)")
	fs.StringVar(&rc.notify.cluster, "notify-cluster", "", "the cluster's name, in every webhook message (required with a webhook)")
	fs.StringVar(&rc.notify.format, "notify-format", "slack", "webhook body: slack ({\"text\": ...}) or generic (the event as JSON)")
	fs.StringVar(&rc.notify.dashboard, "notify-dashboard-url", "", "the dashboard's address people open (nodewise dashboard, or its Service behind a proxy): each webhook message links its node's, rollout's or migration's page there (empty: no links)")
	fs.StringVar(&am.URL, "alertmanager-url", "", "Alertmanager's base URL: while a node is out, a silence over its alerts is held there (made before its cordon, extended, expired when the node is handed back; an Alertmanager that cannot be reached never holds up a node). Empty: off")
	fs.Func("alertmanager-matcher", "which of a node's alerts its silence mutes: an Alertmanager matcher (name=\"value\", !=, =~, !~) whose value may use {{.Node}} and {{.Rollout}}; repeatable, all must match (default "+silence.DefaultMatcher+")", func(v string) error {
		am.Matchers = append(am.Matchers, v)
		return nil
	})
	fs.StringVar(&am.BearerTokenFile, "alertmanager-token-file", "", "bearer token file sent to Alertmanager, read for each request (empty: none)")
	fs.DurationVar(&am.Extend, "alertmanager-silence-extend", 0, "how often a held silence is extended (default 1m)")
	fs.DurationVar(&am.TTL, "alertmanager-silence-ttl", 0, "how far past each extension a silence ends: how long it outlives an orchestrator that crashed (default 3x --alertmanager-silence-extend)")
	fs.IntVar(&agents.Port, "agent-port", 9443, "the node agents' port on each node's InternalIP")
	fs.StringVar(&agents.ServerName, "agent-server-name", "", "name to verify in the agents' certificates (default: the node IP)")
	fs.BoolVar(&agents.VerifyNodeName, "agent-verify-node-name", false, "verify that each agent's certificate names its node, as agentpki issues them (--agent-ca of the published bundle; always on with --agent-issuer)")
	fs.DurationVar(&agents.SampleEvery, "agent-sample-every", 30*time.Second, "how often the judge samples each node in flight and its control nodes; a baseline needs three samples, so a spec.baseline under three periods needs a shorter one")
	fs.DurationVar(&rc.waves.soak, "wave-soak", time.Minute, "with the node agents' credentials: how long each sidecar wave's pods are watched once Ready before the agents' evidence judges it")
	fs.DurationVar(&rc.waves.baseline, "wave-baseline", 5*time.Minute, "with the node agents' credentials: how far before each sidecar wave its workloads' baseline reaches")
	fs.StringVar(&rc.freshness.teamKey, "freshness-team-key", freshness.DefaultTeamKey, "label or annotation naming a workload's team in the nodewise_freshness_* metrics (the workload's first, then its namespace's)")
	fs.IntVar(&rc.freshness.maxMinorsBehind, "freshness-max-minors-behind", 1, "nodewise_freshness_lagging_pods counts proxies more minor releases behind the designated version than this")
	fs.DurationVar(&rc.freshness.maxAge, "freshness-max-age", 0, "nodewise_freshness_over_age_pods counts pods older than this (0: no age target)")
	fs.StringVar(&rc.istioNamespace, "istio-namespace", istio.DefaultNamespace, "where istiod and its injector webhooks live, and the NodeRollout targets (the only namespace where the orchestrator deletes and creates pods)")
	fs.Func("gate-address-allow", "hosts spec.gates.prometheus may query besides the cluster's Services (<svc>.<ns>.svc[.<cluster-domain>]): host names, IPs or *.<domain>, comma-separated; repeatable", func(v string) error {
		for _, p := range strings.Split(v, ",") {
			p = strings.TrimSpace(p)
			if err := remote.CheckHostPattern(p); err != nil {
				return err
			}
			rc.gateAddresses.Allow = append(rc.gateAddresses.Allow, p)
		}
		return nil
	})
	fs.StringVar(&rc.gateAddresses.ClusterDomain, "cluster-domain", remote.DefaultClusterDomain, "the cluster's DNS domain, for the Service hosts gates may query")
	fs.Func("skew-max-behind", "widen preflight's skew policy: component=minors (ztunnel, istio-cni, sidecar); repeatable", func(v string) error {
		rc.skewMaxBehind = append(rc.skewMaxBehind, v)
		return nil
	})
	fs.StringVar(&hold, "test-hold-after-persist", "", "test hook: block after first persisting this node step")
	fs.BoolVar(&rc.debug, "debug", false, "debug logging")
	fs.BoolVar(&rc.showVersion, "version", false, "print the version and exit")
	fs.BoolVar(&rc.checkAgents, "check-agents", false, "ask every node agent (pods "+agentSelector+" in --agent-namespace) for a snapshot with the --agent-* credentials, print each, and exit 1 unless all answer (the chart's helm test)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return rc, err
		}
		return rc, fmt.Errorf("%s (see orchestrator --help)", strings.SplitN(err.Error(), "\n", 2)[0])
	}
	if fs.NArg() > 0 {
		return rc, fmt.Errorf("unexpected argument %q (flags only; see orchestrator --help)", fs.Arg(0))
	}
	if agents.SampleEvery <= 0 {
		return rc, fmt.Errorf("--agent-sample-every must be positive, got %s (see orchestrator --help)", agents.SampleEvery)
	}
	if err := rc.gateAddresses.Validate(); err != nil {
		return rc, fmt.Errorf("--cluster-domain: %w", err)
	}
	if rc.agentNamespace == "" {
		rc.agentNamespace = cfg.Namespace
	}
	addr, err := advertiseAddress(cfg.Address, cfg.MetricsAddr, os.Getenv("POD_IP"))
	if err != nil {
		return rc, err
	}
	cfg.Address = addr
	cfg.HoldAfterPersist = v1alpha1.NodeState(hold)
	switch {
	case am.URL != "":
		cfg.Alertmanager = &am
	case len(am.Matchers) > 0 || am.BearerTokenFile != "" || am.Extend != 0 || am.TTL != 0:
		return rc, errors.New("the --alertmanager-* flags need --alertmanager-url (see orchestrator --help)")
	}
	return rc, nil
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

// advertiseAddress is where the other replicas reach this one's metrics
// server: --advertise-address, else the pod's IP with --metrics-addr's port,
// else --metrics-addr when it names a host; none without a metrics server
// (an address nothing answers on would tell a standby this replica is gone).
func advertiseAddress(flagAddr, metricsAddr, podIP string) (string, error) {
	if metricsAddr == "" {
		if flagAddr != "" {
			return "", errors.New("--advertise-address needs --metrics-addr: a standby reaches the leader there (see orchestrator --help)")
		}
		return "", nil
	}
	if flagAddr != "" {
		if _, _, err := net.SplitHostPort(flagAddr); err != nil {
			return "", fmt.Errorf("--advertise-address: %w (want host:port)", err)
		}
		return flagAddr, nil
	}
	host, port, err := net.SplitHostPort(metricsAddr)
	if err != nil {
		return "", fmt.Errorf("--metrics-addr: %w (want [host]:port)", err)
	}
	switch ip := net.ParseIP(host); {
	case port == "0": // known only once listening
	case podIP != "":
		return net.JoinHostPort(podIP, port), nil
	case host != "" && (ip == nil || !ip.IsUnspecified()):
		return metricsAddr, nil
	}
	return "", nil
}
