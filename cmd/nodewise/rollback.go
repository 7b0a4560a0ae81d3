package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func newRollbackCmd(g *globalFlags) *cobra.Command {
	out := newPrintFlags("rolling back")
	cmd := &cobra.Command{
		Use:               "rollback NAME",
		Short:             "Swap the upgraded nodes back in reverse order, once you have re-applied the old chart (updateStrategy OnDelete)",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			return patchRollout(cmd, g, out, args[0], `{"spec":{"rollback":true}}`, "rolling back")
		},
	}
	out.addFlags(cmd)
	return cmd
}

// patchRollout merge-patches a NodeRollout, naming who asks
// (requesterRollouts), and prints one line (or -o name).
func patchRollout(cmd *cobra.Command, g *globalFlags, out *printFlags, name, patch, what string) error {
	printer, err := out.toPrinter()
	if err != nil {
		return err
	}
	kube, rc, err := rolloutClients(g)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	nr, err := (&requesterRollouts{NodeRolloutInterface: rc, kube: kube}).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: patchFieldManager})
	if err != nil {
		return fmt.Errorf("updating NodeRollout %s: %w", name, g.clarify(ctx, err))
	}
	return printer.print(cmd.OutOrStdout(), nr, what)
}

// patchFieldManager owns what pause, resume, abort and rollback set; apart
// from apply's manager, so a re-apply leaves those fields alone.
const patchFieldManager = "nodewise-cli"
