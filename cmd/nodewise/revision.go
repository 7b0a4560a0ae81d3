package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/revisions/revtag"
)

func newRevisionCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revision",
		Short: "Istio control-plane revisions",
	}
	cmd.AddCommand(newRevisionRemoveCmd(g), newRevisionMigrateCmd(g), newRevisionAbortCmd(g))
	return cmd
}

func newRevisionRemoveCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "remove REV",
		Short: "Remove a revision's istiod and injector; refused while any proxy, tag or namespace still uses it",
		Long: "Removing a revision is the point of no return of a sidecar migration: proxies still\n" +
			"injected by it lose their control plane. The command refuses, changing nothing, while\n" +
			"any pod runs a proxy of REV, any tag points at REV, or any namespace is labelled with it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			client, err := g.kube()
			if err != nil {
				return err
			}
			deleted, err := revtag.RemoveRevision(cmd.Context(), client, args[0], inventory.Options{IstioNamespace: f.istioNamespace}, dryRun)
			if err != nil {
				return err
			}
			verb := "removed"
			if dryRun {
				verb = "would remove"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s revision %s: %s\n", verb, args[0], strings.Join(deleted, ", "))
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only print what would be removed")
	return cmd
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
	var overwrite, dryRun bool
	spec := v1alpha1.RevisionMigrationSpec{}
	cmd := &cobra.Command{
		Use:   "migrate --from REV --to REV --rate PODS_PER_SECOND",
		Short: "Create a RevisionMigration: move sidecar namespaces from one revision to another in gated waves",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, w := range waves {
				wave, err := parseWave(w)
				if err != nil {
					return err
				}
				spec.Waves = append(spec.Waves, wave)
			}
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
			if dryRun {
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
			if _, err := mc.Create(cmd.Context(), rm, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating RevisionMigration %s: %w", name, err)
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
	cmd.Flags().StringVar(&spec.TierLabel, "tier-label", v1alpha1.DefaultTierLabel, "namespace label ordering the waves")
	cmd.Flags().Int32Var(&spec.RateLimit.PodsPerSecond, "rate", 0, "most pods restarted per second (required, > 0)")
	cmd.Flags().StringArrayVar(&waves, "wave", nil, "a wave, in order: NAME=PERCENT% or NAME=key=value[,key=value] (default canary, 5%, 30%, 100%)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "let the migration move --tag if it already points elsewhere")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the RevisionMigration instead of creating it")
	return cmd
}

func newRevisionAbortCmd(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "abort NAME",
		Short: "Abort a RevisionMigration: moved namespaces are retagged back and restarted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := g.restConfig()
			if err != nil {
				return err
			}
			nwc, err := v1alpha1.NewForConfig(cfg)
			if err != nil {
				return err
			}
			mc := nwc.RevisionMigrations()
			rm, err := mc.Get(cmd.Context(), args[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading RevisionMigration %s: %w", args[0], err)
			}
			rm.Spec.Abort = true
			if _, err := mc.Update(cmd.Context(), rm, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("aborting %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revisionmigration %s: abort requested\n", args[0])
			return nil
		},
	}
}
