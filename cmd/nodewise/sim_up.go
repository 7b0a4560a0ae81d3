//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/sim/cluster"
)

func newSimUpCmd() *cobra.Command {
	var (
		dir  string
		opts cluster.Options
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a simulated cluster in the background and return once it is ready",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireStateDir(dir); err != nil {
				return err
			}
			abs, err := filepath.Abs(dir)
			if err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			if err := cluster.CheckStateDir(abs); err != nil {
				return err
			}
			opts.KubeletArgv = []string{self, "sim", "kubelet", "--state-dir", abs}
			opts.InjectorArgv = []string{self, "sim", "injector", "--state-dir", abs}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			start := time.Now()
			fmt.Fprintf(cmd.ErrOrStderr(), "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and %d simulated nodes...\n", opts.Nodes)
			c, err := cluster.Up(ctx, abs, opts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "simulated cluster ready in %.1fs: %d nodes in %d zones\n", time.Since(start).Seconds(), len(c.Nodes), opts.Zones)
			for _, p := range c.Processes() {
				fmt.Fprintf(out, "  %-24s pid %d\n", p.Name, p.PID)
			}
			fmt.Fprintf(out, "kubeconfig: %s\n  export KUBECONFIG=%s\nstop it with: nodewise sim down --state-dir %s\n", c.Kubeconfig, c.Kubeconfig, abs)
			return nil
		},
	}
	stateDirFlag(cmd, &dir)
	cmd.Flags().IntVar(&opts.Nodes, "nodes", 3, "number of simulated nodes (1-16640)")
	cmd.Flags().IntVar(&opts.Zones, "zones", 1, "number of zones the nodes are spread over")
	cmd.Flags().DurationVar(&opts.ReadyDelay, "ready-delay", 500*time.Millisecond, "how long a bound pod takes to become Running and Ready")
	return cmd
}
