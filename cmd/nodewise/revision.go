package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/orchestrator/inventory"
	"github.com/nodewise/nodewise/orchestrator/revtag"
)

func newRevisionCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revision",
		Short: "Istio control-plane revisions",
	}
	cmd.AddCommand(newRevisionRemoveCmd(g))
	return cmd
}

func newRevisionRemoveCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "remove REV",
		Short: "Remove a revision's istiod and injector; refused while any proxy, tag or namespace still uses it",
		Long: "Removing a revision is the point of no return of a sidecar migration: proxies still\n" +
			"injected by it lose their control plane. The command refuses, changing nothing, while\n" +
			"any pod runs a proxy of REV, any tag points at REV, or any namespace is labelled with it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := sidecarClient(g)
			if err != nil {
				return err
			}
			deleted, err := revtag.RemoveRevision(cmd.Context(), client, args[0], inventory.Options{IstioNamespace: f.istioNamespace}, dryRun)
			if err != nil {
				return err
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s revision %s: %s\n", verb, args[0], strings.Join(deleted, ", "))
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	return cmd
}
