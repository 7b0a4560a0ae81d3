package demo

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/nodeagent"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
	"github.com/nodewise/nodewise/test/chart"
	"github.com/nodewise/nodewise/test/testkit"
)

// chartAgents installs nodewise from its Helm chart (helm template, then a
// server-side apply) and wires the judge as the chart does, with nothing
// made by hand: the orchestrator's signer issues every node's real eBPF
// agent a serving certificate for that node from the agent's own
// CertificateSigningRequest (made as the agent pod's ServiceAccount, with the
// chart's RBAC), and the orchestrator presents its ServiceAccount token for
// audience nodewise-agent, which each agent admits by TokenReview. The
// orchestrator and the agents run in this process, as the demo's do, so the
// chart.s controller replicas are scaled to zero.
func chartAgents(t *testing.T) wireAgents {
	return func(ctx context.Context, dp *dataplane.DataPlane, c *cluster.Cluster) (*dataplane.Agents, *judgegate.AgentConfig, error) {
		objs, err := chart.Template(ctx, "createNamespace=true", "orchestrator.replicas=0", "revisions.replicas=0", "probe.enabled=false")
		if err != nil {
			return nil, nil, err
		}
		if err := chart.EnsureNamespace(ctx, c.Client, cluster.IstioNamespace); err != nil {
			return nil, nil, err
		}
		if err := chart.Apply(ctx, c.Config, objs); err != nil {
			return nil, nil, err
		}
		in := chart.Installed{Config: c.Config, Client: c.Client}
		if err := waitAgentPods(ctx, c, len(c.Nodes)); err != nil {
			return nil, nil, err
		}
		tok, err := in.Token(ctx, "nodewise-orchestrator", nil, nil)
		if err != nil {
			return nil, nil, err
		}
		orchKube, err := in.ClientAs(tok)
		if err != nil {
			return nil, nil, err
		}
		signer, err := agentpki.NewSigner(agentpki.SignerConfig{Kube: orchKube, Namespace: chart.Namespace, AgentUser: chart.AgentUser, Every: 200 * time.Millisecond, Logger: testLog(t)})
		if err != nil {
			return nil, nil, err
		}
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- signer.Run(sctx) }()
		t.Cleanup(func() { stop(); <-done })
		projected, err := in.Token(ctx, "nodewise-orchestrator", nil, []string{agentpki.DefaultAudience})
		if err != nil {
			return nil, nil, err
		}
		tokenFile := filepath.Join(t.TempDir(), "agent-token")
		if err := os.WriteFile(tokenFile, []byte(projected+"\n"), 0o600); err != nil {
			return nil, nil, err
		}
		port := testkit.FreePort(t, c.Nodes[0].IP)
		agents, err := startAgentsWith(ctx, dp, c, t.TempDir(), port, testLog(t), func(ctx context.Context, n dataplane.AgentNode, cfg *nodeagent.Config) error {
			return in.AgentCredentials(ctx, n.Name, []net.IP{net.ParseIP(n.IP)}, cfg, testLog(t))
		})
		if err != nil {
			return nil, nil, err
		}
		if agents.CAFile != "" || agents.TokenFile != "" {
			return nil, nil, fmt.Errorf("the agents were given the test CA (%q) or token (%q), not the chart's credentials", agents.CAFile, agents.TokenFile)
		}
		if err := revisionsReadAgents(ctx, in, c, port, t.TempDir()); err != nil {
			return nil, nil, err
		}
		return agents, &judgegate.AgentConfig{RootCAs: signer.Pool, TokenFile: tokenFile, Port: port, SampleEvery: sampleEvery}, nil
	}
}

