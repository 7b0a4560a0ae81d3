//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/dashboard"
	"github.com/nodewise/nodewise/sim/dataplane"
	"github.com/nodewise/nodewise/sim/demo"
)

// newDemoCmd runs nodewise's whole job on the built-in simulated cluster.
func newDemoCmd(_ *globalFlags) *cobra.Command {
	var (
		cfg     demo.Config
		redraw  string
		logFile string
		live    bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a simulated cluster, roll the ambient data plane to a new version and halt a faulty build at the canary, then migrate sidecars in waves and halt a faulty revision",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch redraw {
			case "auto":
				cfg.Redraw = isTerminal(os.Stdout)
			case "always", "never":
				cfg.Redraw = redraw == "always"
			default:
				return fmt.Errorf("--redraw must be auto, always or never, got %q", redraw)
			}
			log := zap.NewNop()
			if logFile != "" {
				zc := zap.NewProductionConfig()
				zc.OutputPaths, zc.ErrorOutputPaths = []string{logFile}, []string{logFile}
				l, err := zc.Build()
				if err != nil {
					return err
				}
				defer l.Sync()
				log = l
			}
			cfg.Log, cfg.Out = log, cmd.OutOrStdout()
			if live {
				dp, err := newLiveDataPlane(log)
				if err != nil {
					return err
				}
				cfg.DataPlane = dp
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			_, err := demo.Run(ctx, cfg)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", 12, "simulated nodes")
	f.IntVar(&cfg.Zones, "zones", 3, "zones the nodes are spread over")
	f.StringVar(&cfg.From, "from", "1.27.3", "Istio version installed first")
	f.StringVar(&cfg.To, "to", "1.28.1", "Istio version of the healthy rollout")
	f.StringVar(&cfg.FaultyTag, "faulty-tag", "", "ztunnel image tag of the rollout that must halt (default 1.28.2-rst with --live, whose resets the judge catches; 1.28.2-neverready without)")
	f.StringVar(&cfg.SidecarFaulty, "sidecar-faulty", "1.29.0-rst", "Istio version of the faulty sidecar revision the sidecar half halts at its canary wave (--live only; a revision other than --from's and --to's)")
	f.StringVar(&cfg.WorkDir, "work-dir", "", "directory for the cluster's state (default: a temporary directory, removed at the end)")
	f.StringVar(&redraw, "redraw", "auto", "redraw the node table in place: auto (on a terminal), always, never")
	f.StringVar(&logFile, "log-file", "", "write the orchestrator's and kubelet's logs to this file")
	f.StringVar(&cfg.DashboardAddress, "dashboard-address", dashboard.DefaultAddress, "where the demo serves the dashboard while it runs (a free loopback port when taken)")
	f.BoolVar(&live, "live", true, "run the pods on the live data plane (network namespaces, ztunnel stand-ins, traffic); needs root, ip and nft")
	cmd.AddCommand(newDemoStandinCmd())
	return cmd
}

// newLiveDataPlane builds the live data plane, whose ztunnel stand-ins are
// this binary's hidden `demo ztunnel-standin` command.
func newLiveDataPlane(log *zap.Logger) (*dataplane.DataPlane, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("--live needs root to create network namespaces (run as root, or pass --live=false)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("--live needs %s (run make deps, or pass --live=false)", tool)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return dataplane.New(dataplane.Config{StandinArgv: []string{self, "demo", "ztunnel-standin"}, Log: log.Named("dataplane")})
}

// newDemoStandinCmd is the ztunnel stand-in process the live data plane
// starts, one per simulated node's ztunnel pod. People never run it.
func newDemoStandinCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "ztunnel-standin",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE:   func(*cobra.Command, []string) error { return dataplane.RunStandin() },
	}
}
