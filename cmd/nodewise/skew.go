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
	cmd := &cobra.Command{
		Use:   "skew",
		Short: "List data-plane components outside Istio's supported version skew",
		Long: "Checks every sidecar against its revision's istiod and every ztunnel and istio-cni\n" +
			"against istiod, using Istio's published support policy (see `nodewise skew policy`).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			if len(v) == 0 {
				fmt.Fprintf(out, "no skew violations among %d data-plane components\n", len(obs))
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
			fmt.Fprintln(w, "COMPONENT\tSUBJECT\tREVISION\tVERSION\tREASON")
			for _, x := range v {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", x.Component, x.Subject, x.Revision, x.Version, x.Reason)
			}
			return w.Flush()
		},
	}
	f.bind(cmd)
	cmd.PersistentFlags().StringSliceVar(&overrides, "max-behind", nil, "override the policy: component=minors (components: sidecar, ztunnel, istio-cni)")
	cmd.AddCommand(newSkewPlanCmd(g, &overrides), newSkewPolicyCmd(&overrides))
	return cmd
}

func newSkewPlanCmd(g *globalFlags, overrides *[]string) *cobra.Command {
	var f sidecarFlags
	var from, to string
	cmd := &cobra.Command{
		Use:   "plan --to VERSION [--from VERSION]",
		Short: "Split a sidecar move into the passes the skew policy allows (n-2 -> n is two passes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
				if oldest, ok = skew.OldestSidecar(inv); !ok {
					return fmt.Errorf("no sidecar proxies with a readable version found; pass --from")
				}
			}
			passes, err := skew.Plan(policy, oldest, target)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if len(passes) == 0 {
				fmt.Fprintf(out, "nothing to do: proxies are already on %s\n", target.MinorString())
				return nil
			}
			for i, p := range passes {
				fmt.Fprintf(out, "pass %d: %s -> %s: %s\n", i+1, p.From.MinorString(), p.To.MinorString(), p.Why)
			}
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&to, "to", "", "target Istio version, e.g. 1.28.1 (required)")
	cmd.Flags().StringVar(&from, "from", "", "oldest proxy version (default: the oldest sidecar in the cluster)")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

func newSkewPolicyCmd(overrides *[]string) *cobra.Command {
	return &cobra.Command{
		Use:   "policy",
		Short: "Print the skew table in force",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			policy, err := skew.DefaultPolicy().Override(*overrides)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
			fmt.Fprintln(w, "COMPONENT\tMAX MINORS BEHIND ISTIOD\tMAX AHEAD\tSOURCE")
			for _, r := range policy.Rules() {
				fmt.Fprintf(w, "%s\t%d\t%d\t%s\n", r.Component, r.MaxBehind, r.MaxAhead, r.Source)
			}
			return w.Flush()
		},
	}
}
