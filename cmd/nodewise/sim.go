//go:build linux

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/sim/cluster"
)

// newSimCmd groups the commands that run the built-in simulated cluster.
func newSimCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the built-in simulated cluster (real etcd and Kubernetes control plane, simulated nodes)",
	}
	cmd.AddCommand(newSimUpCmd(), newSimStatusCmd(), newSimDownCmd(), newSimInstallIstioCmd(),
		newSimNodeReadyCmd(), newSimKubeletCmd(), newSimInjectorCmd())
	return cmd
}

// stateDirFlag adds the --state-dir flag every sim command takes.
func stateDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "state-dir", "", "directory holding the cluster's state, kubeconfig, logs and PIDs (required)")
	_ = cmd.MarkFlagRequired("state-dir")
}

func requireStateDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("--state-dir must not be empty")
	}
	return nil
}

// attachSim connects to the cluster `sim up` left running in dir.
func attachSim(dir string) (*cluster.Cluster, error) {
	if err := requireStateDir(dir); err != nil {
		return nil, err
	}
	return cluster.Attach(dir)
}
