package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/revisions"
)

func newRevisionStatusCmd(g *globalFlags) *cobra.Command {
	var (
		watch   bool
		timeout time.Duration
	)
	out := newPrintFlags("")
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a RevisionMigration: phase, each wave and each namespace's phase, pods and what it waits for",
		Long: "status prints the migration once; with -w it watches it (no polling) until Succeeded,\n" +
			"Halted, Aborted or Refused.\n\n" +
			"Exit status: 0 while the migration is healthy (Paused included) or once it Succeeded;\n" +
			"2 when it is Halted, Aborted or Refused (with -w: once it gets there); 3 when --timeout\n" +
			"runs out first; 1 on any error.",
		Example: "  nodewise revision status 1-27-to-1-28 -w --timeout 2h && nodewise revision remove 1-27\n" +
			"  nodewise revision status 1-27-to-1-28 -o jsonpath='{.status.phase}'",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, mc, err := openMigrations(g, out)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			name := args[0]
			rm, err := mc.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading RevisionMigration %s: %w", name, g.clarify(ctx, err))
			}
			w := cmd.OutOrStdout()
			tty := isTerminalWriter(w) && out.human()
			lastKey := ""
			show := func(rm *v1alpha1.RevisionMigration) error {
				key := rm.ResourceVersion
				if out.human() {
					key = migrationKey(rm)
				}
				if !tty && key == lastKey {
					return nil
				}
				lastKey = key
				var buf bytes.Buffer
				if out.human() {
					if err := writeMigrationStatus(&buf, rm); err != nil {
						return err
					}
				} else if err := printer.print(&buf, rm, ""); err != nil {
					return err
				}
				if tty {
					fmt.Fprint(w, "\033[H\033[2J")
				}
				_, err := w.Write(buf.Bytes())
				return err
			}
			if !watch {
				if err := show(rm); err != nil {
					return err
				}
				if rm.Status.ObservedGeneration >= rm.Generation {
					return migrationOutcome(rm)
				}
				return nil
			}
			var outcome error
			lw := oneObject(name, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return mc.List(ctx, o) }, mc.Watch)
			err = watchObject(ctx, timeout, lw, &v1alpha1.RevisionMigration{}, func(obj runtime.Object) (bool, error) {
				rm, ok := obj.(*v1alpha1.RevisionMigration)
				if !ok {
					return false, nil
				}
				if err := show(rm); err != nil {
					return false, err
				}
				if rm.Status.ObservedGeneration < rm.Generation {
					return false, nil
				}
				outcome = migrationOutcome(rm)
				return outcome != nil || rm.Status.Phase == v1alpha1.MigrationSucceeded, nil
			})
			switch {
			case err == nil:
				return outcome
			case errors.Is(err, errInterrupted):
				return nil
			case errors.Is(err, errWatchTimeout):
				return withExitCode(exitTimeout, "timed out after %s waiting for RevisionMigration %s to finish", timeout, name)
			}
			return fmt.Errorf("watching RevisionMigration %s: %w", name, g.clarify(ctx, err))
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the migration until it is Succeeded, Halted, Aborted or Refused")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with -w, give up (exit 3) after this long (default: wait for ever)")
	out.addFlags(cmd)
	return cmd
}

// migrationOutcome is the exit status of a migration in its phase: an error
// for Halted, Aborted and Refused, nil otherwise.
func migrationOutcome(rm *v1alpha1.RevisionMigration) error {
	switch rm.Status.Phase {
	case v1alpha1.MigrationHalted:
		return withExitCode(exitHalted, "RevisionMigration %s is Halted: %s (see nodewise revision explain %s; resume with nodewise revision resume %s, or abort)", rm.Name, firstLine(rm.Status.Reason), rm.Name, rm.Name)
	case v1alpha1.MigrationAborted, v1alpha1.MigrationRefused:
		return withExitCode(exitHalted, "RevisionMigration %s is %s: %s", rm.Name, rm.Status.Phase, firstLine(rm.Status.Reason))
	}
	return nil
}

// migrationKey changes when the human view shows something new.
func migrationKey(rm *v1alpha1.RevisionMigration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%d|%t", rm.Status.Phase, rm.Status.Reason, rm.Status.CurrentWave, rm.Spec.Paused)
	for _, w := range rm.Status.Waves {
		fmt.Fprintf(&b, "|%d/%t", w.CanaryWeight, w.CanaryPromoted)
	}
	if c := rm.Status.Conformance; c != nil {
		fmt.Fprintf(&b, "|%s/%d/%s", c.Step, c.Attempt, c.Outcome)
	}
	if c := meta.FindStatusCondition(rm.Status.Conditions, revisions.ConditionTagHandedOver); c != nil {
		fmt.Fprintf(&b, "|%s", c.Message)
	}
	for _, ns := range rm.Status.Namespaces {
		fmt.Fprintf(&b, "|%s=%s/%d/%s", ns.Name, ns.Phase, ns.Pods, ns.Message)
	}
	return b.String()
}

