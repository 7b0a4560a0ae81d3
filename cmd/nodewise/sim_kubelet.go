package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/test/cluster"
)

// newSimKubeletCmd is the background process `sim up` starts: the simulated
// kubelet of every node. It is hidden: people never run it themselves.
func newSimKubeletCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "kubelet",
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
			return cluster.RunKubelet(ctx, dir, log)
		},
	}
	stateDirFlag(cmd, &dir)
	return cmd
}

// newSimInjectorCmd is the other background process `sim up` starts: the
// sidecar injector of every revision `sim install-istio` installs. Hidden
// too.
func newSimInjectorCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "injector",
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
			return cluster.RunInjector(ctx, dir, log)
		},
	}
	stateDirFlag(cmd, &dir)
	return cmd
}
