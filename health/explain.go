package health

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Explanation is what `nodewise explain` prints for one node: the node's
// entry in NodeRollout status, with the judgement as the judge persisted it.
type Explanation struct {
	Rollout   string
	Node      string
	State     string   // the node's state in the rollout, such as Done or Failed
	Verdict   string   // the verdict's line the orchestrator recorded: outcome and headline
	Detail    []string // every reason behind the verdict
	Judgement *v1alpha1.NodeJudgement
}

// WriteExplain prints a node's verdict, its headline first, then the
// detail as tables: the judgement's figures, one row per metric of the
// node's totals and of the pods with the smallest p-values (regressions
// first), then every reason behind the verdict, one a line.
func WriteExplain(w io.Writer, j Explanation) error {
	var b strings.Builder
	fmt.Fprintf(&b, "NodeRollout %s, node %s", j.Rollout, j.Node)
	if j.State != "" {
		fmt.Fprintf(&b, ": state %s", j.State)
	}
	b.WriteString("\n")
	if j.Verdict != "" {
		fmt.Fprintf(&b, "verdict: %s\n", j.Verdict)
	}
	s := j.Judgement
	if s == nil {
		b.WriteString("no before/after table recorded for this node (not judged yet, or judged by a gate without figures)\n")
		writeDetail(&b, j.Detail)
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "judgement %d at %s: interval %s, %d failing in a row", s.Judgements, s.JudgedAt, orDash(string(s.IntervalOutcome)), s.ConsecutiveFailures)
	if s.ConsecutiveQueryErrors > 0 {
		fmt.Fprintf(&b, ", %d gate query errors in a row", s.ConsecutiveQueryErrors)
	}
	if s.Decision != "" {
		fmt.Fprintf(&b, "\ndecision: %s", s.Decision)
	}
	fmt.Fprintf(&b, "\nbaseline %ds, soak %ds; %d pods compared", s.BaselineSeconds, s.SoakSeconds, s.PodsCompared)
	if s.PodsNotCompared > 0 {
		fmt.Fprintf(&b, " (%d appeared or left during a window)", s.PodsNotCompared)
	}
	fmt.Fprintf(&b, ", %d tests, %d regressions", s.Tests, s.Regressions)
	if s.PlannedResets > 0 {
		fmt.Fprintf(&b, "; %d planned resets (in-place swap) not counted", s.PlannedResets)
	}
	writeEnrollment(&b, s)
	b.WriteString("\n\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tMETRIC\tBEFORE\tAFTER\tP\tRESULT")
	for _, r := range s.Rows {
		pod := r.Pod
		if pod == "" {
			pod = "(node)"
		}
		result := "ok"
		switch {
		case r.Regressed:
			result = "REGRESSED"
		case r.Note != "":
			result = r.Note
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", pod, metricLabel(r.Metric), r.Before, r.After, orDash(r.P), result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var d strings.Builder
	writeDetail(&d, j.Detail)
	_, err := io.WriteString(w, d.String())
	return err
}

// writeDetail lists a verdict's reasons under a heading, one a line.
func writeDetail(b *strings.Builder, detail []string) {
	if len(detail) == 0 {
		return
	}
	b.WriteString("\nDETAIL (every reason behind the verdict, as its gate gave them)\n")
	for _, r := range detail {
		fmt.Fprintf(b, "  %s\n", r)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
