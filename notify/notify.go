// Package notify tells people about NodeRollouts and RevisionMigrations by
// webhook: each halt (a rollout's failed nodes, a migration's wave, and the
// reason), each completion, each rollout that fails (cannot run at all, and
// why) and each canary node's verdict, every message
// naming the cluster and leading with one headline (a gate's failure: the
// failed node's verdict's headline), with a link to the dashboard's page
// of the node (or of the rollout or migration) when the dashboard's
// address is configured, in a Slack-compatible shape ({"text": ...}) or a
// generic JSON one, through a retrying HTTP client. It watches their status
// from outside the controllers (observe, diff, send), so it needs nothing but
// read access to both kinds; run it under its own Lease so one replica sends.
// The PodAgePolicy controller sends its notices (a team's workloads to be
// restarted, and from when) through SendTo, to each team's own webhook.
package notify

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Kind is what happened.
type Kind string

// Kinds of Event.
const (
	Halted    Kind = "halted"
	Completed Kind = "completed"
	Failed    Kind = "failed"  // a rollout that cannot run at all (Failed), and why
	Verdict   Kind = "verdict" // a canary node's gate verdict
	// Notice tells a team ahead of time that a PodAgePolicy will restart
	// its workloads, and from when.
	Notice Kind = "notice"
)

// Event is one message: the generic shape as JSON.
type Event struct {
	Kind Kind `json:"kind"`
	// Cluster names the cluster the event happened in (Config.Cluster).
	Cluster string `json:"cluster"`
	// Rollout names a NodeRollout's event, Migration a RevisionMigration's.
	Rollout   string `json:"rollout,omitempty"`
	Migration string `json:"migration,omitempty"`
	// Policy names a PodAgePolicy's notice; Team is the team told, and
	// Workloads what will be restarted ("Deployment ns/name").
	Policy    string   `json:"policy,omitempty"`
	Team      string   `json:"team,omitempty"`
	Workloads []string `json:"workloads,omitempty"`
	// Wave is a migration's current wave (halted: the wave that failed).
	Wave    string   `json:"wave,omitempty"`
	Nodes   []string `json:"nodes,omitempty"` // halted: the failed nodes; verdict: the canary
	Reason  string   `json:"reason,omitempty"`
	Verdict string   `json:"verdict,omitempty"`
	// Headline is the one line the message leads with, at most
	// headlineMax characters: a halt's or a failure's reason (for a gate's
	// failure, the failed node's verdict and its headline, such as
	// "gate Fail: probe: resets sent 0/s → 3.1/s (p<0.001)"), a canary's
	// verdict.
	Headline string `json:"headline,omitempty"`
	// Link is the dashboard's page of what the event is about: the failed
	// node's (one failed node) or the canary's, else the rollout's or the
	// migration's; empty without Config.DashboardURL.
	Link string    `json:"link,omitempty"`
	Time time.Time `json:"time"`
}

// headlineMax bounds Event.Headline, in characters, as the CLI's HALTED
// line: a verdict's headline (at most 160) with what it is.
const headlineMax = 200

// headlineOf is reason's first line within headlineMax, without the
// "node NAME: " a halt reason starts with when the event names that one
// node already.
func headlineOf(reason string, nodes []string) string {
	line, _, _ := strings.Cut(reason, "\n")
	if len(nodes) == 1 {
		line = strings.TrimPrefix(line, "node "+nodes[0]+": ")
	}
	if r := []rune(line); len(r) > headlineMax {
		line = string(r[:headlineMax-1]) + "…"
	}
	return line
}

// Text is the one-line human form (the Slack message): what happened,
// its headline (the reason or the verdict, when the event has none), and
// the dashboard's page.
func (e Event) Text() string {
	text := e.text()
	if e.Link != "" {
		text += " " + e.Link
	}
	return text
}

func (e Event) text() string {
	from := "nodewise [" + e.Cluster + "]"
	if e.Kind == Notice {
		return fmt.Sprintf(":alarm_clock: %s: PodAgePolicy %s will restart team %s's %s: %s", from, e.Policy, e.Team, strings.Join(e.Workloads, ", "), e.Headline)
	}
	if e.Migration != "" {
		switch e.Kind {
		case Halted:
			return fmt.Sprintf(":octagonal_sign: %s: RevisionMigration %s halted at wave %s: %s", from, e.Migration, e.Wave, cmp.Or(e.Headline, e.Reason))
		default:
			return fmt.Sprintf(":white_check_mark: %s: RevisionMigration %s succeeded", from, e.Migration)
		}
	}
	switch e.Kind {
	case Halted:
		return fmt.Sprintf(":octagonal_sign: %s: NodeRollout %s halted at %s: %s", from, e.Rollout, nodesOr(e.Nodes, "no failed node"), cmp.Or(e.Headline, e.Reason))
	case Completed:
		return fmt.Sprintf(":white_check_mark: %s: NodeRollout %s completed", from, e.Rollout)
	case Failed:
		return fmt.Sprintf(":x: %s: NodeRollout %s failed: %s", from, e.Rollout, cmp.Or(e.Headline, e.Reason))
	default:
		return fmt.Sprintf("%s: NodeRollout %s canary %s: %s", from, e.Rollout, nodesOr(e.Nodes, "?"), cmp.Or(e.Headline, e.Verdict))
	}
}

