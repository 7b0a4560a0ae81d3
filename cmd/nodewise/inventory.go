package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// sidecarFlags are shared by the sidecar commands (inventory, skew, tag, revision).
type sidecarFlags struct {
	istioNamespace string
}

func (f *sidecarFlags) bind(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.istioNamespace, "istio-namespace", istio.DefaultNamespace, "namespace of istiod, ztunnel and istio-cni")
}

func newInventoryCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "inventory",
		Short: "Show every meshed pod's proxy version and revision, ztunnel and istio-cni per node, waypoints, and istiod revisions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
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
			return output.print(cmd.OutOrStdout(), inv, func() []string { return inventoryNames(inv) }, func() error { return printInventory(cmd.OutOrStdout(), inv) })
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	return cmd
}

func printInventory(out io.Writer, inv inventory.Inventory) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "REVISION\tVERSION\tREADY\tTAGS")
	for _, r := range inv.Revisions {
		fmt.Fprintf(w, "%s\t%s\t%t\t%s\n", r.Name, r.Version, r.Ready, strings.Join(r.Tags, ","))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NODE\tZTUNNEL\tISTIO-CNI")
	for _, n := range inv.Nodes {
		fmt.Fprintf(w, "%s\t%s\t%s\n", n.Name, n.Ztunnel, n.CNI)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NAMESPACE\tLABELS\tREVISION\tIMPLICIT")
	for _, ns := range inv.Namespaces {
		labels := []string{}
		if ns.Injection != "" {
			labels = append(labels, istio.LabelInjection+"="+ns.Injection)
		}
		if ns.Rev != "" {
			labels = append(labels, istio.LabelRev+"="+ns.Rev)
		}
		if ns.Mode == inventory.ModeAmbient {
			labels = append(labels, istio.LabelDataplaneMode+"=ambient")
		}
		if len(labels) == 0 {
			labels = append(labels, "none")
		}
		rev, implicit := ns.Revision, "no"
		if rev == "" {
			rev = "-"
		}
		if ns.Implicit != "" {
			implicit = "yes (" + ns.Implicit + ")"
		}
		if ns.Mode == "" {
			rev, implicit = "-", "opted out"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", ns.Name, strings.Join(labels, ","), rev, implicit)
	}
	if len(inv.Waypoints) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "WAYPOINT\tREVISION\tVERSION\tREADY")
		for _, wp := range inv.Waypoints {
			rolling := ""
			if wp.Rolling {
				rolling = " (rolling)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s%s\t%d/%d\n", wp.Ref(), wp.Revision, wp.Version, rolling, wp.Ready, wp.Pods)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NAMESPACE\tMODE\tREVISION\tVERSION\tPODS")
	counts := inv.Counts()
	keys := make([]inventory.Key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sortKeys(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\n", k.Namespace, k.Mode, k.Revision, k.Version, counts[k])
	}
	return w.Flush()
}

func sortKeys(keys []inventory.Key) {
	less := func(a, b inventory.Key) bool {
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Revision != b.Revision {
			return a.Revision < b.Revision
		}
		return a.Version < b.Version
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && less(keys[j], keys[j-1]); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

// inventoryNames are the meshed pods, as -o name prints them.
func inventoryNames(inv inventory.Inventory) []string {
	var out []string
	for _, p := range inv.Pods {
		out = append(out, "pod/"+p.Namespace+"/"+p.Name)
	}
	return out
}
