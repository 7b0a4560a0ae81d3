//go:build linux

package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/sim/cluster"
)

// newSimKubeletCmd is a background process `sim up` starts: the simulated
// kubelet of every node. It is hidden: people never run it themselves.
func newSimKubeletCmd() *cobra.Command { return backgroundCmd("kubelet", cluster.RunKubelet) }

// newSimInjectorCmd is the other background process `sim up` starts: the
// sidecar injector of every revision `sim install-istio` installs. Hidden
// too.
func newSimInjectorCmd() *cobra.Command { return backgroundCmd("injector", cluster.RunInjector) }

// backgroundCmd is a hidden command that runs one of the simulated
// cluster's background processes until SIGTERM, logging as JSON to its log.
func backgroundCmd(use string, run func(ctx context.Context, dir string, log *zap.Logger) error) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    use,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := zap.NewProduction()
			if err != nil {
				return err
			}
			defer log.Sync()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, dir, log)
		},
	}
	stateDirFlag(cmd, &dir)
	return cmd
}