// page is the dashboard's path for e: the one node's page of a halt at one
// node or of a canary's verdict, else the rollout's or the migration's.
func (e Event) page() []string {
	switch {
	case e.Policy != "":
		return []string{"freshness"}
	case e.Migration != "":
		return []string{"migrations", e.Migration}
	case len(e.Nodes) == 1 && (e.Kind == Halted || e.Kind == Verdict):
		return []string{"rollouts", e.Rollout, "nodes", e.Nodes[0]}
	}
	return []string{"rollouts", e.Rollout}
}

func nodesOr(n []string, none string) string {
	if len(n) == 0 {
		return none
	}
	return strings.Join(n, ", ")
}

// view is what the notifier remembers of a rollout between two looks.
type view struct {
	phase    v1alpha1.RolloutPhase
	verdicts map[string]string // canary node → verdict
}

func viewOf(nr *v1alpha1.NodeRollout) view {
	v := view{phase: nr.Status.Phase, verdicts: map[string]string{}}
	for _, n := range nr.Status.Nodes {
		if n.Canary && n.Verdict != "" {
			v.verdicts[n.Name] = n.Verdict
		}
	}
	return v
}

// changes is the pure decision: the events between two looks at the same
// rollouts. A rollout entering Halted, Completed or Failed gives one event; a
// canary's verdict that is new or different gives one. A rollout not seen
// before counts as coming from nothing (prev lacks it).
func changes(prev map[string]view, cur []v1alpha1.NodeRollout, now time.Time) []Event {
	var out []Event
	for i := range cur {
		nr := &cur[i]
		was, seen := prev[nr.Name]
		v := viewOf(nr)
		if v.phase != was.phase || !seen {
			switch v.phase {
			case v1alpha1.PhaseHalted:
				nodes := failedNodes(nr)
				out = append(out, Event{Kind: Halted, Rollout: nr.Name, Nodes: nodes, Reason: nr.Status.HaltReason, Headline: headlineOf(nr.Status.HaltReason, nodes), Time: now})
			case v1alpha1.PhaseCompleted, v1alpha1.PhaseIdle: // Idle: a standing policy's run completed
				out = append(out, Event{Kind: Completed, Rollout: nr.Name, Time: now})
			case v1alpha1.PhaseFailed:
				out = append(out, Event{Kind: Failed, Rollout: nr.Name, Reason: nr.Status.PhaseReason(), Headline: headlineOf(nr.Status.PhaseReason(), nil), Time: now})
			}
		}
		nodes := make([]string, 0, len(v.verdicts))
		for n := range v.verdicts {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			if was.verdicts[n] != v.verdicts[n] {
				out = append(out, Event{Kind: Verdict, Rollout: nr.Name, Nodes: []string{n}, Verdict: v.verdicts[n], Headline: headlineOf(v.verdicts[n], nil), Time: now})
			}
		}
	}
	// Verdicts before halts and completions of the same rollout read in order.
	slices.SortStableFunc(out, func(a, b Event) int {
		if a.Rollout != b.Rollout {
			return strings.Compare(a.Rollout, b.Rollout)
		}
		return rank(a.Kind) - rank(b.Kind)
	})
	return out
}

// migrationChanges is changes for RevisionMigrations: one event when a
// migration enters Halted (with its wave and the reason) or Succeeded.
func migrationChanges(prev map[string]v1alpha1.MigrationPhase, cur []v1alpha1.RevisionMigration, now time.Time) []Event {
	var out []Event
	for i := range cur {
		rm := &cur[i]
		was, seen := prev[rm.Name]
		if seen && was == rm.Status.Phase {
			continue
		}
		switch rm.Status.Phase {
		case v1alpha1.MigrationHalted:
			wave := ""
			if w := int(rm.Status.CurrentWave); w < len(rm.Status.Waves) {
				wave = rm.Status.Waves[w].Name
			}
			out = append(out, Event{Kind: Halted, Migration: rm.Name, Wave: wave, Reason: rm.Status.Reason, Headline: headlineOf(rm.Status.Reason, nil), Time: now})
		case v1alpha1.MigrationSucceeded:
			out = append(out, Event{Kind: Completed, Migration: rm.Name, Time: now})
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Migration < out[b].Migration })
	return out
}

func rank(k Kind) int {
	if k == Verdict {
		return 0
	}
	return 1
}

func failedNodes(nr *v1alpha1.NodeRollout) []string {
	var out []string
	for _, n := range nr.Status.Nodes {
		if n.State == v1alpha1.NodeFailed {
			out = append(out, n.Name)
		}
	}
	sort.Strings(out)
	return out
}
