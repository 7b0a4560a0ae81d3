package main

import (
	"github.com/spf13/cobra"
)

func newPauseCmd(g *globalFlags) *cobra.Command {
	out := newPrintFlags("paused")
	cmd := &cobra.Command{
		Use:               "pause NAME",
		Short:             "Start no new node; nodes in flight finish",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return patchRollout(cmd, g, out, args[0], `{"spec":{"paused":true}}`, "paused")
		},
	}
	out.addFlags(cmd)
	return cmd
}
