package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/dashboard"
)

func newDashboardCmd(g *globalFlags) *cobra.Command {
	var (
		address, grafana string
		readOnly         bool
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a local web page of every NodeRollout and RevisionMigration: nodes, the judge's evidence, halts, actions",
		Long: "dashboard serves, on --address (default " + dashboard.DefaultAddress + "), a live web view of the cluster's\n" +
			"NodeRollouts and RevisionMigrations, read with your kubeconfig: each rollout's nodes by wave and zone,\n" +
			"each node's before/after evidence, a halt's reason with what to do next. Pause, resume, abort and\n" +
			"rollback run with your credentials after a confirmation (--read-only hides them).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			nwc, err := g.nodewise()
			if err != nil {
				return err
			}
			srv, err := dashboard.New(dashboard.Config{Rollouts: nwc.NodeRollouts(), Migrations: nwc.RevisionMigrations(), ReadOnly: readOnly, GrafanaURL: grafana})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", address)
			if err != nil {
				return fmt.Errorf("--address %s: %w", address, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "nodewise dashboard on http://%s (Ctrl-C stops it)\n", ln.Addr())
			return g.clarify(ctx, srv.Serve(ctx, ln))
		},
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", dashboard.DefaultAddress, "host:port to serve on (keep it on loopback: actions use your credentials)")
	f.StringVar(&grafana, "grafana-url", "", "base URL of a Grafana with nodewise's dashboards, for the per-node links (empty: no links)")
	f.BoolVar(&readOnly, "read-only", false, "hide the actions (pause, resume, abort, rollback)")
	return cmd
}
