package main

import (
	"github.com/spf13/cobra"
)

func newAbortCmd(g *globalFlags) *cobra.Command {
	out := newPrintFlags("aborting")
	cmd := &cobra.Command{
		Use:               "abort NAME",
		Short:             "Stop a NodeRollout once the nodes in flight are made safe (uncordoned); cannot be undone",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return patchRollout(cmd, g, out, args[0], `{"spec":{"abort":true}}`, "aborting")
		},
	}
	out.addFlags(cmd)
	return cmd
}
