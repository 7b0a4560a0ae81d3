package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/revisions/revtag"
)

func newRevisionCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revision",
		Short: "Istio control-plane revisions",
	}
	cmd.AddCommand(newRevisionRemoveCmd(g), newRevisionMigrateCmd(g), newRevisionStatusCmd(g), newRevisionPauseCmd(g), newRevisionResumeCmd(g), newRevisionAbortCmd(g), newRevisionExplainCmd(g))
	return cmd
}

func newRevisionRemoveCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var dryRun bool
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "remove REV",
		Short: "Remove a revision's istiod and injector; refused while any proxy, waypoint, tag or namespace still uses it",
		Long: "Removing a revision is the point of no return of a sidecar migration: proxies still\n" +
			"injected by it lose their control plane. The command refuses, changing nothing, while\n" +
			"any waypoint or other pod runs a proxy of REV, any waypoint Gateway is served from REV (one\n" +
			"scaled to zero included), any tag points at REV, or any namespace is labelled with it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			client, err := g.kube()
			if err != nil {
				return err
			}
			dyn, err := g.dynamic()
			if err != nil {
				return err
			}
			deleted, err := revtag.RemoveRevision(cmd.Context(), client, dyn, args[0], inventory.Options{IstioNamespace: f.istioNamespace}, dryRun)
			if err != nil {
				return err
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			// -o: {revision, dryRun, removed: [kind/name...]}; -o name: the objects.
			res := removedRevision{Revision: args[0], DryRun: dryRun, Removed: deleted}
			return output.print(cmd.OutOrStdout(), res, func() []string { return deleted }, func() error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s revision %s: %s\n", verb, args[0], strings.Join(deleted, ", "))
				return err
			})
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	output.addFlag(cmd)
	return cmd
}

// removedRevision is what `revision remove -o` prints.
type removedRevision struct {
	Revision string   `json:"revision"`
	DryRun   bool     `json:"dryRun"`
	Removed  []string `json:"removed"`
}

// parseWave reads NAME=PERCENT% or NAME=key=value[,key=value].
func parseWave(s string) (v1alpha1.Wave, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" || rest == "" {
		return v1alpha1.Wave{}, fmt.Errorf("--wave %q: want NAME=PERCENT%% or NAME=key=value[,key=value]", s)
	}
	if pct, isPct := strings.CutSuffix(rest, "%"); isPct {
		n, err := strconv.Atoi(pct)
		if err != nil {
			return v1alpha1.Wave{}, fmt.Errorf("--wave %q: percent must be a whole number", s)
		}
		p := int32(n)
		return v1alpha1.Wave{Name: name, Percent: &p}, nil
	}
	sel := map[string]v1alpha1.LabelValue{}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return v1alpha1.Wave{}, fmt.Errorf("--wave %q: selector %q is not key=value", s, kv)
		}
		sel[k] = v1alpha1.LabelValue(v)
	}
	return v1alpha1.Wave{Name: name, NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: sel}}, nil
}

func newRevisionMigrateCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var name string
	var waves []string
	var overwrite, dryRun, builtIn bool
	var promAddr, waypoints string
	var addrs remote.AddressPolicy
	spec := v1alpha1.RevisionMigrationSpec{}
	out := newPrintFlags("created")
	cmd := &cobra.Command{
		Use:   "migrate --from REV --to REV --rate PODS_PER_SECOND",
		Short: "Create a RevisionMigration: move sidecar namespaces from one revision to another in gated waves",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			printer, err := out.toPrinter()
			if err != nil {
				return err
			}
			for _, w := range waves {
				wave, err := parseWave(w)
				if err != nil {
					return err
				}
				spec.Waves = append(spec.Waves, wave)
			}
			if promAddr != "" {
				// Refused here as the controller would refuse it: before anything is written.
				if _, err := remote.NewPrometheus(remote.PrometheusGateConfig{Address: promAddr, Addresses: addrs}); err != nil {
					return fmt.Errorf("--prometheus: %w", err)
				}
				p := &v1alpha1.PrometheusGates{Address: promAddr}
				if !builtIn {
					p.BuiltIn = &v1alpha1.BuiltInGates{Disabled: true}
				}
				spec.Gates = &v1alpha1.GatesSpec{Prometheus: p}
			} else if !builtIn {
				return errors.New("--builtin-gates=false needs --prometheus: without an address there are no built-in gates to turn off")
			}
			spec.Waypoints = v1alpha1.WaypointsMode(waypoints)
			spec = revisions.Defaulted(spec)
			if err := revisions.Validate(spec); err != nil {
				return err
			}
			if name == "" {
				name = spec.From + "-to-" + spec.To
			}
			rm := &v1alpha1.RevisionMigration{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RevisionMigration"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       spec,
			}
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			client, err := g.kube()
			if err != nil {
				return err
			}
			for _, rev := range []string{spec.From, spec.To} {
				if _, err := revtag.RevisionWebhook(cmd.Context(), client, rev); err != nil {
					return err
				}
			}
			if cur, err := revtag.Get(cmd.Context(), client, spec.Tag); err == nil && cur != spec.To && !overwrite {
				return fmt.Errorf("%w: %q points at %s; pass --overwrite to let the migration move it to %s", revtag.ErrTagExists, spec.Tag, cur, spec.To)
			} else if err != nil && !errors.Is(err, revtag.ErrUnknownTag) {
				return err
			}
			if dryRun && spec.Waypoints == v1alpha1.WaypointsOnly {
				fmt.Fprintf(cmd.OutOrStdout(), "waypoints: Only: the waypoint Gateways on %s are found, tiered and recorded when the migration starts\n", spec.From)
				line, err := waypointMethodNow(cmd.Context(), client, revisions.Defaulted(spec), f.istioNamespace)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), line)
				out, err := yaml.Marshal(rm)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			if dryRun {
				sc, waves, err := revisions.Plan(cmd.Context(), client, spec, inventory.Options{IstioNamespace: f.istioNamespace})
				if err != nil {
					return err
				}
				printPlan(cmd.OutOrStdout(), spec, sc, waves)
				out, err := yaml.Marshal(rm)
				if err != nil {
					return err
				}
				_, err = cmd.OutOrStdout().Write(out)
				return err
			}
			nwc, err := v1alpha1.NewForConfig(cfg)
			if err != nil {
				return err
			}
			mc := nwc.RevisionMigrations()
			created, err := mc.Create(cmd.Context(), rm, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("creating RevisionMigration %s: %w", name, err)
			}
			if !out.human() {
				return printer.print(cmd.OutOrStdout(), created, "created")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revisionmigration %s created: %s -> %s via tag %s\n", name, spec.From, spec.To, spec.Tag)
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&name, "name", "", "name of the RevisionMigration (default FROM-to-TO)")
	cmd.Flags().StringVar(&spec.From, "from", "", "revision the namespaces use now (required)")
	cmd.Flags().StringVar(&spec.To, "to", "", "revision to move them to (required)")
	cmd.Flags().StringVar(&spec.Tag, "tag", v1alpha1.DefaultMigrationTag, "revision tag pointed at --to")
	cmd.Flags().StringVar(&spec.StableTag, "stable-tag", "", "once Succeeded, point this tag at --to and move the namespaces onto it, restarting nothing (spec.stableTag)")
	cmd.Flags().StringVar(&spec.TierLabel, "tier-label", v1alpha1.DefaultTierLabel, "namespace label ordering the waves")
	cmd.Flags().Int32Var(&spec.RateLimit.PodsPerSecond, "rate", 0, "most pods restarted per second (required, > 0)")
	cmd.Flags().StringArrayVar(&waves, "wave", nil, "a wave, in order: NAME=PERCENT% or NAME=key=value[,key=value] (default canary, 5%, 30%, 100%)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "let the migration move --tag if it already points elsewhere")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the RevisionMigration instead of creating it")
	cmd.Flags().StringVar(&waypoints, "waypoints", "", "Only: move the ambient waypoint Gateways on --from instead of sidecar namespaces (spec.waypoints; default Exclude)")
	out.addFlags(cmd)
	cmd.Flags().StringVar(&promAddr, "prometheus", "", "Prometheus base URL for spec.gates.prometheus.address: turns on the built-in gates (istiod's rejected configs per revision, retries per request against the control)")
	cmd.Flags().BoolVar(&builtIn, "builtin-gates", true, "with --prometheus, run the built-in gates (false sets spec.gates.prometheus.builtIn.disabled)")
	addGateAddressFlags(cmd, &addrs)
	return cmd
}

