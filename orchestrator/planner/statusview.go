package planner

import (
	"cmp"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// RenderPlan writes the ordered plan with its waves, windows and estimate.
func RenderPlan(w io.Writer, d Decision, p model.Policy, now time.Time, est time.Duration) error {
	fmt.Fprintf(w, "Targets (swapped in this order on each node):")
	for _, t := range p.Targets {
		fmt.Fprintf(w, " %s/%s", t.Namespace, t.Name)
	}
	fmt.Fprintf(w, "\nmaxParallel %s, maxUnavailable %s, drain %s (timeout %s, PDB blocked: %s), swap timeout %s, baseline %s, soak %s\n",
		limitText(p.MaxParallel, d.MaxParallel), limitText(p.MaxUnavailable, d.MaxUnavailable), p.Drain, p.DrainTimeout, p.PDBBlocked, p.SwapTimeout, p.Baseline, p.Soak)
	if p.Drain == v1alpha1.DrainAuto {
		fmt.Fprintln(w, "Drain auto is decided per node at run time: drain when the node's agent may see a connection older than ztunnel's drain deadline (or cannot tell), else swap in place")
	}
	if line := PlannedDecision(p); line != "" {
		fmt.Fprintln(w, line)
	}
	if line := PlannedBaseline(p); line != "" {
		fmt.Fprintln(w, line)
	}
	renderSchedule(w, p, d.Order, now, est)
	fmt.Fprintf(w, "Phase now: %s (%s)\n", d.Phase, d.Reason)
	waves := 0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tNODE\tZONE\tCANARY\tGATE")
	for i, n := range d.Order {
		waves = max(waves, n.Wave)
		fmt.Fprintf(tw, "%d\t%s\t%s\t%v\t%s\n", n.Wave, n.Name, cmp.Or(n.Zone, "-"), n.Canary, PlannedGate(d.Order, i, p))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d nodes in %d waves; estimated duration %s (excluding drains and waits for windows)\n", len(d.Order), waves, est.Round(time.Second))
	return err
}

// limitText is a limit as written, with what a percentage came to: "4",
// "10% (100 nodes)".
func limitText(l model.Limit, resolved int) string {
	if l.Percent == 0 {
		return l.String()
	}
	if resolved == 1 {
		return fmt.Sprintf("%s (1 node)", l)
	}
	return fmt.Sprintf("%s (%d nodes)", l, resolved)
}
