// Package notify tells people about NodeRollouts by webhook: each halt (with
// the failed nodes and the reason), each completion and each canary node's
// verdict, in a Slack-compatible shape ({"text": ...}) or a generic JSON one,
// through a retrying HTTP client. It watches the rollouts' status from
// outside the orchestrator (observe, diff, send), so it needs nothing but
// read access to NodeRollouts; run it under its own Lease so one replica sends.
package notify

import (
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
	Verdict   Kind = "verdict" // a canary node's gate verdict
)

// Event is one message: the generic shape as JSON.
type Event struct {
	Kind    Kind      `json:"kind"`
	Rollout string    `json:"rollout"`
	Nodes   []string  `json:"nodes,omitempty"` // halted: the failed nodes; verdict: the canary
	Reason  string    `json:"reason,omitempty"`
	Verdict string    `json:"verdict,omitempty"`
	Time    time.Time `json:"time"`
}

// Text is the one-line human form (the Slack message).
func (e Event) Text() string {
	switch e.Kind {
	case Halted:
		return fmt.Sprintf(":octagonal_sign: nodewise: NodeRollout %s halted at %s: %s", e.Rollout, nodesOr(e.Nodes, "no failed node"), e.Reason)
	case Completed:
		return fmt.Sprintf(":white_check_mark: nodewise: NodeRollout %s completed", e.Rollout)
	default:
		return fmt.Sprintf("nodewise: NodeRollout %s canary %s: %s", e.Rollout, nodesOr(e.Nodes, "?"), e.Verdict)
	}
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
// rollouts. A rollout entering Halted or Completed gives one event; a
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
				out = append(out, Event{Kind: Halted, Rollout: nr.Name, Nodes: failedNodes(nr), Reason: nr.Status.HaltReason, Time: now})
			case v1alpha1.PhaseCompleted:
				out = append(out, Event{Kind: Completed, Rollout: nr.Name, Time: now})
			}
		}
		nodes := make([]string, 0, len(v.verdicts))
		for n := range v.verdicts {
			nodes = append(nodes, n)
		}
		sort.Strings(nodes)
		for _, n := range nodes {
			if was.verdicts[n] != v.verdicts[n] {
				out = append(out, Event{Kind: Verdict, Rollout: nr.Name, Nodes: []string{n}, Verdict: v.verdicts[n], Time: now})
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
