package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/buildinfo"
	"github.com/nodewise/nodewise/dashboard"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/kubeconfig"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/podage"
	"github.com/nodewise/nodewise/revisions"
)

type runConfig struct {
	orchestrator   orchestrator.Config
	agents         judgegate.AgentConfig
	kubeconfig     string
	controllers    string
	istioNamespace string
	gateAddresses  remote.AddressPolicy // --gate-address-allow, --cluster-domain
	waves          waveJudge
	freshness      freshnessFlags
	skewMaxBehind  []string // "component=minors" overrides of skew.DefaultPolicy
	issuer         issuerFlags
	notify         notifyFlags
	dashboardAddr  string // --dashboard-addr: the read-only dashboard (empty: off)
	debug          bool
	showVersion    bool
	checkAgents    bool
	// agentNamespace is where the node agents' DaemonSet and ServiceAccount
	// live (--agent-namespace; default --namespace).
	agentNamespace string
}

// waveJudge is how the RevisionMigration controller's AgentGate watches each
// wave (--wave-soak, --wave-baseline).
type waveJudge struct {
	soak, baseline time.Duration
}

// freshnessFlags are the target the nodewise_freshness_* metrics measure
// against (--freshness-*), as `nodewise freshness` takes it.
type freshnessFlags struct {
	teamKey         string
	maxMinorsBehind int
	maxAge          time.Duration
}

// issuerFlags turn on agentpki's Signer: the agents' CA and certificates.
type issuerFlags struct {
	enabled                  bool
	caValidity, certValidity time.Duration
}

// agentIssuer starts the signer of the agents' certificates and points the
// agent client at its CA pool.
func agentIssuer(rc *runConfig, kube kubernetes.Interface, cfg orchestrator.Config) (task, error) {
	if rc.agents.CAFile != "" {
		return nil, fmt.Errorf("--agent-ca and --agent-issuer exclude each other: the issuer trusts the CA it keeps")
	}
	if rc.agents.TokenFile == "" {
		return nil, fmt.Errorf("--agent-issuer needs --agent-token-file (a projected ServiceAccount token for audience %s)", agentpki.DefaultAudience)
	}
	s, err := agentpki.NewSigner(agentpki.SignerConfig{
		Kube: kube, Namespace: cfg.Namespace, CAValidity: rc.issuer.caValidity, CertValidity: rc.issuer.certValidity,
		AgentUser: "system:serviceaccount:" + rc.agentNamespace + ":" + agentServiceAccount,
		Logger:    cfg.Logger.Named("agentpki"),
	})
	if err != nil {
		return nil, err
	}
	rc.agents.RootCAs = s.Pool
	rc.agents.VerifyNodeName = true // it issues each node's name; an address the node writes is no identity
	return s.Run, nil
}

// task is one long-running loop; run stops them all when one returns.
type task func(context.Context) error

