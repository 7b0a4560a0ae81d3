package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

func newSkewCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var overrides []string
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "skew",
		Short: "List data-plane components outside Istio's supported version skew",
		Long: "Checks every sidecar against its revision's istiod and every ztunnel and istio-cni\n" +
			"against istiod, using Istio's published support policy (see `nodewise skew policy`).\n\n" +
			"Exit status: 0 when every component is within the skew, 4 when any is not (whatever -o\n" +
			"says), 1 on any error; so `nodewise skew -o name` gates a pipeline.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			policy, err := skew.DefaultPolicy().Override(overrides)
			if err != nil {
				return err
			}
			client, err := g.kube()
			if err != nil {
				return err
			}
			inv, err := inventory.Observe(cmd.Context(), client, inventory.Options{IstioNamespace: f.istioNamespace})
			if err != nil {
				return err
			}
			obs, err := skew.FromInventory(inv)
			if err != nil {
				return err
			}
			v := skew.Check(policy, obs)
			out := cmd.OutOrStdout()
			report := skewReport{Components: len(obs), Violations: []skewViolation{}}
			for _, x := range v {
				report.Violations = append(report.Violations, skewViolation{Component: string(x.Component), Subject: x.Subject, Revision: x.Revision, Version: x.Version.String(), Reason: x.Reason})
			}
			err = output.print(out, report, report.names, func() error {
				if len(v) == 0 {
					_, err := fmt.Fprintf(out, "no skew violations among %d data-plane components\n", len(obs))
					return err
				}
				w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
				fmt.Fprintln(w, "COMPONENT\tSUBJECT\tREVISION\tVERSION\tREASON")
				for _, x := range v {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", x.Component, x.Subject, x.Revision, x.Version, x.Reason)
				}
				return w.Flush()
			})
			if err != nil || len(v) == 0 {
				return err
			}
			return withExitCode(exitViolation, "%d of %d data-plane components are outside the supported skew", len(v), len(obs))
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	cmd.PersistentFlags().StringSliceVar(&overrides, "max-behind", nil, "override the policy: component=minors (components: sidecar, ztunnel, istio-cni, waypoint)")
	cmd.AddCommand(newSkewPlanCmd(g, &overrides), newSkewPolicyCmd(&overrides))
	return cmd
}

func newSkewPlanCmd(g *globalFlags, overrides *[]string) *cobra.Command {
	var f sidecarFlags
	var from, to string
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "plan --to VERSION [--from VERSION]",
		Short: "Split a sidecar move into the passes the skew policy allows (n-2 -> n is two passes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			policy, err := skew.DefaultPolicy().Override(*overrides)
			if err != nil {
				return err
			}
			target, err := skew.ParseVersion(to)
			if err != nil {
				return fmt.Errorf("--to: %w", err)
			}
			var oldest skew.Version
			if from != "" {
				if oldest, err = skew.ParseVersion(from); err != nil {
					return fmt.Errorf("--from: %w", err)
				}
			} else {
				client, err := g.kube()
				if err != nil {
					return err
				}
				inv, err := inventory.Observe(cmd.Context(), client, inventory.Options{IstioNamespace: f.istioNamespace})
				if err != nil {
					return err
				}
				var ok bool
				if oldest, ok = skew.OldestProxy(inv); !ok {
					return fmt.Errorf("no sidecar or waypoint proxies with a readable version found; pass --from")
				}
			}
			passes, err := skew.Plan(policy, oldest, target)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			report := []skewPass{}
			for _, p := range passes {
				report = append(report, skewPass{From: p.From.MinorString(), To: p.To.MinorString(), Why: p.Why})
			}
			names := func() []string {
				var n []string
				for _, p := range report {
					n = append(n, p.To)
				}
				return n
			}
			return output.print(out, report, names, func() error {
				if len(passes) == 0 {
					_, err := fmt.Fprintf(out, "nothing to do: proxies are already on %s\n", target.MinorString())
					return err
				}
				for i, p := range passes {
					fmt.Fprintf(out, "pass %d: %s -> %s: %s\n", i+1, p.From.MinorString(), p.To.MinorString(), p.Why)
				}
				return nil
			})
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	cmd.Flags().StringVar(&to, "to", "", "target Istio version, e.g. 1.28.1 (required)")
	cmd.Flags().StringVar(&from, "from", "", "oldest proxy version (default: the oldest sidecar in the cluster)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func newSkewPolicyCmd(overrides *[]string) *cobra.Command {
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Print the skew table in force",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			policy, err := skew.DefaultPolicy().Override(*overrides)
			if err != nil {
				return err
			}
			rules := []skewRule{}
			for _, r := range policy.Rules() {
				rules = append(rules, skewRule{Component: string(r.Component), MaxBehind: r.MaxBehind, MaxAhead: r.MaxAhead, Source: r.Source})
			}
			names := func() []string {
				var n []string
				for _, r := range rules {
					n = append(n, r.Component)
				}
				return n
			}
			return output.print(cmd.OutOrStdout(), rules, names, func() error {
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
				fmt.Fprintln(w, "COMPONENT\tMAX MINORS BEHIND ISTIOD\tMAX AHEAD\tSOURCE")
				for _, r := range rules {
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", r.Component, r.MaxBehind, r.MaxAhead, r.Source)
				}
				return w.Flush()
			})
		},
	}
	output.addFlag(cmd)
	return cmd
}

// skewReport is `nodewise skew -o json|yaml|jsonpath`.
type skewReport struct {
	Components int             `json:"components"`
	Violations []skewViolation `json:"violations"`
}

type skewViolation struct {
	Component string `json:"component"`
	Subject   string `json:"subject"`
	Revision  string `json:"revision,omitempty"`
	Version   string `json:"version"`
	Reason    string `json:"reason"`
}

// names are the components in violation (-o name), one per line.
func (r skewReport) names() []string {
	var out []string
	for _, v := range r.Violations {
		out = append(out, v.Component+"/"+v.Subject)
	}
	return out
}

type skewPass struct {
	From string `json:"from"`
	To   string `json:"to"`
	Why  string `json:"why"`
}

type skewRule struct {
	Component string `json:"component"`
	MaxBehind int    `json:"maxBehind"`
	MaxAhead  int    `json:"maxAhead"`
	Source    string `json:"source"`
}