// gatesLine says, for a person, which Prometheus gates judge each wave.
func gatesLine(spec v1alpha1.RevisionMigrationSpec) string {
	if spec.Gates == nil || spec.Gates.Prometheus == nil {
		return "# gates: readiness (and any Gate the controller embeds); no Prometheus gate (no spec.gates.prometheus.address)"
	}
	p := spec.Gates.Prometheus
	var parts []string
	if n := len(p.Queries); n > 0 {
		parts = append(parts, fmt.Sprintf("%d queries of yours", n))
	}
	b := p.BuiltIn
	if b == nil || !b.Disabled {
		if b == nil || !b.ConfigAcceptance.Disabled {
			parts = append(parts, "built-in config acceptance (istiod "+spec.To+"'s rejected configs against "+spec.From+"'s)")
		}
		if b == nil || !b.Retries.Disabled {
			parts = append(parts, "built-in retry volume (the wave's retries per request against the control namespaces')")
		}
	}
	if len(parts) == 0 {
		return "# gates: readiness only (" + p.Address + ": built-in gates disabled, no queries)"
	}
	return "# gates from " + p.Address + ": " + strings.Join(parts, ", ")
}

// printPlan writes, as YAML comments, what the migration would move and how
// each namespace's labels would change, and which namespaces it would leave.
func printPlan(out io.Writer, spec v1alpha1.RevisionMigrationSpec, sc revisions.Scope, waves []v1alpha1.ResolvedWave) {
	adopted := 0
	for _, m := range sc.Members {
		if m.Implicit != "" {
			adopted++
		}
	}
	fmt.Fprintf(out, "# plan: %d namespaces (%d adopted) in %d waves, %d skipped\n", len(sc.Members), adopted, len(waves), len(sc.Skipped))
	fmt.Fprintln(out, gatesLine(spec))
	for _, w := range waves {
		fmt.Fprintf(out, "# wave %s:\n", w.Name)
		for _, name := range w.Namespaces {
			m, _ := sc.Member(name)
			note := ""
			if m.Implicit != "" {
				note = " (adopted: uses " + spec.From + " through " + m.Implicit + ")"
			}
			fmt.Fprintf(out, "#   %s: %s%s\n", name, m.Change(spec.Tag), note)
		}
	}
	for _, s := range sc.Skipped {
		fmt.Fprintf(out, "# skipped %s: %s\n", s.Name, s.Reason)
	}
}

