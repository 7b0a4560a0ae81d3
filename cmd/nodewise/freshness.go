package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/podage"
)

func newFreshnessCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var output dataOutput
	var to, maxAge, by string
	var keys freshness.Keys
	var target freshness.Target
	var contract bool
	var tail int
	cmd := &cobra.Command{
		Use:   "freshness",
		Short: "Show how far each team's proxies are from the designated version, and the exposure window",
		Long: "Measures every sidecar workload against a target (at most --max-minors-behind minors behind the\n" +
			"designated version, pods younger than --max-age), grouped by team (a label or annotation on the\n" +
			"workload, else its namespace), and estimates the exposure window: how long until every proxy\n" +
			"runs the designated version without a forced restart, from each workload's own restart history.\n" +
			"The long tail lists the stale workloads that bound it. --contract prints the published contract\n" +
			"instead. See docs/freshness.md for the method and its error.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			if by != "team" && by != "namespace" && by != "workload" {
				return fmt.Errorf("--by %s: want team, namespace or workload", by)
			}
			if target.MaxMinorsBehind < 0 {
				return fmt.Errorf("--max-minors-behind %d: want 0 or more", target.MaxMinorsBehind)
			}
			if to != "" {
				v, err := skew.ParseVersion(to)
				if err != nil {
					return fmt.Errorf("--to: %w", err)
				}
				target.Version = v
			}
			if maxAge != "" {
				d, err := parseAge(maxAge)
				if err != nil {
					return fmt.Errorf("--max-age: %w", err)
				}
				target.MaxAge = d
			}
			client, err := g.kube()
			if err != nil {
				return err
			}
			var policies []v1alpha1.PodAgePolicy
			if contract {
				if policies, err = podAgePolicies(cmd.Context(), g); err != nil {
					return err
				}
				// The enforced policy's target is the published one.
				if len(policies) > 0 {
					target, keys = policyTarget(policies[0].Spec, target, keys)
				}
			}
			r, err := freshness.Observe(cmd.Context(), client, inventory.Options{IstioNamespace: f.istioNamespace}, target, keys, time.Now())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if contract {
				return printContract(out, r, policies)
			}
			names := func() []string {
				var n []string
				for _, w := range r.Workloads {
					if w.Lagging+w.OverAge > 0 {
						n = append(n, w.Ref())
					}
				}
				return n
			}
			return output.print(out, r, names, func() error { return printFreshness(out, r, by, tail) })
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	cmd.Flags().StringVar(&to, "to", "", "the designated version (default: the default tag's revision's version, else the newest ready revision's)")
	cmd.Flags().IntVar(&target.MaxMinorsBehind, "max-minors-behind", 1, "target: proxies at most this many minor releases behind the designated version")
	cmd.Flags().StringVar(&maxAge, "max-age", "", "target: pods younger than this (a duration such as 720h, or days such as 30d); unset: no age target")
	cmd.Flags().StringVar(&keys.Team, "team-key", freshness.DefaultTeamKey, "label or annotation naming a workload's team (the workload's first, then its namespace's)")
	cmd.Flags().StringVar(&keys.Owner, "owner-key", freshness.DefaultOwnerKey, "label or annotation naming a workload's owner (the workload's first, then its namespace's)")
	cmd.Flags().StringVar(&by, "by", "team", "group the table by team, namespace or workload")
	cmd.Flags().IntVar(&tail, "tail", 10, "how many long-tail workloads the table lists")
	cmd.Flags().BoolVar(&contract, "contract", false, "print the freshness contract (supported skew, targets, what happens to workloads that miss them) as Markdown")
	return cmd
}

// parseAge reads a Go duration or a whole number of days ("30d").
func parseAge(s string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%q: want a positive whole number of days such as 30d, or a duration such as 720h", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want a positive duration such as 720h, or days such as 30d", s)
	}
	return d, nil
}

