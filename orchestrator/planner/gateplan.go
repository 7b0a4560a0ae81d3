package planner

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// ControlNodes returns the control group the judge compares node i of the
// plan with: the nodes of later windows in its zone (not yet swapped and not
// cordoned while it soaks), or, when its zone has none left, the later
// windows' nodes across the cluster. scope says which ("zone a", "the
// cluster"); none are left for the last window.
func ControlNodes(order []PlannedNode, i int) (nodes []string, scope string) {
	me := order[i]
	var zone, cluster []string
	for _, n := range order {
		if n.Window <= me.Window {
			continue
		}
		cluster = append(cluster, n.Name)
		if n.Zone == me.Zone {
			zone = append(zone, n.Name)
		}
	}
	switch {
	case len(zone) > 0:
		return zone, "zone " + cmp.Or(me.Zone, "-")
	case len(cluster) > 0:
		return cluster, fmt.Sprintf("the cluster (zone %s has none left)", cmp.Or(me.Zone, "-"))
	}
	return nil, ""
}

// PlannedGate is the gate node i of the plan will get, as `nodewise plan`
// prints it: its baseline and soak, and the control group it is judged against.
func PlannedGate(order []PlannedNode, i int, p model.Policy) string {
	if p.Soak == 0 || p.Baseline == 0 {
		return fmt.Sprintf("no before/after judgement (baseline %s, soak %s set explicitly)", p.Baseline, p.Soak)
	}
	w := fmt.Sprintf("baseline %s, soak %s", shortDuration(p.Baseline), shortDuration(p.Soak))
	if p.NoControlGroup {
		return w + ", before/after alone (control group switched off)"
	}
	nodes, scope := ControlNodes(order, i)
	if len(nodes) == 0 {
		return w + ", before/after alone (no control nodes left)"
	}
	plural := "s"
	if len(nodes) == 1 {
		plural = ""
	}
	return fmt.Sprintf("%s, against %d control node%s in %s", w, len(nodes), plural, scope)
}

// PlannedDecision says how the judge decides on each node, as `nodewise
// plan` prints it under the policy ("" when nothing is judged): when a
// node can fail, and that passing takes the whole soak.
func PlannedDecision(p model.Policy) string {
	if p.Soak == 0 || p.Baseline == 0 {
		return ""
	}
	if p.FixedDecision {
		return fmt.Sprintf("Decision: fixed test (gates.method: Fixed): a node is first judged at the end of its %s soak, and fails after gates.consecutiveFailures failing judgements", shortDuration(p.Soak))
	}
	return fmt.Sprintf("Decision: sequential test (gates.method: Sequential): a look every few seconds fails a node as soon as a regression is conclusive; it passes only after its full %s soak", shortDuration(p.Soak))
}

// PlannedBaseline says when a node's preflight waits its baseline, as
// `nodewise plan` prints it under the policy ("" when there is none): only
// where a reader of it needs samples no agent already holds. The readiness
// gate (an orchestrator without a judge: no --agent-ca) reads no baseline,
// so it waits for none; the judge reads it back from the agents' history
// and waits only for what that history does not cover.
func PlannedBaseline(p model.Policy) string {
	if p.Baseline == 0 || p.Soak == 0 {
		return ""
	}
	return fmt.Sprintf("Baseline: %s, waited only where nothing already holds it: skipped under the readiness gate (no judge wired, no --agent-ca: nothing reads a baseline); with the judge, read back from the agents' history at the slot's start and waited for only where that history falls short (a new or restarted agent, a baseline longer than --history-keep)", shortDuration(p.Baseline))
}

// shortDuration prints 5m rather than 5m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Controls is the control group of node as the rollout stands in s: the
// plan's order (Order over the selected nodes), with every later node that
// is no longer a fair control left out before ControlNodes picks (so a zone
// whose remaining nodes are all cordoned falls back to the cluster). A
// control is still Pending in this rollout, schedulable (not cordoned, by
// nodewise or anyone), and not yet on the newest revision of every target.
// It is pure; the worker calls it at a node's preflight and again when
// the node is judged, so a node cordoned or started since is dropped. With
// the control group switched off (spec.gates.controlGroup: Disabled) there
// are none.
func Controls(s model.Snapshot, p model.Policy, node string) (nodes []string, scope string) {
	if p.NoControlGroup {
		return nil, "" // switched off: nothing to sample, nothing to compare with
	}
	selected := selectedNodes(s, p)
	order, _ := Order(selected, p.Canaries, p.MaxParallel.Of(len(selected)))
	view := make(map[string]model.NodeView, len(selected))
	for _, n := range selected {
		view[n.Name] = n
	}
	fair := make([]PlannedNode, 0, len(order))
	me := -1
	for _, pn := range order {
		if pn.Name == node {
			me = len(fair)
			fair = append(fair, pn)
			continue
		}
		if n := view[pn.Name]; (n.State == "" || n.State == v1alpha1.NodePending) && !n.Unschedulable && !(len(s.Targets) > 0 && n.UpToDate(s.Targets)) {
			fair = append(fair, pn)
		}
	}
	if me < 0 {
		return nil, "" // not in the plan (deselected meanwhile): no control group
	}
	return ControlNodes(fair, me)
}
