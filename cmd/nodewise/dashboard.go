package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/clusters"
	"github.com/nodewise/nodewise/dashboard"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
)

func newDashboardCmd(g *globalFlags) *cobra.Command {
	var (
		address, grafana string
		allowedHosts     []string
		readOnly, fleet  bool
		fleetContexts    []string
		agents           judgegate.AgentConfig
		freshMaxAge      string
		fresh            = dashboard.FreshnessConfig{Keys: freshness.Keys{Team: freshness.DefaultTeamKey}}
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a local web page of every NodeRollout and RevisionMigration: nodes, the judge's evidence, halts, actions",
		Long: "dashboard serves, on --address (default " + dashboard.DefaultAddress + "), a live web view of the cluster's\n" +
			"NodeRollouts and RevisionMigrations, read with your kubeconfig: each rollout's nodes by wave and zone,\n" +
			"each node's before/after evidence, a halt's reason with what to do next. Pause, resume, abort and\n" +
			"rollback run with your credentials after a confirmation (--read-only hides them).\n\n" +
			"It prints its URL once, with a secret made for this run (http://127.0.0.1:3100/?token=...): opening it\n" +
			"signs your browser in (a cookie for this run only). Requests without the token, and requests naming\n" +
			"another host (a DNS-rebinding page), are refused; scripts send Authorization: Bearer <token>.\n\n" +
			"With the node agents' CA and token (--agent-ca, --agent-token-file) a judged node's page also plots\n" +
			"its baseline and soak from the agents' history, against its control nodes and the probe.\n\n" +
			"/freshness shows each team's proxies against the designated version (as `nodewise freshness`), read\n" +
			"on each load with your credentials; ?team=NAME keeps one team.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fresh.Target.MaxMinorsBehind < 0 {
				return fmt.Errorf("--freshness-max-minors-behind %d: want 0 or more", fresh.Target.MaxMinorsBehind)
			}
			if freshMaxAge != "" {
				d, err := parseAge(freshMaxAge)
				if err != nil {
					return fmt.Errorf("--freshness-max-age: %w", err)
				}
				fresh.Target.MaxAge = d
			}
			nwc, err := g.nodewise()
			if err != nil {
				return err
			}
			kube, err := g.kube()
			if err != nil {
				return err
			}
			// Its actions name who asks, as the CLI's verbs do.
			rollouts := &requesterRollouts{NodeRolloutInterface: nwc.NodeRollouts(), kube: kube}
			token, err := dashboard.NewToken()
			if err != nil {
				return err
			}
			cfg := dashboard.Config{Rollouts: rollouts, Migrations: nwc.RevisionMigrations(), ReadOnly: readOnly, GrafanaURL: grafana,
				Token: token, AllowedHosts: allowedHosts, Freshness: &fresh}
			fresh.Client = kube
			fresh.Restarts = func(ctx context.Context, teams []string, now time.Time) (map[string]string, error) {
				policies, err := podAgePolicies(ctx, g)
				if err != nil {
					return nil, err
				}
				return restartsByTeam(policies, teams, now), nil
			}
			if fleet || len(fleetContexts) > 0 {
				cs, err := fleetFlags{contexts: fleetContexts, timeout: 15 * time.Second}.clusters(cmd, g)
				if err != nil {
					return err
				}
				cfg.Clusters = func(ctx context.Context) []clusters.Report { return clusters.Read(ctx, cs, clusters.Options{}) }
			}
			if agents.Configured() {
				history, err := judgegate.Agents(agents, kube, zap.NewNop())
				if err != nil {
					return err
				}
				cfg.History = history
			}
			srv, err := dashboard.New(cfg)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", address)
			if err != nil {
				return fmt.Errorf("--address %s: %w", address, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			fmt.Fprintf(cmd.OutOrStdout(), "nodewise dashboard on %s (Ctrl-C stops it)\n", srv.URL(ln.Addr().String()))
			return g.clarify(ctx, srv.Serve(ctx, ln))
		},
	}
	f := cmd.Flags()
	f.StringVar(&address, "address", dashboard.DefaultAddress, "host:port to serve on (keep it on loopback: actions use your credentials)")
	f.StringVar(&grafana, "grafana-url", "", "base URL of a Grafana with nodewise's dashboards, for the per-node links (empty: no links)")
	f.BoolVar(&readOnly, "read-only", false, "hide the actions (pause, resume, abort, rollback)")
	f.BoolVar(&fleet, "fleet", false, "add a page of every cluster in the kubeconfig (/clusters, as `nodewise fleet` reads them)")
	f.StringSliceVar(&fleetContexts, "fleet-contexts", nil, "the page of clusters reads these kubeconfig contexts only (implies --fleet)")
	addAgentFlags(f, &agents, "a judged node's page plots its windows from the agents' history")
	f.IntVar(&fresh.Target.MaxMinorsBehind, "freshness-max-minors-behind", 1, "/freshness target: proxies at most this many minor releases behind the designated version")
	f.StringVar(&freshMaxAge, "freshness-max-age", "", "/freshness target: pods younger than this (a duration such as 720h, or days such as 30d); unset: no age target")
	f.StringVar(&fresh.Keys.Team, "freshness-team-key", freshness.DefaultTeamKey, "/freshness: label or annotation naming a workload's team (the workload's first, then its namespace's)")
	f.StringSliceVar(&allowedHosts, "allowed-host", nil, "another name (host, or host:port) the dashboard answers to besides localhost, 127.0.0.1, [::1] and --address; needed to reach it by name when --address is not loopback (repeatable)")
	return cmd
}
