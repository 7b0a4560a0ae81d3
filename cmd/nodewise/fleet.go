package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/clusters"
)

// fleetFlags say which clusters `nodewise fleet` reads.
type fleetFlags struct {
	contexts       []string
	secrets        string // namespace of the cluster Secrets
	secretSelector string
	timeout        time.Duration
}

func newFleetCmd(g *globalFlags) *cobra.Command {
	var f fleetFlags
	var sf sidecarFlags
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "fleet [--contexts A,B | --cluster-secrets NAMESPACE]",
		Short: "Show several clusters at once: istiod revisions, data-plane versions, skew, rollouts and migrations",
		Long: "Reads every cluster concurrently, each within --timeout: the kubeconfig's contexts (all of\n" +
			"them, or --contexts), or, with --cluster-secrets, one cluster per Secret holding a kubeconfig\n" +
			"(Cluster API's <cluster>-kubeconfig Secrets: data key \"value\", or \"kubeconfig\"), read through\n" +
			"the current context. A cluster that cannot be read is shown with its error, and the command\n" +
			"then exits 1 after printing every cluster.",
		Example: "  nodewise fleet --contexts staging,prod-eu,prod-us\n  nodewise fleet --cluster-secrets fleet-system -o json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			cs, err := f.clusters(cmd, g)
			if err != nil {
				return err
			}
			rs := clusters.Read(cmd.Context(), cs, clusters.Options{Timeout: f.timeout, IstioNamespace: sf.istioNamespace})
			out := cmd.OutOrStdout()
			names := func() []string {
				n := make([]string, len(rs))
				for i, r := range rs {
					n[i] = r.Cluster
				}
				return n
			}
			if err := output.print(out, rs, names, func() error { return printFleet(out, rs) }); err != nil {
				return err
			}
			if bad := clusters.Unreachable(rs); len(bad) > 0 {
				return fmt.Errorf("%d of %d clusters could not be read: %s", len(bad), len(rs), strings.Join(bad, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&f.contexts, "contexts", nil, "the kubeconfig contexts to read (default: all of them)")
	cmd.Flags().StringVar(&f.secrets, "cluster-secrets", "", "read the clusters from the kubeconfig Secrets in this namespace of the current cluster instead")
	cmd.Flags().StringVar(&f.secretSelector, "cluster-selector", "cluster.x-k8s.io/cluster-name", "label selector of the cluster Secrets (default: Cluster API's)")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 15*time.Second, "how long to wait for each cluster")
	sf.bind(cmd)
	output.addFlag(cmd)
	return cmd
}

// clusters resolves the flags into the clusters to read.
func (f fleetFlags) clusters(cmd *cobra.Command, g *globalFlags) ([]clusters.Cluster, error) {
	if f.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %s: must be positive", f.timeout)
	}
	if f.secrets == "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		if g.conn.KubeConfig != nil {
			rules.ExplicitPath = *g.conn.KubeConfig
		}
		return clusters.FromContexts(rules, f.contexts)
	}
	if len(f.contexts) > 0 {
		return nil, fmt.Errorf("--contexts and --cluster-secrets are two ways to name the clusters: give one")
	}
	kube, err := g.kube()
	if err != nil {
		return nil, err
	}
	cs, err := clusters.FromSecrets(cmd.Context(), kube, f.secrets, f.secretSelector)
	if err == nil && len(cs) == 0 {
		err = fmt.Errorf("no Secret in %s matches %q", f.secrets, f.secretSelector)
	}
	return cs, err
}

// printFleet writes one table per question: which clusters answered, the
// control planes, the data planes, and the upgrades.
func printFleet(out io.Writer, rs []clusters.Report) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tSERVER\tSKEW\tSTATUS")
	for _, r := range rs {
		if r.Error != "" {
			fmt.Fprintf(w, "%s\t%s\t-\tunreachable: %s\n", r.Cluster, orDash(r.Server), r.Error)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%d/%d outside\tok\n", r.Cluster, r.Server, r.Skew, r.Components)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CLUSTER\tREVISION\tVERSION\tREADY\tTAGS")
	for _, r := range rs {
		for _, rev := range r.Revisions {
			fmt.Fprintf(w, "%s\t%s\t%s\t%t\t%s\n", r.Cluster, rev.Name, rev.Version, rev.Ready, orDash(strings.Join(rev.Tags, ",")))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CLUSTER\tCOMPONENT\tVERSION\tCOUNT")
	for _, r := range rs {
		for _, p := range r.DataPlane {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", r.Cluster, p.Component, p.Version, p.Count)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "CLUSTER\tKIND\tNAME\tPHASE\tPROGRESS\tREASON")
	for _, r := range rs {
		for _, u := range r.Upgrades {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Cluster, u.Kind, u.Name, orDash(u.Phase), u.Progress, orDash(u.Reason))
		}
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