// writeMigrationStatus is the human view: a header, then one row a namespace.
func writeMigrationStatus(out io.Writer, rm *v1alpha1.RevisionMigration) error {
	st := rm.Status
	spec := revisions.Defaulted(rm.Spec)
	wave := "-"
	if n := len(st.Waves); n > 0 {
		cur := min(int(st.CurrentWave), n-1)
		wave = fmt.Sprintf("%d/%d (%s)", min(int(st.CurrentWave)+1, n), n, st.Waves[cur].Name)
	}
	paused := ""
	if rm.Spec.Paused {
		paused = " (spec.paused)"
	}
	fmt.Fprintf(out, "revisionmigration %s: %s -> %s via tag %s\n", rm.Name, spec.From, spec.To, spec.Tag)
	fmt.Fprintf(out, "phase %s%s, wave %s\n", st.Phase, paused, wave)
	if st.Reason != "" {
		fmt.Fprintf(out, "reason: %s\n", st.Reason)
	}
	if line := conformanceLine(spec.Gates, st.Conformance); line != "" {
		fmt.Fprintln(out, line)
	}
	if line := waypointMethodLine(spec, st); line != "" {
		fmt.Fprintln(out, line)
	}
	if spec.StableTag != "" {
		handover := "once Succeeded"
		if c := meta.FindStatusCondition(st.Conditions, revisions.ConditionTagHandedOver); c != nil {
			handover = c.Reason + ": " + c.Message
		}
		fmt.Fprintf(out, "handover to tag %s: %s\n", spec.StableTag, handover)
	}
	if len(st.Namespaces) > 0 {
		fmt.Fprintln(out)
		tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tWAVE\tPHASE\tPODS\tMESSAGE")
		for _, ns := range st.Namespaces {
			wname := fmt.Sprint(ns.Wave)
			if int(ns.Wave) < len(st.Waves) {
				wname = st.Waves[ns.Wave].Name
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", ns.Name, wname, ns.Phase, ns.Pods, firstLine(ns.Message))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, s := range st.Skipped {
		fmt.Fprintf(out, "skipped %s: %s\n", s.Name, s.Reason)
	}
	return nil
}

func newRevisionPauseCmd(g *globalFlags) *cobra.Command {
	out := newPrintFlags("paused")
	cmd := &cobra.Command{
		Use:   "pause NAME",
		Short: "Pause a RevisionMigration before its next wave; the wave in flight finishes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return patchMigration(cmd, g, out, args[0], revisions.PausePatch(), "paused")
		},
	}
	out.addFlags(cmd)
	return cmd
}

func newRevisionResumeCmd(g *globalFlags) *cobra.Command {
	out := newPrintFlags("resumed")
	cmd := &cobra.Command{
		Use:   "resume NAME",
		Short: "Unpause a RevisionMigration, and clear a halt (the halted wave is judged again from a fresh soak)",
		Long: "resume sets spec.paused to false and a new nodewise.io/resume-token. On a Halted\n" +
			"migration the controller judges the halted wave again, from a fresh soak, without\n" +
			"restarting anything: the migration moves on only if the gate passes the wave this time.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return patchMigration(cmd, g, out, args[0], revisions.ResumePatch(time.Now().UTC().Format(time.RFC3339Nano)), "resumed")
		},
	}
	out.addFlags(cmd)
	return cmd
}

// patchMigration merge-patches a RevisionMigration and prints the result.
func patchMigration(cmd *cobra.Command, g *globalFlags, out *printFlags, name string, patch []byte, what string) error {
	mc, err := migrationClient(g)
	if err != nil {
		return err
	}
	return mergePatch(cmd, g, out, "RevisionMigration", name, patch, what, mc.Patch)
}

// mergePatch merge-patches one nodewise object through patchFn (no
// resourceVersion: the controllers' status writes cannot make it
// conflict) and prints the result in the -o format; kind names it in an
// error. The verbs of every nodewise kind go through it.
func mergePatch[T runtime.Object](cmd *cobra.Command, g *globalFlags, out *printFlags, kind, name string, patch []byte, what string,
	patchFn func(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, sub ...string) (T, error)) error {
	printer, err := out.toPrinter()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	obj, err := patchFn(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: patchFieldManager})
	if err != nil {
		return fmt.Errorf("updating %s %s: %w", kind, name, g.clarify(ctx, err))
	}
	return printer.print(cmd.OutOrStdout(), obj, what)
}

// conformanceLine is spec.gates.conformance's last run in one line (the
// point, the attempt, the Job, how it went), "" when the spec has no such gate.
func conformanceLine(g *v1alpha1.GatesSpec, c *v1alpha1.ConformanceStatus) string {
	switch {
	case c != nil:
		return c.Line()
	case g != nil && g.Conformance != nil:
		return fmt.Sprintf("conformance: Job in %s before the first step, not run yet", g.Conformance.Namespace)
	}
	return ""
}

// waypointMethodLine is how a waypoints: Only migration moves its waypoints
// and, by canary, where the current wave's weight is; "" for a sidecar one.
func waypointMethodLine(spec v1alpha1.RevisionMigrationSpec, st v1alpha1.RevisionMigrationStatus) string {
	if spec.Waypoints != v1alpha1.WaypointsOnly {
		return ""
	}
	steps := revisions.WeightSteps(spec.WaypointCanaryWeights)
	switch st.WaypointMethod {
	case v1alpha1.WaypointCanary:
		line := "waypoints: by weighted canary " + steps
		if n := len(st.Waves); n > 0 {
			w := st.Waves[min(int(st.CurrentWave), n-1)]
			switch {
			case w.CanaryPromoted:
				line += fmt.Sprintf("; wave %s promoted (primaries moving to %s, canaries then removed)", w.Name, spec.To)
			case w.CanaryWeight > 0:
				line += fmt.Sprintf("; wave %s at %d%%", w.Name, w.CanaryWeight)
			default:
				line += fmt.Sprintf("; wave %s: canaries starting", w.Name)
			}
		}
		return line
	case v1alpha1.WaypointRelabel:
		return "waypoints: relabelled in place (" + istio.LabelRev + "=" + spec.To + " on each Gateway; weighted canaries need istiod and every ztunnel at 1.31+)"
	}
	return "waypoints: by weighted canary " + steps + " if istiod " + spec.To + " and every ztunnel are 1.31+, else relabelled in place (decided at start)"
}
