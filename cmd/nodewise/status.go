package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	watchapi "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/status"
)

func newStatusCmd(g *globalFlags) *cobra.Command {
	var (
		watch   bool
		timeout time.Duration
	)
	out := newPrintFlags("")
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a NodeRollout: each node's zone, state, time in state and verdict, progress and any halt reason",
		Long: "status prints the rollout once; with -w it watches it (no polling) until a terminal phase.\n\n" +
			"Exit status: 0 while the rollout is healthy or once it is Completed or RolledBack;\n" +
			"2 when it is Halted, Aborted or Failed (with -w: once it gets there); 3 when --timeout runs out\n" +
			"first; 1 on any error. On a terminal the table is redrawn in place; into a pipe or a\n" +
			"file a new table is written only when something changed.",
		Example:           "  nodewise status up -w --timeout 2h && echo upgraded\n  kubectl nodewise status up -o jsonpath='{.status.phase}'",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRollouts(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, err := out.toPrinter()
			if err != nil {
				return err
			}
			_, rc, err := rolloutClients(g)
			if err != nil {
				return err
			}
			w := statusWriter{out: cmd.OutOrStdout(), tty: isTerminalWriter(cmd.OutOrStdout()) && out.human(), human: out.human(), printer: printer}
			return followStatus(cmd.Context(), g, rc, args[0], watch, timeout, w)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout until it is Completed, RolledBack, Halted, Aborted or Failed (a standing policy: or Idle)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "with -w, give up (exit 3) after this long (default: wait for ever)")
	out.addFlags(cmd)
	return cmd
}

// statusWriter draws one view of the rollout.
type statusWriter struct {
	out     io.Writer
	tty     bool // redraw in place
	human   bool
	printer objectPrinter
	last    string
}

// show writes the view of nr unless, off a terminal, nothing changed.
func (w *statusWriter) show(nr *v1alpha1.NodeRollout) error {
	key := nr.ResourceVersion
	if w.human {
		key = progressKey(nr)
	}
	if !w.tty && key == w.last {
		return nil
	}
	w.last = key
	var buf bytes.Buffer
	if w.human {
		if err := status.RenderStatus(&buf, nr, time.Now()); err != nil {
			return err
		}
	} else if err := w.printer.print(&buf, nr, ""); err != nil {
		return err
	}
	if w.tty {
		fmt.Fprint(w.out, "\033[H\033[2J")
	}
	_, err := w.out.Write(buf.Bytes())
	return err
}

// progressKey changes when the human view shows something new (not merely
// a longer time in state).
func progressKey(nr *v1alpha1.NodeRollout) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%+v", nr.Status.Phase, nr.Status.PhaseReason(), nr.Status.Counts)
	for _, n := range nr.Status.Nodes {
		fmt.Fprintf(&b, "|%s=%s/%s", n.Name, n.State, n.Verdict)
	}
	return b.String()
}

// followStatus shows the rollout once or, with watch, on every change until
// a terminal phase: a watch of the one object (watchtools.UntilWithSync
// lists, then watches, and re-lists when the watch expires), not a poll.
func followStatus(ctx context.Context, g *globalFlags, rc v1alpha1.NodeRolloutInterface, name string, watch bool, timeout time.Duration, w statusWriter) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if !watch {
		nr, err := rc.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading NodeRollout %s: %w", name, g.clarify(ctx, err))
		}
		if err := w.show(nr); err != nil {
			return err
		}
		if nr.Status.ObservedGeneration >= nr.Generation {
			return phaseOutcome(nr)
		}
		return nil
	}
	// The object must exist: a typo is an error now, not a wait for ever.
	if _, err := rc.Get(ctx, name, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("reading NodeRollout %s: %w", name, g.clarify(ctx, err))
	}
	var last *v1alpha1.NodeRollout
	var outcome error
	lw := oneObject(name, func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return rc.List(ctx, o) }, rc.Watch)
	err := watchObject(ctx, timeout, lw, &v1alpha1.NodeRollout{}, func(obj runtime.Object) (bool, error) {
		nr, ok := obj.(*v1alpha1.NodeRollout)
		if !ok {
			return false, nil
		}
		last = nr
		if err := w.show(nr); err != nil {
			return false, err
		}
		if nr.Status.ObservedGeneration < nr.Generation {
			return false, nil
		}
		outcome = phaseOutcome(nr)
		return outcome != nil || terminal(nr.Status.Phase), nil
	})
	switch {
	case err == nil:
		return outcome
	case errors.Is(err, errInterrupted):
		return nil
	case errors.Is(err, errWatchTimeout) && last != nil:
		return timedOut(last, timeout)
	case errors.Is(err, errWatchTimeout):
		return withExitCode(exitTimeout, "timed out after %s waiting for NodeRollout %s", timeout, name)
	}
	return fmt.Errorf("watching NodeRollout %s: %w", name, g.clarify(ctx, err))
}

