package demo

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/status"
)

// view is the live progress of one rollout. On a terminal it redraws the
// node table in place; otherwise it prints one line per node step, so a log
// of the run reads top to bottom.
type view struct {
	out    io.Writer
	redraw bool
	states map[string]v1alpha1.NodeState
	phase  v1alpha1.RolloutPhase
}

func newView(out io.Writer, redraw bool) *view {
	return &view{out: out, redraw: redraw, states: map[string]v1alpha1.NodeState{}}
}

func (v *view) show(nr *v1alpha1.NodeRollout) {
	now := time.Now()
	if v.redraw {
		fmt.Fprint(v.out, "\033[H\033[2J")
		fmt.Fprintf(v.out, "%s  current step: %s\n", now.Format("15:04:05"), currentStep(nr))
		_ = status.RenderStatus(v.out, nr, now)
		return
	}
	if nr.Status.Phase != v.phase {
		fmt.Fprintf(v.out, "   %s  rollout %s: phase %s\n", now.Format("15:04:05"), nr.Name, orDash(string(nr.Status.Phase)))
		v.phase = nr.Status.Phase
	}
	for _, n := range nr.Status.Nodes {
		if v.states[n.Name] == n.State {
			continue
		}
		v.states[n.Name] = n.State
		if n.State == v1alpha1.NodePending {
			continue
		}
		canary := ""
		if n.Canary {
			canary = " canary"
		}
		line := fmt.Sprintf("   %s  wave %d  %s (%s%s)  → %s", now.Format("15:04:05"), n.Wave, n.Name, n.Zone, canary, n.State)
		if n.Verdict != "" {
			line += "  verdict: " + n.Verdict
		}
		if n.Reason != "" && (n.Verdict == "" || !strings.Contains(n.Reason, n.Verdict)) { // a gate's reason repeats its verdict
			line += "  reason: " + n.Reason
		}
		fmt.Fprintln(v.out, line)
		if ba := beforeAfter(n.Judgement); ba != "" {
			fmt.Fprintf(v.out, "             before → after (node): %s\n", ba)
		}
	}
}

// beforeAfter is the judge's node-total rows, "metric before → after" each:
// what the node's pods did in the baseline and in the soak.
func beforeAfter(j *v1alpha1.NodeJudgement) string {
	if j == nil {
		return ""
	}
	s := ""
	for _, r := range j.Rows {
		if r.Pod != "" {
			continue
		}
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%s %s → %s", r.Metric, r.Before, r.After)
	}
	return s
}

// final prints the whole node table once the rollout has finished.
func (v *view) final(nr *v1alpha1.NodeRollout) {
	fmt.Fprintln(v.out)
	_ = status.RenderStatus(v.out, nr, time.Now())
}

// currentStep names what the rollout is doing: the nodes in flight and their steps.
func currentStep(nr *v1alpha1.NodeRollout) string {
	s := ""
	for _, n := range nr.Status.Nodes {
		switch n.State {
		case v1alpha1.NodePending, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeRolledBack:
			continue
		}
		if s != "" {
			s += ", "
		}
		s += n.Name + " " + string(n.State)
	}
	if s == "" {
		return string(nr.Status.Phase)
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printSummary(out io.Writer, s Summary, cfg Config) {
	fmt.Fprintf(out, "\n==> summary\n")
	fmt.Fprintf(out, "   cluster up            %s (%d nodes, %d zones)\n", s.ClusterUp.Round(100*time.Millisecond), cfg.Nodes, cfg.Zones)
	fmt.Fprintf(out, "   %s → %s    %s in %s (drain auto)\n", cfg.From, cfg.To, s.HealthyPhase, s.Healthy.Round(time.Second))
	fmt.Fprintf(out, "   ztunnel %s  %s in %s", cfg.FaultyTag, s.FaultyPhase, s.Faulty.Round(time.Second))
	if s.HaltedNode != "" {
		fmt.Fprintf(out, " at node %s", s.HaltedNode)
	}
	fmt.Fprintln(out)
	if s.HaltReason != "" {
		fmt.Fprintf(out, "   halt reason           %s\n", s.HaltReason)
	}
	if sc := s.Sidecar; sc.HealthyPhase != "" {
		fmt.Fprintf(out, "   sidecars %s → %s  %s in %s (adopted: %s)\n", cfg.From, cfg.To, sc.HealthyPhase, sc.Healthy.Round(time.Second), strings.Join(sc.Adopted, ", "))
		fmt.Fprintf(out, "   sidecars %s  %s in %s", cfg.SidecarFaulty, sc.FaultyPhase, sc.Faulty.Round(time.Second))
		if sc.HaltedWave != "" {
			fmt.Fprintf(out, " at wave %s", sc.HaltedWave)
		}
		fmt.Fprintln(out)
		if sc.HaltReason != "" {
			fmt.Fprintf(out, "   sidecar halt reason   %s\n", sc.HaltReason)
		}
	}
	if s.DataPlane != "" {
		fmt.Fprintf(out, "   traffic ground truth  %s\n", s.DataPlane)
		fmt.Fprintf(out, "     during %s → %s   %s\n", cfg.From, cfg.To, s.HealthyTruth)
		fmt.Fprintf(out, "     during %s  %s\n", cfg.FaultyTag, s.FaultyTruth)
	} else {
		fmt.Fprintf(out, "   traffic               none (the pods ran without a live data plane)\n")
	}
	fmt.Fprintf(out, "   total                 %s\n", s.Total.Round(time.Second))
}
