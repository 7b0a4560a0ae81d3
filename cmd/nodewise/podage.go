package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/revisions"
)

// newPodAgeCmd groups the verbs of PodAgePolicies: the same pause, resume
// and abort as a RevisionMigration's, and its status.
func newPodAgeCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "podage",
		Short: "PodAgePolicies: a maximum pod age and proxy version target, enforced in maintenance windows",
	}
	verb := func(use, short, what string, patch func([]string) []byte) *cobra.Command {
		out := newPrintFlags(what)
		c := &cobra.Command{Use: use, Short: short, Args: cobra.RangeArgs(1, 2), RunE: func(cmd *cobra.Command, args []string) error {
			return patchPodAge(cmd, g, out, args[0], patch(args), what)
		}}
		out.addFlags(c)
		return c
	}
	cmd.AddCommand(
		verb("pause NAME", "Start no new wave; the wave in flight finishes", "paused", func([]string) []byte { return revisions.PausePatch() }),
		verb("resume NAME", "Unpause, and clear a halt (the halted wave is judged again from a fresh soak)", "resumed", func([]string) []byte {
			return revisions.ResumePatch(time.Now().UTC().Format(time.RFC3339Nano))
		}),
		verb("abort NAME [REASON]", "Stop the policy for good: nothing more is restarted", "aborted", func(args []string) []byte {
			reason := "aborted with nodewise podage abort"
			if len(args) == 2 {
				reason = args[1]
			}
			return fmt.Appendf(nil, `{"spec":{"abort":%q}}`, reason)
		}),
		newPodAgeStatusCmd(g),
	)
	return cmd
}

func podAgeClient(g *globalFlags) (v1alpha1.PodAgePolicyInterface, error) {
	nwc, err := g.nodewise()
	if err != nil {
		return nil, err
	}
	return nwc.PodAgePolicies(), nil
}

// patchPodAge merge-patches a PodAgePolicy and prints the result.
func patchPodAge(cmd *cobra.Command, g *globalFlags, out *printFlags, name string, patch []byte, what string) error {
	pc, err := podAgeClient(g)
	if err != nil {
		return err
	}
	return mergePatch(cmd, g, out, "PodAgePolicy", name, patch, what, pc.Patch)
}

func newPodAgeStatusCmd(g *globalFlags) *cobra.Command {
	var o dataOutput
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "A PodAgePolicy's phase and each workload it noticed, restarts, blocks or leaves opted out",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			pc, err := podAgeClient(g)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			p, err := pc.Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading PodAgePolicy %s: %w", args[0], g.clarify(ctx, err))
			}
			out := cmd.OutOrStdout()
			names := func() []string { return []string{"podagepolicy.nodewise.io/" + p.Name} }
			return o.print(out, p, names, func() error { return writePodAgeStatus(out, p) })
		},
	}
	o.addFlag(cmd)
	return cmd
}

// writePodAgeStatus is the human status: the phase's line, then a row per
// workload the policy holds a record of.
func writePodAgeStatus(out io.Writer, p *v1alpha1.PodAgePolicy) error {
	fmt.Fprintf(out, "%s: %s, wave %d: %s\n", p.Name, p.Status.Phase, p.Status.Wave, p.Status.Reason)
	if len(p.Status.Workloads) == 0 {
		return nil
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "WORKLOAD\tTEAM\tSTATE\tNOTICED\tWHY\tMESSAGE")
	for _, r := range p.Status.Workloads {
		noticed := "-"
		if r.NoticeSentAt != nil {
			noticed = r.NoticeSentAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "%s %s/%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Namespace, r.Name, r.Team, r.State, noticed, r.Why, strings.ReplaceAll(r.Message, "\n", " "))
	}
	return w.Flush()
}
