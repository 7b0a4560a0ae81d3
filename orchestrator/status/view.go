package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/standing"
)

// RenderStatus writes the human view of a NodeRollout: phase, a progress
// bar, a standing policy's last runs, the halt reason, then one line per
// node in plan order.
func RenderStatus(w io.Writer, nr *v1alpha1.NodeRollout, now time.Time) error {
	s := nr.Status
	c := s.Counts
	finished := c.Done + c.Skipped + c.RolledBack
	fmt.Fprintf(w, "NodeRollout %s  phase %s  %s %d/%d done", nr.Name, orDash(string(s.Phase)), bar(finished, c.Total, 30), finished, c.Total)
	fmt.Fprintf(w, "  (in flight %d, failed %d, skipped %d)\n", c.InProgress, c.Failed, c.Skipped)
	if line := standing.Summary(nr, now); line != "" {
		fmt.Fprintln(w, line) // the runs in full: -o yaml, status.runs
	}
	if s.HaltReason != "" {
		fmt.Fprintln(w, haltLine(nr))
	}
	if s.Conformance != nil {
		fmt.Fprintln(w, trunc(s.Conformance.Line(), HaltLineMax))
	}
	if o := s.Omitted; o != nil {
		fmt.Fprintf(w, "DEGRADED: the status is over its size budget and lists %d of %d nodes (in flight and failed first); not listed: %s (each node's step: annotation %s)\n",
			c.Total-o.Total, c.Total, countsLine(*o), model.AnnotationStep)
	}
	for _, cond := range s.Conditions {
		if cond.Type == "Valid" && cond.Status == "False" {
			fmt.Fprintf(w, "INVALID: %s\n", cond.Message)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WAVE\tNODE\tZONE\tSTATE\tIN STATE\tVERDICT\tREASON")
	nodes := append([]v1alpha1.NodeStatus(nil), s.Nodes...)
	sortNodeStatus(nodes)
	for _, n := range nodes {
		since := "-"
		if n.StateSince != nil {
			since = now.Sub(n.StateSince.Time).Round(time.Second).String()
		}
		name := n.Name
		if n.Canary {
			name += " (canary)"
		}
		reason := n.Reason
		if n.Verdict != "" && strings.Contains(reason, n.Verdict) {
			reason = "" // a gate's reason repeats its verdict
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Wave, name, orDash(n.Zone), n.State, since, orDash(trunc(n.Verdict, 60)), orDash(trunc(reason, 80)))
	}
	return tw.Flush()
}

// HaltLineMax bounds the HALTED line, in characters.
const HaltLineMax = 200

// haltLine is the HALTED line: the halt reason's first line (for a gate's
// failure, the node and its verdict's headline), and the command that
// explains the node when the reason names one and the line still fits
// HaltLineMax; a longer reason is cut.
func haltLine(nr *v1alpha1.NodeRollout) string {
	reason, _, _ := strings.Cut(nr.Status.HaltReason, "\n")
	line := "HALTED: " + reason
	if node := haltedNode(nr.Status); node != "" {
		if hint := fmt.Sprintf(" — see nodewise explain %s --node %s", nr.Name, node); utf8.RuneCountInString(line+hint) <= HaltLineMax {
			return line + hint
		}
	}
	return trunc(line, HaltLineMax)
}

// haltedNode is the failed node a halt reason names ("node n1: …"), or "".
func haltedNode(s v1alpha1.NodeRolloutStatus) string {
	rest, ok := strings.CutPrefix(s.HaltReason, "node ")
	if !ok {
		return ""
	}
	node, _, _ := strings.Cut(rest, ":")
	for _, n := range s.Nodes {
		if n.Name == node && n.State == v1alpha1.NodeFailed {
			return node
		}
	}
	return ""
}

// countsLine is c's non-zero counts, "11700 done, 88 pending".
func countsLine(c v1alpha1.RolloutCounts) string {
	var parts []string
	for _, p := range []struct {
		n    int32
		what string
	}{{c.Done, "done"}, {c.Pending, "pending"}, {c.Skipped, "skipped"}, {c.RolledBack, "rolled back"}, {c.InProgress, "in flight"}, {c.Failed, "failed"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	return strings.Join(parts, ", ")
}

func sortNodeStatus(ns []v1alpha1.NodeStatus) {
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && (ns[j].Wave < ns[j-1].Wave || (ns[j].Wave == ns[j-1].Wave && ns[j].Name < ns[j-1].Name)); j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
}

func bar(done, total int32, width int) string {
	if total <= 0 {
		return "[" + strings.Repeat(".", width) + "]"
	}
	n := int(int64(done) * int64(width) / int64(total))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// trunc cuts s to at most n runes, marking a cut with "…": by runes, not
// bytes, so a verdict's "→" is never split into invalid UTF-8.
func trunc(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
