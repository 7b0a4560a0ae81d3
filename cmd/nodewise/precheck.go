package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/precheck"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
)

func newPrecheckCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var output dataOutput
	var to, istioctl string
	var agents judgegate.AgentConfig
	cmd := &cobra.Command{
		Use:   "precheck",
		Short: "Find what is known to break an Istio upgrade before anything moves",
		Long: "Checks revision tags and namespace labels against the installed istiod revisions, dry-run\n" +
			"authorization policies that ztunnels older than 1.29 enforce, the workload-discovery response\n" +
			"against gRPC's 4 MiB limit, sidecar drains at Envoy's edge defaults, and each unfinished\n" +
			"NodeRollout's new images on its nodes and each RevisionMigration's proxy and istiod images on\n" +
			"the nodes it restarts pods on (a node where a pod failed to pull one); with the node\n" +
			"agents' --agent-ca and --agent-token-file, sidecar connections that outlive the proxies' drain\n" +
			"with no maximum connection duration; with istioctl on the PATH (or --istioctl), istioctl\n" +
			"analyze's errors and warnings too. One line per finding, errors first. The RevisionMigration\n" +
			"and NodeRollout controllers run the checks they can decide (without istioctl or the agents)\n" +
			"and refuse to start on an error. See docs/sidecar.md#precheck.\n\n" +
			"Exit status: 0 with no error finding (warnings allowed), 4 with any, 1 on any failure to check.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			var target skew.Version
			if to != "" {
				v, err := skew.ParseVersion(to)
				if err != nil {
					return fmt.Errorf("--to: %w", err)
				}
				target = v
			}
			in, err := observePrecheck(cmd.Context(), g, f.istioNamespace)
			if err != nil {
				return err
			}
			in.To = target
			lifetimes := "connection lifetimes: not checked (--agent-ca and --agent-token-file reach the node agents)"
			if agents.CAFile != "" || agents.TokenFile != "" {
				kube, err := g.kube()
				if err != nil {
					return err
				}
				if in.Connections, lifetimes, err = agentConnections(cmd.Context(), agents, kube, in.Pods); err != nil {
					return err
				}
			}
			findings := precheck.Check(in)
			if istioctl == "" {
				istioctl, _ = exec.LookPath("istioctl")
			}
			if istioctl != "" {
				var args []string
				if k := g.conn.KubeConfig; k != nil && *k != "" {
					args = append(args, "--kubeconfig", *k)
				}
				if c := g.conn.Context; c != nil && *c != "" {
					args = append(args, "--context", *c)
				}
				more, err := precheck.Analyze(cmd.Context(), istioctl, args...)
				if err != nil {
					return err
				}
				findings = append(findings, more...)
				precheck.Sort(findings)
			}
			out := cmd.OutOrStdout()
			if findings == nil {
				findings = []precheck.Finding{}
			}
			err = output.print(out, findings, func() []string {
				var n []string
				for _, f := range findings {
					n = append(n, f.Subject)
				}
				return n
			}, func() error { return printFindings(out, findings, lifetimes, istioctl != "") })
			if err != nil {
				return err
			}
			if n := len(precheck.Errors(findings)); n > 0 {
				return withExitCode(exitViolation, "precheck: %d error finding%s", n, map[bool]string{true: "", false: "s"}[n == 1])
			}
			return nil
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the version the upgrade goes to (default: the newest installed revision's), for the checks that depend on it")
	addAgentFlags(cmd.Flags(), &agents, "the connection-lifetime check reads each sidecar node's agent")
	cmd.Flags().StringVar(&istioctl, "istioctl", "", "istioctl binary whose analyzers run too (default: istioctl on the PATH, if any)")
	return cmd
}

func printFindings(out io.Writer, fs []precheck.Finding, lifetimes string, analyzed bool) error {
	if len(fs) == 0 {
		fmt.Fprintln(out, "precheck: nothing found")
	}
	for _, f := range fs {
		fmt.Fprintln(out, f.String())
	}
	fmt.Fprintln(out, lifetimes)
	note := "istioctl analyze: not run (no istioctl on the PATH; --istioctl names one)"
	if analyzed {
		note = "istioctl analyze: included"
	}
	_, err := fmt.Fprintln(out, note)
	return err
}

// observePrecheck reads the cluster once for the precheck's checks (and the
// upgrade plan, which reads the same inventory).
func observePrecheck(ctx context.Context, g *globalFlags, istioNamespace string) (precheck.Input, error) {
	client, err := g.kube()
	if err != nil {
		return precheck.Input{}, err
	}
	dyn, err := g.dynamic()
	if err != nil {
		return precheck.Input{}, err
	}
	in, o, err := precheck.Observe(ctx, client, dyn, inventory.Options{IstioNamespace: istioNamespace})
	if err != nil {
		return precheck.Input{}, err
	}
	if in.Pulls, err = rolloutPulls(ctx, g, client, in.Nodes); err != nil {
		return precheck.Input{}, err
	}
	more, err := migrationPulls(ctx, g, in, o)
	if err != nil {
		return precheck.Input{}, err
	}
	in.Pulls = append(in.Pulls, more...)
	return in, nil
}