func run(ctx context.Context, rc runConfig) error {
	set, err := parseControllers(rc.controllers)
	if err != nil {
		return err
	}
	if rc.issuer.enabled && !set["noderollout"] {
		return fmt.Errorf("--agent-issuer runs beside the noderollout controller; the revisions controller alone trusts the agents' CA bundle with --agent-ca (ConfigMap %s)", agentpki.BundleConfigMapName)
	}
	cfg := rc.orchestrator
	cfg.IstioNamespace = rc.istioNamespace // preflight checks the skew against istiod there
	if cfg.SkewPolicy, err = skew.DefaultPolicy().Override(rc.skewMaxBehind); err != nil {
		return fmt.Errorf("--skew-max-behind: %w", err)
	}
	if cfg.RESTConfig, err = kubeconfig.Load(rc.kubeconfig); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return err
	}
	log := cfg.Logger
	var tasks []task
	if set["noderollout"] {
		if rc.issuer.enabled {
			t, err := agentIssuer(&rc, kube, cfg)
			if err != nil {
				return err
			}
			tasks = append(tasks, t)
		}
		if rc.agents.Configured() {
			gate, rec, err := judgegate.Build(rc.agents, rc.gateAddresses, kube, cfg.Registry, log)
			if err != nil {
				return err
			}
			cfg.Gate = gate
			tasks = append(tasks, rec.Run)
			// Drain policy auto reads the same agents' connection ages.
			if cfg.Agents, err = judgegate.Agents(rc.agents, kube, log); err != nil {
				return err
			}
			log.Info("judging nodes through their agents", zap.Int("agentPort", rc.agents.Port))
		} else {
			log.Info("no --agent-ca/--agent-token-file: nodes are gated on readiness only, and drain policy auto drains every node")
		}
		o, err := orchestrator.New(cfg)
		if err != nil {
			return err
		}
		if t, err := notifier(rc.notify, kube, cfg); err != nil {
			return err
		} else if t != nil {
			tasks = append(tasks, t)
		}
		tasks = append(tasks, o.Run) // serves the metrics of every controller here
	}
	if set["revisions"] {
		revTasks, err := revisionTasks(kube, cfg, rc)
		if err != nil {
			return err
		}
		tasks = append(tasks, revTasks...)
		if !set["noderollout"] && cfg.MetricsAddr != "" {
			srv, err := leader.ServeMetrics(cfg.MetricsAddr, cfg.Identity, cfg.Registry, log, leader.APIReachable(kube))
			if err != nil {
				return err
			}
			defer srv.Close()
		}
	}
	if rc.dashboardAddr != "" {
		t, err := dashboardTask(rc.dashboardAddr, cfg, set["revisions"], rc.agents, kube)
		if err != nil {
			return err
		}
		tasks = append(tasks, t)
	}
	return runAll(ctx, tasks)
}

// dashboardTask serves the dashboard read-only on its own address, on every
// replica, with the orchestrator's own credentials: the NodeRollouts, and
// the RevisionMigrations when this process runs their controller (the
// noderollout controller's RBAC does not read them). It has no login of its
// own: it listens on the pod's loopback only, where `kubectl port-forward`
// reaches it after the API server has authenticated the user and
// authorised pods/portforward; no other pod can. With the node agents'
// credentials its node pages plot the judged windows from their history.
func dashboardTask(addr string, cfg orchestrator.Config, migrations bool, agents judgegate.AgentConfig, kube kubernetes.Interface) (task, error) {
	nwc, err := v1alpha1.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	dc := dashboard.Config{Rollouts: nwc.NodeRollouts(), ReadOnly: true, Log: cfg.Logger.Named("dashboard")}
	if migrations {
		dc.Migrations = nwc.RevisionMigrations()
	}
	if agents.Configured() {
		history, err := judgegate.Agents(agents, kube, cfg.Logger.Named("dashboard"))
		if err != nil {
			return nil, err
		}
		dc.History = history
	}
	srv, err := dashboard.New(dc)
	if err != nil {
		return nil, err
	}
	ln, err := listenDashboard(addr)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("serving the read-only dashboard", zap.String("address", ln.Addr().String()))
	return func(ctx context.Context) error { return srv.Serve(ctx, ln) }, nil
}

// listenDashboard listens on addr, which must be a loopback address.
func listenDashboard(addr string) (net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--dashboard-addr %s: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--dashboard-addr %s: the read-only dashboard has no login of its own and listens on loopback only (--dashboard-addr=127.0.0.1:%s); reach it with kubectl port-forward", addr, port)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--dashboard-addr %s: %w", addr, err)
	}
	return ln, nil
}