func newRevisionAbortCmd(g *globalFlags) *cobra.Command {
	var wave bool
	out := newPrintFlags("aborting")
	cmd := &cobra.Command{
		Use:   "abort NAME [--wave]",
		Short: "Abort a RevisionMigration: moved namespaces are retagged back and restarted",
		Long: "Every namespace moved so far goes back to its original labels and is restarted onto\n" +
			"the old revision. With --wave only the current wave's namespaces do; earlier waves\n" +
			"stay on the new revision. A --wave abort can be widened by running abort again\n" +
			"without --wave while it is in flight.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, mc, err := openMigrations(g, out)
			if err != nil {
				return err
			}
			var updated *v1alpha1.RevisionMigration
			scope := v1alpha1.AbortAll
			if wave {
				scope = v1alpha1.AbortWave
			}
			// The controller writes status often: retry the read-modify-write on conflict.
			err = retry.RetryOnConflict(retry.DefaultBackoff, func() error {
				rm, err := mc.Get(cmd.Context(), args[0], metav1.GetOptions{})
				if err != nil {
					return fmt.Errorf("reading RevisionMigration %s: %w", args[0], err)
				}
				if rm.Spec.Abort == v1alpha1.AbortAll && scope == v1alpha1.AbortWave {
					return fmt.Errorf("revisionmigration %s is already aborting every wave; an abort cannot be narrowed", args[0])
				}
				rm.Spec.Abort = scope
				updated, err = mc.Update(cmd.Context(), rm, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				return fmt.Errorf("aborting %s: %w", args[0], err)
			}
			if !out.human() {
				return printer.print(cmd.OutOrStdout(), updated, "aborting")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revisionmigration %s: abort (%s) requested\n", args[0], scope)
			return nil
		},
	}
	cmd.Flags().BoolVar(&wave, "wave", false, "roll back only the current wave")
	out.addFlags(cmd)
	return cmd
}

func newRevisionExplainCmd(g *globalFlags) *cobra.Command {
	var wave string
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "explain NAME [--wave WAVE]",
		Short: "Print the gate's table for each judged wave of a RevisionMigration",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			mc, err := migrationClient(g)
			if err != nil {
				return err
			}
			rm, err := mc.Get(cmd.Context(), args[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading RevisionMigration %s: %w", args[0], err)
			}
			if output.human() {
				return writeWaveExplain(cmd.OutOrStdout(), rm, wave)
			}
			// -o: the waves' status entries (.status.waves[]), as the API has them.
			var waves []v1alpha1.ResolvedWave
			var names []string
			for _, w := range rm.Status.Waves {
				if wave == "" || w.Name == wave {
					waves, names = append(waves, w), append(names, "wave/"+w.Name)
				}
			}
			if wave != "" && len(waves) == 0 {
				return fmt.Errorf("revisionmigration %s has no wave %q", rm.Name, wave)
			}
			return output.print(cmd.OutOrStdout(), waves, func() []string { return names }, nil)
		},
	}
	output.addFlag(cmd)
	cmd.Flags().StringVar(&wave, "wave", "", "only this wave (default every judged wave)")
	return cmd
}

// writeWaveExplain prints each judged wave's outcome, reasons and table.
func writeWaveExplain(out io.Writer, rm *v1alpha1.RevisionMigration, only string) error {
	fmt.Fprintf(out, "revisionmigration %s: %s: %s\n", rm.Name, rm.Status.Phase, rm.Status.Reason)
	if line := conformanceLine(rm.Spec.Gates, rm.Status.Conformance); line != "" {
		fmt.Fprintf(out, "\n%s\n", line)
	}
	found := false
	for _, w := range rm.Status.Waves {
		if only != "" && w.Name != only {
			continue
		}
		found = true
		if w.Judgement == nil {
			fmt.Fprintf(out, "\nwave %s (%s): not judged yet\n", w.Name, strings.Join(w.Namespaces, ", "))
			continue
		}
		j := w.Judgement
		fmt.Fprintf(out, "\nwave %s (%s): %s at %s\n", w.Name, strings.Join(w.Namespaces, ", "), j.Outcome, j.JudgedAt)
		for _, r := range j.Reasons {
			fmt.Fprintf(out, "  %s\n", r)
		}
		tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "COMPARISON\tMETRIC\tREFERENCE\tMIGRATED\tP (HOLM)\tREGRESSED\tNOTE")
		for _, r := range j.Rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%s\n", r.Pod, r.Metric, r.Before, r.After, r.P, r.Regressed, r.Note)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if only != "" && !found {
		return fmt.Errorf("revisionmigration %s has no wave %q", rm.Name, only)
	}
	return nil
}

// migrationClient is the RevisionMigration client of the global flags' cluster.
// openMigrations checks -o and builds the RevisionMigration client: the
// opening of every revision command that prints a migration.
func openMigrations(g *globalFlags, out *printFlags) (objectPrinter, v1alpha1.RevisionMigrationInterface, error) {
	printer, err := out.toPrinter()
	if err != nil {
		return objectPrinter{}, nil, err
	}
	mc, err := migrationClient(g)
	return printer, mc, err
}

func migrationClient(g *globalFlags) (v1alpha1.RevisionMigrationInterface, error) {
	nwc, err := g.nodewise()
	if err != nil {
		return nil, err
	}
	return nwc.RevisionMigrations(), nil
}

// waypointMethodNow is how a waypoints: Only migration started now would
// move its waypoints, from the live inventory, as revisions' start decides.
func waypointMethodNow(ctx context.Context, client kubernetes.Interface, spec v1alpha1.RevisionMigrationSpec, istioNamespace string) (string, error) {
	inv, err := inventory.Observe(ctx, client, inventory.Options{IstioNamespace: istioNamespace})
	if err != nil {
		return "", err
	}
	st := v1alpha1.RevisionMigrationStatus{WaypointMethod: v1alpha1.WaypointRelabel}
	why := fmt.Sprintf("revision %s: no readable istiod version", spec.To)
	if v, ok := inv.RevisionVersion(spec.To); ok {
		if to, err := skew.ParseVersion(v); err == nil {
			var canary bool
			if canary, why = skew.WaypointCanary(inv, to); canary {
				st.WaypointMethod = v1alpha1.WaypointCanary
			}
		}
	}
	line := waypointMethodLine(spec, st)
	if st.WaypointMethod == v1alpha1.WaypointRelabel {
		line = "waypoints: relabelled in place"
	}
	return line + " (" + why + ")", nil
}
