package demo

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/nodeagent"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
)

// sampleEvery is how often the judge's recorder samples a node in flight,
// and how often each agent keeps a snapshot in its history (the baselines
// the orchestrator reads back at preflight): short, because the demo's
// baselines and soaks last seconds, not minutes.
const sampleEvery = time.Second

// startAgents starts the real node agent of every simulated node (eBPF, on
// the node's InternalIP:port, certificates and token in dir). Call it before
// traffic starts: an agent counts only connections it saw being established.
func startAgents(ctx context.Context, dp DataPlane, c *cluster.Cluster, dir string, port int, log *zap.Logger) (*dataplane.Agents, error) {
	return startAgentsWith(ctx, dp, c, dir, port, log, nil)
}

// startAgentsWith is startAgents where creds, when not nil, gives each agent
// its certificate and caller check (dataplane.AgentsConfig.Credentials)
// instead of a test CA and token.
func startAgentsWith(ctx context.Context, dp DataPlane, c *cluster.Cluster, dir string, port int, log *zap.Logger, creds func(context.Context, dataplane.AgentNode, *nodeagent.Config) error) (*dataplane.Agents, error) {
	nodes := make([]dataplane.AgentNode, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		nodes = append(nodes, dataplane.AgentNode{Name: n.Name, IP: n.IP})
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	a, err := dp.StartAgents(ctx, dataplane.AgentsConfig{Nodes: nodes, Port: port, Dir: dir, Log: log, Credentials: creds, HistoryEvery: sampleEvery})
	if err != nil {
		return nil, fmt.Errorf("starting the node agents: %w", err)
	}
	return a, nil
}

// agentConfig is how the orchestrator reaches the agents: what
// cmd/orchestrator's --agent-ca, --agent-token-file and --agent-port carry.
func agentConfig(a *dataplane.Agents) *judgegate.AgentConfig {
	if a == nil {
		return nil
	}
	return &judgegate.AgentConfig{CAFile: a.CAFile, TokenFile: a.TokenFile, Port: a.Port, SampleEvery: sampleEvery}
}

// startOrchestrator runs the orchestrator in this process. With agents it
// gates every node on the judge and decides drain policy auto from the
// agents' connection ages, wired as cmd/orchestrator wires them
// (judgegate.Build, the recorder running beside the controller,
// judgegate.Agents); without, it gates on readiness and auto drains every node.
// Each opt changes the config first (a registry shared with other
// controllers, a metrics address).
func startOrchestrator(ctx context.Context, c *cluster.Cluster, log *zap.Logger, agents *judgegate.AgentConfig, swap model.SwapKind, opts ...func(*orchestrator.Config)) (stop func(), err error) {
	if log == nil {
		log = zap.NewNop()
	}
	cfg := orchestrator.Config{
		RESTConfig: c.Config, Namespace: "default", Identity: "nodewise-demo",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Resync: time.Second, Logger: log, Registry: prometheus.NewRegistry(), ZtunnelSwap: swap,
	}
	for _, o := range opts {
		o(&cfg)
	}
	var rec interface{ Run(context.Context) error }
	if agents != nil {
		gate, r, err := judgegate.Build(*agents, remote.AddressPolicy{}, c.Client, cfg.Registry, log)
		if err != nil {
			return nil, err
		}
		cfg.Gate, rec = gate, r
		// Drain policy auto reads the same agents' connection ages.
		if cfg.Agents, err = judgegate.Agents(*agents, c.Client, log); err != nil {
			return nil, err
		}
	}
	o, err := orchestrator.New(cfg)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	tasks := 1
	go func() {
		defer func() { done <- struct{}{} }()
		if err := o.Run(octx); err != nil {
			log.Error("orchestrator stopped", zap.Error(err))
		}
	}()
	if rec != nil {
		tasks++
		go func() {
			defer func() { done <- struct{}{} }()
			_ = rec.Run(octx)
		}()
	}
	return func() {
		cancel()
		for range tasks {
			<-done
		}
	}, nil
}

// judged gives a rollout a baseline, a soak and gates short enough for the
// demo: the recorder samples every second, so a 5 s baseline holds the three
// samples the judge's dispersion estimate needs.
func judged(nr *v1alpha1.NodeRollout, baseline, soak time.Duration, inconclusive v1alpha1.InconclusivePolicy) *v1alpha1.NodeRollout {
	nr.Spec.Baseline = &v1alpha1.Duration{Duration: baseline}
	nr.Spec.Soak = &v1alpha1.Duration{Duration: soak}
	nr.Spec.Gates.Interval = &v1alpha1.Duration{Duration: 3 * time.Second}
	nr.Spec.Gates.Inconclusive = inconclusive
	return nr
}

// busiestAmbientNode is the node running the most ambient app pods: the
// canary whose judgement has the most traffic to go on.
func busiestAmbientNode(ctx context.Context, c *cluster.Cluster) (string, error) {
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: "istio.io/dataplane-mode=ambient"})
	if err != nil {
		return "", fmt.Errorf("listing ambient namespaces: %w", err)
	}
	count := map[string]int{}
	for _, ns := range nss.Items {
		pods, err := c.Client.CoreV1().Pods(ns.Name).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", fmt.Errorf("listing pods of %s: %w", ns.Name, err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				count[p.Spec.NodeName]++
			}
		}
	}
	nodes := make([]string, 0, len(c.Nodes))
	for _, n := range c.Nodes {
		nodes = append(nodes, n.Name)
	}
	sort.SliceStable(nodes, func(i, j int) bool { return count[nodes[i]] > count[nodes[j]] })
	return nodes[0], nil
}
