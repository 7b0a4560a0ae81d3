package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var (
		watch  bool
		output string
	)
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a NodeRollout: each node's zone, state, time in state and verdict, progress and any halt reason",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			_, rc, err := rolloutClients(g)
			if err != nil {
				return err
			}
			for {
				if err := printStatus(cmd.Context(), cmd.OutOrStdout(), rc, args[0], output, watch); err != nil {
					return err
				}
				if !watch {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep refreshing every second")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func printStatus(ctx context.Context, out io.Writer, rc v1alpha1.NodeRolloutInterface, name, output string, clear bool) error {
	nr, err := rc.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading NodeRollout %s: %w", name, err)
	}
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(nr.Status)
	}
	if clear {
		fmt.Fprint(out, "\033[H\033[2J")
	}
	return orchestrator.RenderStatus(out, nr, time.Now())
}
