//go:build linux

package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newSimStatusCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Report the simulated cluster's processes, nodes and pods",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := attachSim(dir)
			if err != nil {
				return err
			}
			st := c.Status(cmd.Context())
			out := cmd.OutOrStdout()
			for _, p := range st.Processes {
				state := "running"
				if !p.Running {
					state = "NOT RUNNING"
				}
				fmt.Fprintf(out, "%-24s pid %-8d %s\n", p.Name, p.PID, state)
			}
			if st.APIError != nil {
				fmt.Fprintf(out, "api server: %v\n", st.APIError)
			} else {
				fmt.Fprintf(out, "nodes: %d/%d Ready; pods: %d (%d Running)\n", st.ReadyNodes, st.Nodes, st.Pods, st.RunningPods)
			}
			fmt.Fprintf(out, "kubeconfig: %s\n", c.Kubeconfig)
			if !st.Healthy() {
				return fmt.Errorf("simulated cluster in %s is not healthy", dir)
			}
			return nil
		},
	}
	stateDirFlag(cmd, &dir)
	return cmd
}
