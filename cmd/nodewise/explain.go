package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/nodewise/nodewise/health"
)

// nodeRolloutsGVR is the NodeRollout resource; explain reads it unstructured so
// it shows whatever the orchestrator persisted, including fields newer than
// this binary's types.
var nodeRolloutsGVR = schema.GroupVersionResource{Group: "nodewise.io", Version: "v1alpha1", Resource: "noderollouts"}

// judgementField is the key, in a node's entry of NodeRollout status.nodes,
// under which the orchestrator persists the judge's health.Summary.
const judgementField = "judgement"

func newExplainCmd(g *globalFlags) *cobra.Command {
	var node string
	cmd := &cobra.Command{
		Use:               "explain NAME --node NODE",
		Short:             "Print the judge's before/after table for one node of a NodeRollout",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			if node == "" {
				return fmt.Errorf("--node is required: the node whose judgement to explain")
			}
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("building the Kubernetes client: %w", err)
			}
			return explainNode(cmd.Context(), dyn, args[0], node, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&node, "node", "", "the node to explain (required)")
	_ = cmd.RegisterFlagCompletionFunc("node", completeRolloutNodes(g))
	return cmd
}

// explainNode reads the NodeRollout, finds the node's entry and prints it.
func explainNode(ctx context.Context, dyn dynamic.Interface, name, node string, out io.Writer) error {
	nr, err := dyn.Resource(nodeRolloutsGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading NodeRollout %s: %w", name, err)
	}
	entries, _, err := unstructured.NestedSlice(nr.Object, "status", "nodes")
	if err != nil {
		return fmt.Errorf("NodeRollout %s: status.nodes: %w", name, err)
	}
	var names []string
	for _, e := range entries {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		n, _ := m["name"].(string)
		names = append(names, n)
		if n != node {
			continue
		}
		j := health.NodeJudgement{Rollout: name, Node: node}
		j.State, _ = m["state"].(string)
		j.Verdict, _ = m["verdict"].(string)
		if raw, ok := m[judgementField]; ok && raw != nil {
			b, err := json.Marshal(raw)
			if err != nil {
				return fmt.Errorf("NodeRollout %s node %s: %s: %w", name, node, judgementField, err)
			}
			j.Summary = &health.Summary{}
			if err := json.Unmarshal(b, j.Summary); err != nil {
				return fmt.Errorf("NodeRollout %s node %s: %s is not a judge summary: %w", name, node, judgementField, err)
			}
		}
		return health.WriteExplain(out, j)
	}
	if len(names) == 0 {
		return fmt.Errorf("node %s is not in NodeRollout %s: it has no nodes in its status yet", node, name)
	}
	return fmt.Errorf("node %s is not in NodeRollout %s (its nodes: %s)", node, name, strings.Join(names, ", "))
}