// oneObject lists and watches the one object called name.
func oneObject(name string, list func(context.Context, metav1.ListOptions) (runtime.Object, error), watch func(context.Context, metav1.ListOptions) (watchapi.Interface, error)) *cache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watchapi.Interface, error) {
			o.FieldSelector = selector
			return watch(ctx, o)
		},
	}
}

var (
	errInterrupted  = errors.New("interrupted")
	errWatchTimeout = errors.New("timed out")
)

// watchObject hands show every version of lw's object until show says done:
// a watch (watchtools.UntilWithSync lists, then watches, and re-lists when
// the watch expires), not a poll. It returns errInterrupted when ctx ends,
// errWatchTimeout when timeout (> 0) runs out first, and an error when the
// object is deleted.
func watchObject(ctx context.Context, timeout time.Duration, lw *cache.ListWatch, exemplar runtime.Object, show func(runtime.Object) (bool, error)) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	_, err := watchtools.UntilWithSync(wctx, lw, exemplar, nil, func(ev watchapi.Event) (bool, error) {
		if ev.Type == watchapi.Deleted {
			return false, errors.New("it was deleted")
		}
		return show(ev.Object)
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return errInterrupted
	case wctx.Err() != nil:
		return errWatchTimeout
	}
	return err
}

func terminal(p v1alpha1.RolloutPhase) bool {
	switch p {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseHalted, v1alpha1.PhaseAborted, v1alpha1.PhaseFailed, v1alpha1.PhaseIdle:
		return true
	}
	return false
}

// phaseOutcome is the exit status of a rollout in its phase: an error for
// Halted, Aborted and Failed, nil otherwise.
func phaseOutcome(nr *v1alpha1.NodeRollout) error {
	switch nr.Status.Phase {
	case v1alpha1.PhaseHalted:
		reason := nr.Status.HaltReason
		if reason == "" {
			reason = "no reason recorded"
		}
		return withExitCode(exitHalted, "NodeRollout %s is Halted: %s (see nodewise explain %s --node NODE; resume with nodewise resume %s)", nr.Name, firstLine(reason), nr.Name, nr.Name)
	case v1alpha1.PhaseAborted:
		return withExitCode(exitHalted, "NodeRollout %s is Aborted", nr.Name)
	case v1alpha1.PhaseFailed:
		reason := cmp.Or(nr.Status.PhaseReason(), "no reason recorded")
		return withExitCode(exitHalted, "NodeRollout %s is Failed: %s", nr.Name, firstLine(reason))
	}
	return nil
}

func timedOut(nr *v1alpha1.NodeRollout, timeout time.Duration) error {
	return withExitCode(exitTimeout, "timed out after %s waiting for NodeRollout %s to finish: phase %s, %d/%d nodes done", timeout, nr.Name, nr.Status.Phase, nr.Status.Counts.Done, nr.Status.Counts.Total)
}

// isTerminalWriter reports whether w is a terminal (not a pipe or a file),
// the only place screen-clearing escapes belong.
func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
