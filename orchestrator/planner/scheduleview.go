package planner

import (
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/timewindow"
)

// renderSchedule writes the plan's windows, blackouts and notBefore, the next
// opening, and when the rollout would end counting them: each wave (est split
// evenly over the waves of order) starts at the next opening after the one
// before it ends.
func renderSchedule(w io.Writer, p model.Policy, order []PlannedNode, now time.Time, est time.Duration) {
	if len(p.Windows) == 0 {
		fmt.Fprintln(w, "Maintenance windows: none (nodes may start at any time)")
	} else {
		fmt.Fprintf(w, "Maintenance windows: %d, open now: %v\n", len(p.Windows), timewindow.InAnyWindow(p.Windows, now))
		for _, win := range p.Windows {
			fmt.Fprintf(w, "  %s\n", win)
		}
	}
	if len(p.Blackouts) > 0 {
		bs := append([]timewindow.Blackout(nil), p.Blackouts...)
		sort.Slice(bs, func(i, j int) bool { return bs[i].Start.Before(bs[j].Start) })
		fmt.Fprintf(w, "Blackouts: %d\n", len(bs))
		for _, b := range bs {
			past := ""
			if !b.End.After(now) {
				past = " (over)"
			}
			fmt.Fprintf(w, "  %s – %s%s %s\n", b.Start.UTC().Format(time.RFC3339), b.End.UTC().Format(time.RFC3339), past, b.Reason)
		}
	}
	if !p.NotBefore.IsZero() {
		fmt.Fprintf(w, "Not before: %s\n", p.NotBefore.UTC().Format(time.RFC3339))
	}
	if p.Closed(now) == "" {
		fmt.Fprintln(w, "Next opening: now")
	} else if next, ok := p.NextOpening(now); ok {
		fmt.Fprintf(w, "Next opening: %s (in %s; now %s)\n", next.UTC().Format(time.RFC3339), next.Sub(now).Round(time.Minute), p.Closed(now))
	} else {
		fmt.Fprintf(w, "Next opening: none within eight days of the last blackout (%s)\n", p.Closed(now))
		return
	}
	waves := map[int]bool{}
	for _, n := range order {
		waves[n.Wave] = true
	}
	if len(waves) == 0 {
		return
	}
	per := make([]time.Duration, len(waves))
	for i := range per {
		per[i] = est / time.Duration(len(waves))
	}
	starts, end, ok := p.Starts(now, per)
	if !ok {
		fmt.Fprintf(w, "Estimated end: never (wave %d finds no opening)\n", len(starts)+1)
		return
	}
	fmt.Fprintf(w, "Estimated end: %s, counting windows, blackouts and notBefore (%d wave(s) of %s each, the last starting %s)\n",
		end.UTC().Format(time.RFC3339), len(per), per[0].Round(time.Second), starts[len(starts)-1].UTC().Format(time.RFC3339))
}