// revisionTasks are the proxy inventory (read-only, on every replica) and the
// RevisionMigration controller (only while holding its own Lease). With the
// node agents' credentials, each wave is judged by the agents' evidence too
// (revisions.AgentGate), beside the gates its spec.gates describes.
func revisionTasks(kube kubernetes.Interface, cfg orchestrator.Config, rc runConfig) ([]task, error) {
	log := cfg.Logger
	opts := inventory.Options{IstioNamespace: rc.istioNamespace}
	col, err := inventory.NewCollector(inventory.CollectorConfig{Client: kube, Registry: cfg.Registry, Log: log.Named("inventory"), Options: opts})
	if err != nil {
		return nil, err
	}
	nwc, err := v1alpha1.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	fresh, err := freshness.NewCollector(freshness.CollectorConfig{Client: kube, Registry: cfg.Registry, Log: log.Named("freshness"), Options: opts,
		Target: freshness.Target{MaxMinorsBehind: rc.freshness.maxMinorsBehind, MaxAge: rc.freshness.maxAge}, Keys: freshness.Keys{Team: rc.freshness.teamKey}})
	if err != nil {
		return nil, err
	}
	tasks := []task{col.Run, fresh.Run}
	gate := revisions.SpecGates(rc.gateAddresses, log.Named("gates"))
	if rc.agents.Configured() {
		agents, err := judgegate.Agents(rc.agents, kube, log)
		if err != nil {
			return nil, err
		}
		ag, err := revisions.NewAgentGate(revisions.AgentGateConfig{
			Source: agents, Soak: rc.waves.soak, Baseline: rc.waves.baseline, Log: log.Named("wavejudge"),
		})
		if err != nil {
			return nil, fmt.Errorf("--wave-soak/--wave-baseline: %w", err)
		}
		gate = revisions.Gates(gate, ag)
		tasks = append(tasks, ag.Run)
		log.Info("judging sidecar waves through the node agents", zap.Int("agentPort", rc.agents.Port))
	} else {
		log.Info("no --agent-ca/--agent-token-file: sidecar waves are gated on readiness and their spec.gates only")
	}
	dyn, err := dynamic.NewForConfig(cfg.RESTConfig)
	if err != nil {
		return nil, err
	}
	ctrl, err := revisions.New(revisions.Config{
		Kube: kube, Migrations: nwc.RevisionMigrations(), Log: log.Named("migration"), Registry: cfg.Registry,
		Gate: gate, Inventory: opts, Namespace: cfg.Namespace, Dynamic: dyn,
	})
	if err != nil {
		return nil, err
	}
	// The PodAgePolicy controller restarts workloads as the migrations do,
	// with the same rights, gate and Lease.
	notices, err := noticeSender(rc.notify, log)
	if err != nil {
		return nil, err
	}
	ages, err := podage.New(podage.Config{
		Kube: kube, Policies: nwc.PodAgePolicies(), Notifier: notices, Gate: gate, Inventory: opts,
		Namespace: cfg.Namespace, Log: log.Named("podage"), Registry: cfg.Registry,
	})
	if err != nil {
		return nil, err
	}
	lead := func(ctx context.Context) error {
		return leader.Run(ctx, leader.Election{
			Client: kube, Namespace: cfg.Namespace, Name: revisions.LeaseName, Identity: cfg.Identity,
			LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod, Log: log,
			Version: buildinfo.Version(), Address: cfg.Address,
		}, func(ctx context.Context) error { return runAll(ctx, []task{ctrl.Run, ages.Run}) })
	}
	return append(tasks, lead), nil
}

func parseControllers(s string) (map[string]bool, error) {
	set := map[string]bool{}
	for _, c := range strings.Split(s, ",") {
		switch c = strings.TrimSpace(c); c {
		case "noderollout", "revisions":
			set[c] = true
		default:
			return nil, fmt.Errorf("--controllers: unknown controller %q (want noderollout, revisions or both, comma-separated)", c)
		}
	}
	return set, nil
}

// runAll runs the tasks until ctx ends or one of them returns; the first
// error (or nil) ends them all.
func runAll(ctx context.Context, tasks []task) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(tasks))
	for _, t := range tasks {
		go func() { errs <- t(ctx) }()
	}
	err := <-errs
	cancel()
	for range len(tasks) - 1 {
		<-errs
	}
	return err
}
