package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/kubeconfig"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// agentSelector selects the node agents' pods (the chart's and deploy/'s DaemonSet).
const agentSelector = "app.kubernetes.io/name=nodewise-agent"

// agentServiceAccount is the node agents' ServiceAccount, in --agent-namespace:
// the only requester of their certificates the signer approves.
const agentServiceAccount = "nodewise-agent"

// runCheckAgents is `orchestrator --check-agents`, the chart's `helm test`:
// it reaches every node agent the way the orchestrator judges through them.
func runCheckAgents(ctx context.Context, rc runConfig, out io.Writer) error {
	cfg, err := kubeconfig.Load(rc.kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	agents, err := judgegate.Agents(rc.agents, kube, zap.NewNop())
	if err != nil {
		return err
	}
	return checkAgents(ctx, kube, agents, rc.agentNamespace, out)
}

// snapshotter is what checkAgents asks each agent (remote.Agent).
type snapshotter interface {
	Snapshot(ctx context.Context, node string) (wire.Snapshot, error)
}

// checkAgents lists the node agents' pods in namespace and asks each Ready
// one's agent for a snapshot through agents (the orchestrator's client: its
// CA, its token, the node's address). It fails when there is no agent, when
// an agent pod is not Ready, or when an agent does not answer.
func checkAgents(ctx context.Context, kube kubernetes.Interface, agents snapshotter, namespace string, out io.Writer) error {
	pods, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: agentSelector})
	if err != nil {
		return fmt.Errorf("listing the node agents' pods in %s: %w", namespace, err)
	}
	if len(pods.Items) == 0 {
		return fmt.Errorf("no node agent pods (%s) in namespace %s", agentSelector, namespace)
	}
	var failed []string
	for _, p := range pods.Items {
		node := p.Spec.NodeName
		if ready, _ := model.PodReadyCondition(&p); node == "" || !ready {
			failed = append(failed, fmt.Sprintf("%s/%s on node %q is not Ready", p.Namespace, p.Name, node))
			continue
		}
		snap, err := agents.Snapshot(ctx, node)
		if err != nil {
			failed = append(failed, fmt.Sprintf("node %s: %v", node, err))
			continue
		}
		fmt.Fprintf(out, "node %s: agent %s answers (%s mode)\n", node, snap.AgentVersion, snap.Mode)
	}
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "; "))
	}
	fmt.Fprintf(out, "all %d node agents answer the orchestrator\n", len(pods.Items))
	return nil
}
