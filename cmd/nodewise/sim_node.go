//go:build linux

package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/sim/cluster"
)

func newSimNodeReadyCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "node-ready NODE true|false",
		Short: "Make a simulated node Ready or NotReady (fault injection)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ready, err := strconv.ParseBool(args[1])
			if err != nil {
				return fmt.Errorf("second argument must be true or false, got %q", args[1])
			}
			c, err := attachSim(dir)
			if err != nil {
				return err
			}
			return cluster.SetNodeReady(cmd.Context(), c.Client, args[0], ready)
		},
	}
	stateDirFlag(cmd, &dir)
	return cmd
}
