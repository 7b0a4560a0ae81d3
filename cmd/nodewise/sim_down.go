//go:build linux

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/sim/cluster"
)

func newSimDownCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop exactly the processes `sim up` started and remove the state directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireStateDir(dir); err != nil {
				return err
			}
			if err := cluster.Down(dir); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "simulated cluster in %s stopped and removed\n", dir)
			return nil
		},
	}
	stateDirFlag(cmd, &dir)
	return cmd
}
