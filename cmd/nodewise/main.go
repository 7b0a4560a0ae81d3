// Command nodewise is the CLI: simulated clusters, rollout plans and status,
// the sidecar inventory and revision tags. Each command lives in its own file
// and only wires flags to the packages that do the work. Installed as
// kubectl-nodewise on the PATH, it is also `kubectl nodewise`.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
)

// completePlugin is the name kubectl (1.26 and later) runs to complete
// `kubectl nodewise <TAB>`: kubectl_complete-<plugin> on the PATH, with the
// words typed so far. `make build` links it to this binary.
const completePlugin = "kubectl_complete-nodewise"

func main() {
	argv0 := filepath.Base(os.Args[0])
	root := newRootCmd(argv0)
	if argv0 == completePlugin {
		root.SetArgs(append([]string{cobra.ShellCompRequestCmd}, os.Args[1:]...))
	}
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "nodewise:", err)
		os.Exit(exitCode(err))
	}
}

// displayName is how help and completion name the command: "kubectl
// nodewise" when kubectl runs this binary as its plugin kubectl-nodewise.
func displayName(argv0 string) string {
	if argv0 == completePlugin {
		return "kubectl nodewise"
	}
	if strings.HasPrefix(argv0, "kubectl-") {
		return "kubectl " + strings.ReplaceAll(strings.TrimPrefix(argv0, "kubectl-"), "_", "-")
	}
	return "nodewise"
}

func newRootCmd(argv0 string) *cobra.Command {
	g := newGlobalFlags()
	root := &cobra.Command{
		Use:   "nodewise",
		Short: "Boring Istio data-plane upgrades: node-by-node ambient rollouts and sidecar revision waves",
		Long: "nodewise rolls ztunnel and istio-cni node by node, judging each node on its pods' evidence,\n" +
			"and moves sidecar namespaces between Istio revisions in waves.\n\n" +
			"It is also a kubectl plugin: with kubectl-nodewise on the PATH (`make build` links it into\n" +
			"bin/), run `kubectl nodewise ...`. It takes kubectl's connection flags (--kubeconfig, a\n" +
			"KUBECONFIG list, --context, --as, --request-timeout); NodeRollouts and RevisionMigrations\n" +
			"are cluster-scoped, so -n only names where nodewise itself runs (for `version`).",
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: displayName(argv0)},
	}
	g.conn.AddFlags(root.PersistentFlags())
	root.AddCommand(
		newSimCmd(g),
		newInventoryCmd(g), newFreshnessCmd(g), newPrecheckCmd(g), newUpgradeCmd(g), newSkewCmd(g), newFleetCmd(g), newTagCmd(g), newRevisionCmd(g), newPodAgeCmd(g),
		newPlanCmd(g), newApplyCmd(g), newGetCmd(g), newStatusCmd(g), newPauseCmd(g), newResumeCmd(g), newAbortCmd(g), newRollbackCmd(g), newRetryCmd(g), newSkipCmd(g),
		newExplainCmd(g), newDashboardCmd(g), newDemoCmd(g), newVersionCmd(g),
	)
	return root
}
