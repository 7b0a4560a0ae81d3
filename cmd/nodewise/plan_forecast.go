package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// renderSwaps prints, per target, the swap nodewise will use (or the one line
// saying what to set when neither is possible), and returns ztunnel's swap
// and drain deadline for the forecast.
func renderSwaps(ctx context.Context, w io.Writer, kube kubernetes.Interface, p model.Policy) (model.SwapKind, time.Duration, error) {
	swap, deadline := model.SwapKind(""), time.Duration(0)
	fmt.Fprintln(w, "\nSwaps:")
	for _, ref := range p.Targets {
		ds, err := kube.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return swap, deadline, fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		kind, why, err := nodestep.DetectSwap(ds)
		if err != nil {
			fmt.Fprintf(w, "  %s/%s: no swap possible: %v\n", ref.Namespace, ref.Name, err)
			continue
		}
		fmt.Fprintf(w, "  %s/%s: %s\n", ref.Namespace, ref.Name, why)
		if kind == model.SwapSurge || swap == "" {
			grace := 30 * time.Second
			if g := ds.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
				grace = time.Duration(*g) * time.Second
			}
			swap, deadline = kind, health.DrainDeadline(grace)
		}
	}
	return swap, deadline, nil
}

// renderForecast reads every planned node's agent and prints the predicted
// disruption (nodestep.RenderForecast). An unreachable agent is shown as
// such; drain auto would drain that node.
func renderForecast(ctx context.Context, w io.Writer, kube kubernetes.Interface, agents judgegate.AgentConfig, order []planner.PlannedNode,
	p model.Policy, swap model.SwapKind, deadline time.Duration) error {
	client, err := judgegate.Agents(agents, kube, zap.NewNop())
	if err != nil {
		return err
	}
	var fs []nodestep.NodeForecast
	for _, pn := range order {
		list, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", pn.Name).String()})
		if err != nil {
			return fmt.Errorf("listing the pods on %s: %w", pn.Name, err)
		}
		in := nodestep.ForecastInput{Node: pn.Name, Deadline: deadline, LongLived: p.LongLivedAfter, Swap: swap}
		for i := range list.Items {
			in.Pods = append(in.Pods, &list.Items[i])
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		in.Snapshot, in.AgentErr = client.Snapshot(actx, pn.Name)
		cancel()
		fs = append(fs, nodestep.Forecast(in))
	}
	return nodestep.RenderForecast(w, fs, deadline, p.LongLivedAfter, swap)
}

// addAgentFlags adds the flags that reach the node agents as the judge
// does: their CA, their token and their port; with the first two, what
// names what the command then does with them.
func addAgentFlags(f *pflag.FlagSet, a *judgegate.AgentConfig, what string) {
	f.StringVar(&a.CAFile, "agent-ca", "", "CA bundle of the node agents' certificates; with --agent-token-file "+what)
	f.StringVar(&a.TokenFile, "agent-token-file", "", "bearer token the node agents accept")
	f.IntVar(&a.Port, "agent-port", 9443, "the node agents' port on each node's InternalIP")
}
