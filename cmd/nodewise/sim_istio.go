//go:build linux

package main

import (
	"fmt"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/sim/cluster"
)

func newSimInstallIstioCmd() *cobra.Command {
	var dir, version, strategy string
	cmd := &cobra.Command{
		Use:   "install-istio",
		Short: "Install (or, run again, upgrade) Istio fixtures shaped like the real charts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := attachSim(dir)
			if err != nil {
				return err
			}
			opts := cluster.IstioOptions{Version: version, UpdateStrategy: appsv1.DaemonSetUpdateStrategyType(strategy)}
			url, ca, ok, err := c.Injector()
			if err != nil {
				return err
			}
			if ok {
				opts.InjectorURL, opts.CABundle = url, ca
			}
			if err := cluster.InstallIstio(cmd.Context(), c.Client, opts); err != nil {
				return err
			}
			rev, _ := cluster.Revision(version)
			fmt.Fprintf(cmd.OutOrStdout(), "Istio %s (revision %s) installed; ztunnel and istio-cni use %s\n", version, rev, strategy)
			if ok {
				fmt.Fprintf(cmd.OutOrStdout(), "pods in namespaces labelled istio.io/rev=%s get its sidecar (docker.io/istio/proxyv2:%s)\n", rev, version)
			}
			return nil
		},
	}
	stateDirFlag(cmd, &dir)
	cmd.Flags().StringVar(&version, "version", "", "Istio version, such as 1.27.3 (required)")
	cmd.Flags().StringVar(&strategy, "update-strategy", "OnDelete", "DaemonSet update strategy: OnDelete or RollingUpdate")
	_ = cmd.MarkFlagRequired("version")
	return cmd
}
