package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// newGetCmd is `nodewise get [NAME...]` (also `list`): NodeRollouts as a
// table, or, with -o, as kubectl prints them (a List for more than one).
func newGetCmd(g *globalFlags) *cobra.Command {
	out := newPrintFlags("")
	cmd := &cobra.Command{
		Use:               "get [NAME...]",
		Aliases:           []string{"list"},
		Short:             "List NodeRollouts (or the named ones): phase, nodes done, halt reason, age",
		Example:           "  nodewise list\n  nodewise get ambient-1-28 -o jsonpath='{.status.phase}'\n  nodewise list -o name",
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, err := out.toPrinter()
			if err != nil {
				return err
			}
			_, rc, err := rolloutClients(g)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			list := &v1alpha1.NodeRolloutList{}
			if len(args) == 0 {
				if list, err = rc.List(ctx, metav1.ListOptions{}); err != nil {
					return fmt.Errorf("listing NodeRollouts: %w", g.clarify(ctx, err))
				}
			}
			for _, name := range args {
				nr, err := rc.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("reading NodeRollout %s: %w", name, g.clarify(ctx, err))
				}
				list.Items = append(list.Items, *nr)
			}
			w := cmd.OutOrStdout()
			if !out.human() {
				if len(args) == 1 {
					return printer.print(w, &list.Items[0], "")
				}
				if *out.pf.OutputFormat != "name" {
					return printer.print(w, list, "")
				}
				for i := range list.Items { // the name printer takes no List
					if err := printer.print(w, &list.Items[i], ""); err != nil {
						return err
					}
				}
				return nil
			}
			if len(list.Items) == 0 {
				_, err := fmt.Fprintln(cmd.ErrOrStderr(), "No NodeRollouts found.")
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tPHASE\tDONE\tFAILED\tPAUSED\tAGE\tREASON")
			for _, nr := range list.Items {
				c := nr.Status.Counts
				fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%d\t%t\t%s\t%s\n", nr.Name, nr.Status.Phase, c.Done+c.Skipped, c.Total, c.Failed, nr.Spec.Paused,
					duration.HumanDuration(time.Since(nr.CreationTimestamp.Time)), firstLine(nr.Status.PhaseReason()))
			}
			return tw.Flush()
		},
	}
	out.addFlags(cmd)
	return cmd
}
