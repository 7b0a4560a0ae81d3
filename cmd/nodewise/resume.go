package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/orchestrator/model"
)

func newResumeCmd(g *globalFlags) *cobra.Command {
	out := newPrintFlags("resumed")
	cmd := &cobra.Command{
		Use:               "resume NAME",
		Short:             "Unpause a NodeRollout, and clear a halt (failed nodes are retried from preflight)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			token := time.Now().UTC().Format(time.RFC3339Nano)
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"paused":false}}`, model.AnnotationResumeToken, token)
			return patchRollout(cmd, g, out, args[0], patch, "resumed")
		},
	}
	out.addFlags(cmd)
	return cmd
}
