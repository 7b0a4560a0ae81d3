// Command nodewise is the CLI: simulated clusters, rollout plans and status,
// the sidecar inventory and revision tags. Each command lives in its own file
// and only wires flags to the packages that do the work.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "nodewise:", err)
		os.Exit(1)
	}
}

// globalFlags are the flags every command that talks to a cluster shares.
type globalFlags struct {
	kubeconfig string
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "nodewise",
		Short:         "Boring Istio data-plane upgrades: node-by-node ambient rollouts and sidecar revision waves",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "path to the kubeconfig (default: $KUBECONFIG, then ~/.kube/config)")
	root.AddCommand(
		newSimCmd(g),
		newInventoryCmd(g), newSkewCmd(g), newTagCmd(g), newRevisionCmd(g),
		newPlanCmd(g), newApplyCmd(g), newStatusCmd(g), newPauseCmd(g), newResumeCmd(g), newAbortCmd(g), newRollbackCmd(g),
		newExplainCmd(g), newDemoCmd(g),
	)
	return root
}
