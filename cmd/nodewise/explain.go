package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

func newExplainCmd(g *globalFlags) *cobra.Command {
	var node string
	var output dataOutput
	cmd := &cobra.Command{
		Use:               "explain NAME --node NODE",
		Short:             "Print the judge's before/after table for one node of a NodeRollout",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			nwc, err := v1alpha1.NewForConfig(cfg)
			if err != nil {
				return err
			}
			if node == "" {
				return explainRollout(cmd.Context(), nwc.NodeRollouts(), args[0], cmd.OutOrStdout())
			}
			return explainNode(cmd.Context(), nwc.NodeRollouts(), args[0], node, output, cmd.OutOrStdout())
		},
	}
	output.addFlag(cmd)
	cmd.Flags().StringVar(&node, "node", "", "the node to explain (required)")
	_ = cmd.RegisterFlagCompletionFunc("node", completeRolloutNodes(g))
	return cmd
}

// explainRollout is explain without --node: a rollout's conformance run
// (spec.gates.conformance), the one judgement that is no node's, beside
// its phase and reason; --node is required for anything else.
func explainRollout(ctx context.Context, rollouts rolloutGetter, name string, out io.Writer) error {
	nr, err := rollouts.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading NodeRollout %s: %w", name, err)
	}
	c := nr.Status.Conformance
	if c == nil {
		return fmt.Errorf("--node is required: the node whose judgement to explain")
	}
	fmt.Fprintf(out, "NodeRollout %s: %s: %s\n%s\n", name, nr.Status.Phase, firstLine(cmp.Or(nr.Status.HaltReason, nr.Status.PhaseReason())), c.Line())
	if c.Message != "" {
		fmt.Fprintf(out, "  %s\n", c.Message)
	}
	return nil
}

// rolloutGetter is the one read explain needs.
type rolloutGetter interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1alpha1.NodeRollout, error)
}

// explainNode reads the NodeRollout, finds the node's entry and prints it
// with the judgement exactly as the orchestrator persisted it.
// With -o it prints the node's status entry (.status.nodes[] of the rollout).
func explainNode(ctx context.Context, rollouts rolloutGetter, name, node string, output dataOutput, out io.Writer) error {
	nr, err := rollouts.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading NodeRollout %s: %w", name, err)
	}
	var names []string
	for _, n := range nr.Status.Nodes {
		names = append(names, n.Name)
		if n.Name != node {
			continue
		}
		return output.print(out, n, func() []string { return []string{"node/" + n.Name} }, func() error {
			return health.WriteExplain(out, health.Explanation{Rollout: name, Node: node, State: string(n.State), Verdict: n.Verdict, Detail: n.Detail, Judgement: n.Judgement})
		})
	}
	if len(names) == 0 {
		return fmt.Errorf("node %s is not in NodeRollout %s: it has no nodes in its status yet", node, name)
	}
	return fmt.Errorf("node %s is not in NodeRollout %s (its nodes: %s)", node, name, strings.Join(names, ", "))
}
