package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/precheck"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/istio/upgrade"
)

func newUpgradeCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "The whole Istio upgrade in order: plan it, and see which step the cluster is at",
	}
	cmd.AddCommand(newUpgradePlanCmd(g, false), newUpgradePlanCmd(g, true))
	return cmd
}

// newUpgradePlanCmd is `upgrade plan` (the ordered steps; -o yaml: the
// nodewise objects to apply) or, with status, `upgrade status` (the step
// the cluster is at and what blocks the next).
func newUpgradePlanCmd(g *globalFlags, status bool) *cobra.Command {
	var f sidecarFlags
	var output dataOutput
	var to string
	use, short := "plan --to VERSION", "Print the ordered steps of an upgrade to VERSION from the live inventory (-o yaml: the nodewise objects to apply)"
	if status {
		use, short = "status [--to VERSION]", "Show which step of the upgrade the cluster is at and what blocks the next"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + ".\n\nPer skew pass: the precheck, the new istiod revision beside the old (your Helm change), the\n" +
			"node components (your chart change, then a NodeRollout), the sidecar namespaces (a\n" +
			"RevisionMigration), the default tag, and the old revision's removal: the point of no return.\n" +
			"Each step's state is read from the inventory and the nodewise objects. See docs/sidecar.md#the-whole-upgrade.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			if to == "" && !status {
				return errors.New("--to is required: the Istio version to upgrade to, such as 1.29.1")
			}
			in, err := observePrecheck(cmd.Context(), g, f.istioNamespace)
			if err != nil {
				return err
			}
			target, err := upgradeTarget(to, in.Inventory)
			if err != nil {
				return err
			}
			in.To = target
			ui := upgrade.Input{Inventory: in.Inventory, To: target, IstioNamespace: f.istioNamespace, PrecheckErrors: len(precheck.Errors(precheck.Check(in)))}
			if nwc, err := g.nodewise(); err == nil {
				if rs, err := nwc.NodeRollouts().List(cmd.Context(), metav1.ListOptions{}); err == nil {
					ui.Rollouts = rs.Items
				} else if !apierrors.IsNotFound(err) {
					return fmt.Errorf("listing NodeRollouts: %w", err)
				}
				if ms, err := nwc.RevisionMigrations().List(cmd.Context(), metav1.ListOptions{}); err == nil {
					ui.Migrations = ms.Items
				} else if !apierrors.IsNotFound(err) {
					return fmt.Errorf("listing RevisionMigrations: %w", err)
				}
			}
			p, err := upgrade.Build(ui)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if !status && output.format == "yaml" {
				return printObjects(out, p.Objects())
			}
			return output.print(out, p, func() []string {
				var n []string
				for _, s := range p.Steps {
					n = append(n, s.Name)
				}
				return n
			}, func() error { return printUpgrade(out, p, status) })
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	help := "the Istio version to upgrade to"
	if status {
		help += " (default: the newest installed istiod revision's)"
	}
	cmd.Flags().StringVar(&to, "to", "", help)
	return cmd
}

func upgradeTarget(to string, inv inventory.Inventory) (skew.Version, error) {
	if to != "" {
		v, err := skew.ParseVersion(to)
		if err != nil {
			return v, fmt.Errorf("--to: %w", err)
		}
		return v, nil
	}
	var best skew.Version
	for _, r := range inv.Revisions {
		if v, err := skew.ParseVersion(r.Version); err == nil && best.Less(v) {
			best = v
		}
	}
	if best == (skew.Version{}) {
		return best, errors.New("no istiod revision with a readable version: name the target with --to")
	}
	return best, nil
}

// printObjects writes the objects as one YAML stream, for kubectl or
// nodewise apply -f.
func printObjects(out io.Writer, objs []any) error {
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		if _, err := out.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func printUpgrade(out io.Writer, p upgrade.Plan, status bool) error {
	cur := p.Current()
	switch {
	case cur == nil:
		fmt.Fprintf(out, "upgrade to %s: done\n", p.To)
	default:
		i := 0
		for p.Steps[i].Name != cur.Name || p.Steps[i].Pass != cur.Pass {
			i++
		}
		fmt.Fprintf(out, "upgrade to %s: step %d of %d, %s (pass %d): %s", p.To, i+1, len(p.Steps), cur.Name, cur.Pass, cur.State)
		if cur.Why != "" {
			fmt.Fprintf(out, ": %s", cur.Why)
		}
		fmt.Fprintln(out)
	}
	if len(p.Passes) > 1 {
		for i, ps := range p.Passes {
			fmt.Fprintf(out, "pass %d: %s -> %s: %s\n", i+1, ps.From.MinorString(), ps.To.MinorString(), ps.Why)
		}
	}
	fmt.Fprintln(out)
	if status {
		w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
		fmt.Fprintln(w, "#\tPASS\tSTEP\tSTATE\tWHY")
		for i, s := range p.Steps {
			fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\n", i+1, s.Pass, s.Name, s.State, s.Why)
		}
		return w.Flush()
	}
	for i, s := range p.Steps {
		mark := ""
		if s.PointOfNoReturn {
			mark = "  POINT OF NO RETURN"
		}
		fmt.Fprintf(out, "%d. [%s] pass %d: %s (by %s)%s\n", i+1, s.State, s.Pass, s.Name, s.By, mark)
		fmt.Fprintf(out, "   changes: %s\n", s.Changes)
		fmt.Fprintf(out, "   do:      %s\n", strings.ReplaceAll(s.Do, "; ", "\n            "))
		fmt.Fprintf(out, "   check:   %s\n", s.Check)
	}
	_, err := fmt.Fprintln(out, "\n-o yaml prints the NodeRollouts and RevisionMigrations to apply.")
	return err
}