func printFreshness(out io.Writer, r freshness.Report, by string, tail int) error {
	fmt.Fprintln(out, r.Summary())
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	switch by {
	case "workload":
		fmt.Fprintln(w, "WORKLOAD\tTEAM\tOWNER\tPODS\tSTALE\tOLDEST VERSION\tCADENCE\tNEXT RESTART")
		for _, x := range r.Workloads {
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", x.Ref(), x.Team, dash(x.Owner), x.Pods, x.Stale, x.OldestVersion, cadence(x), r.Next(x))
		}
	default:
		groups := r.Teams
		if by == "namespace" {
			groups = r.Namespaces
		}
		fmt.Fprintln(w, strings.ToUpper(by)+"\tPODS\tSTALE\tLAGGING\tOVER AGE\tOLDEST POD\tEXPOSURE\tNEVER")
		for _, g := range groups {
			oldest := "-"
			if g.OldestPod != nil {
				oldest = freshness.Human(r.Now.Sub(g.OldestPod.Time))
			}
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%d\n", g.Name, g.Pods, g.Stale, g.Lagging, g.OverAge, oldest, window(g), g.Exposure.Never)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if lt := r.LongTail(tail); len(lt) > 0 && tail > 0 {
		fmt.Fprintln(out)
		fmt.Fprintln(out, "LONG TAIL (stale workloads that bound the exposure window):")
		for _, x := range lt {
			fmt.Fprintf(out, "  %s (team %s%s): %d stale pod%s, %s\n", x.Ref(), x.Team, ownerOf(x), x.Stale, map[bool]string{true: "", false: "s"}[x.Stale == 1], r.Next(x))
		}
	}
	return nil
}

func window(g freshness.Group) string {
	switch {
	case g.Stale == 0:
		return "-"
	case g.Exposure.Window.Duration == 0:
		return "never"
	}
	s := freshness.Human(g.Exposure.Window.Duration)
	if g.Exposure.Error.Duration >= time.Second {
		s += "±" + freshness.Human(g.Exposure.Error.Duration)
	}
	return s
}

func cadence(x freshness.Workload) string {
	if x.Cadence.Duration == 0 {
		return "-"
	}
	return "every " + freshness.Human(x.Cadence.Duration)
}

func ownerOf(x freshness.Workload) string {
	if x.Owner == "" {
		return ""
	}
	return ", owner " + x.Owner
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// podAgePolicies lists the PodAgePolicies by name; none when their CRD is
// not installed.
func podAgePolicies(ctx context.Context, g *globalFlags) ([]v1alpha1.PodAgePolicy, error) {
	pc, err := podAgeClient(g)
	if err != nil {
		return nil, err
	}
	list, err := pc.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing PodAgePolicies: %w", g.clarify(ctx, err))
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	return list.Items, nil
}

// restartsByTeam is what the PodAgePolicies will restart of each team's
// workloads, one line a team (the policies' lines joined), for the
// dashboard's freshness page.
func restartsByTeam(policies []v1alpha1.PodAgePolicy, teams []string, now time.Time) map[string]string {
	out := map[string]string{}
	for _, t := range teams {
		var lines []string
		for _, p := range policies {
			if l := podage.Schedule(p, t, now); l != "" {
				lines = append(lines, l)
			}
		}
		if len(lines) > 0 {
			out[t] = strings.Join(lines, "; ")
		}
	}
	return out
}

// policyTarget is a policy's target and keys over the flags'.
func policyTarget(s v1alpha1.PodAgePolicySpec, t freshness.Target, k freshness.Keys) (freshness.Target, freshness.Keys) {
	if s.MaxAge != nil && s.MaxAge.Err() == nil {
		t.MaxAge = s.MaxAge.Duration
	}
	if s.MaxMinorsBehind != nil {
		t.MaxMinorsBehind = int(*s.MaxMinorsBehind)
	}
	if s.TeamKey != "" {
		k.Team = s.TeamKey
	}
	if s.OwnerKey != "" {
		k.Owner = s.OwnerKey
	}
	return t, k
}

func printContract(out io.Writer, r freshness.Report, policies []v1alpha1.PodAgePolicy) error {
	p := skew.DefaultPolicy()
	var b strings.Builder
	fmt.Fprintf(&b, "# Proxy freshness contract\n\n")
	fmt.Fprintf(&b, "Generated by `nodewise freshness --contract` from the cluster's state at %s.\n\n", r.Now.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "- **Designated version:** %s. Every proxy should run it.\n", r.Version)
	fmt.Fprintf(&b, "- **Supported skew:** ")
	for i, c := range []skew.Component{skew.Sidecar, skew.Ztunnel, skew.CNI} {
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s at most %d minor behind its istiod, never ahead", c, p[c].MaxBehind)
	}
	fmt.Fprintf(&b, " (Istio's published policy: %s).\n", p[skew.Sidecar].Source)
	fmt.Fprintf(&b, "- **Target:** proxies at most %d minor%s behind %s", r.Target.MaxMinorsBehind, map[bool]string{true: "", false: "s"}[r.Target.MaxMinorsBehind == 1], r.Version)
	if r.MaxAge.Duration > 0 {
		fmt.Fprintf(&b, "; every meshed pod younger than %s", freshness.Human(r.MaxAge.Duration))
	}
	b.WriteString(".\n")
	fmt.Fprintf(&b, "- **Teams and owners:** the `%s` and `%s` label or annotation of the workload, else of its namespace.\n", r.Keys.Team, r.Keys.Owner)
	b.WriteString("- **What happens to workloads that miss the target:** they are reported to their team (`nodewise freshness`, the `nodewise_freshness_*` metrics). A proxy changes version only when its pod restarts; the platform moves namespaces between revisions with RevisionMigration waves, which restart the workloads of each wave.")
	if len(policies) == 0 {
		b.WriteString(" No PodAgePolicy enforces the target: nothing restarts a workload for its age.\n")
	} else {
		b.WriteString("\n")
	}
	for _, p := range policies {
		for _, line := range podage.Contract(p) {
			b.WriteString("- " + line + "\n")
		}
	}
	fmt.Fprintf(&b, "\nToday: %s.\n", r.Summary())
	_, err := io.WriteString(out, b.String())
	return err
}