// revisionsReadAgents reads every node's agent as the chart's revisions
// controller does to judge sidecar waves: with its own ServiceAccount token
// for audience nodewise-agent (which each agent's TokenReview must admit),
// the trust bundle of ConfigMap nodewise-agent-ca-bundle written to a file as
// the pod mounts it, and its RBAC's nodes get for each InternalIP. The
// agent's own ServiceAccount, with the same audience, is refused.
func revisionsReadAgents(ctx context.Context, in chart.Installed, c *cluster.Cluster, port int, dir string) error {
	cm, err := c.Client.CoreV1().ConfigMaps(chart.Namespace).Get(ctx, agentpki.BundleConfigMapName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the orchestrator's signer published no trust bundle: %w", err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, []byte(cm.Data["ca.crt"]), 0o600); err != nil {
		return err
	}
	// client presents sa's token to the agents and finds them with kube.
	client := func(sa string, kube kubernetes.Interface) (*remote.Agent, error) {
		projected, err := in.Token(ctx, sa, nil, []string{agentpki.DefaultAudience})
		if err != nil {
			return nil, err
		}
		tokenFile := filepath.Join(dir, sa+"-token")
		if err := os.WriteFile(tokenFile, []byte(projected+"\n"), 0o600); err != nil {
			return nil, err
		}
		return judgegate.Agents(judgegate.AgentConfig{CAFile: caFile, TokenFile: tokenFile, Port: port}, kube, zap.NewNop())
	}
	tok, err := in.Token(ctx, "nodewise-revisions", nil, nil)
	if err != nil {
		return err
	}
	kube, err := in.ClientAs(tok)
	if err != nil {
		return err
	}
	revisions, err := client("nodewise-revisions", kube)
	if err != nil {
		return err
	}
	for _, n := range c.Nodes {
		if _, err := revisions.Snapshot(ctx, n.Name); err != nil {
			return fmt.Errorf("the revisions controller, wired as the chart wires it, cannot read the agent of %s: %w", n.Name, err)
		}
	}
	other, err := client("nodewise-agent", c.Client)
	if err != nil {
		return err
	}
	if _, err := other.Snapshot(ctx, c.Nodes[0].Name); err == nil || !strings.Contains(err.Error(), "rejected the token") {
		return fmt.Errorf("the agents admitted ServiceAccount nodewise-agent (%v): the admission check shows nothing", err)
	}
	return nil
}

// waitAgentPods waits until the chart's agent DaemonSet has a Ready pod on every node.
func waitAgentPods(ctx context.Context, c *cluster.Cluster, nodes int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ds, err := c.Client.AppsV1().DaemonSets(chart.AgentNamespace).Get(ctx, "nodewise-agent", metav1.GetOptions{})
		if err == nil && int(ds.Status.NumberReady) == nodes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the chart's agent DaemonSet never had a Ready pod on each of %d nodes (%v)", nodes, statusOf(ds))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func statusOf(ds *appsv1.DaemonSet) any {
	if ds == nil {
		return nil
	}
	return ds.Status
}

// TestLiveChartInstalledJudge: nodewise from its Helm chart, on the live data
// plane. A healthy NodeRollout of one node completes, passed by the judge on
// its chart-wired agent's evidence; then a ztunnel build that resets a share
// of connections (-rst) halts at its canary with the judge's reason, read
// from that node's agent over TLS the orchestrator verified against the CA
// it keeps.
func TestLiveChartInstalledJudge(t *testing.T) {
	e := newLiveEnvWired(t, 3, chartAgents(t))
	ctx := context.Background()

	e.upgrade("1.28.1")
	e.settle()
	nr := e.rolloutOn("chart-healthy", "node-001", v1alpha1.DrainAuto, v1alpha1.InconclusivePass)
	ns := nodeStatus(t, nr, "node-001")
	t.Logf("healthy: %s, verdict %s", nr.Status.Phase, ns.Verdict)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("healthy rollout %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	if !strings.HasPrefix(ns.Verdict, "Pass") || ns.Judgement == nil || ns.Judgement.Judgements == 0 {
		t.Errorf("node-001 was not judged through its agent: verdict %q, judgement %+v", ns.Verdict, ns.Judgement)
	}

	if err := cluster.SetImageTag(ctx, e.c.Client, cluster.ZtunnelName, "1.28.2-rst"); err != nil {
		t.Fatal(err)
	}
	if err := waitTemplateObserved(ctx, e.c, cluster.ZtunnelName); err != nil {
		t.Fatal(err)
	}
	e.settle()
	node, err := busiestAmbientNode(ctx, e.c)
	if err != nil {
		t.Fatal(err)
	}
	nr = e.run(faultyRollout("chart-rst", node, true), node)
	ns = nodeStatus(t, nr, node)
	t.Logf("-rst: %s at %s, halt reason: %s", nr.Status.Phase, node, nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at %s", nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	if !strings.HasPrefix(ns.Verdict, "Fail") || !strings.Contains(nr.Status.HaltReason, "resets") || ns.Judgement == nil || ns.Judgement.Regressions == 0 {
		t.Errorf("want the judge's reset regression as the reason: verdict %q, halt %q, judgement %+v", ns.Verdict, nr.Status.HaltReason, ns.Judgement)
	}
}
