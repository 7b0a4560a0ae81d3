package planner

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/roster"
)

// ActionKind is what the executor is asked to do with one node.
type ActionKind string

const (
	// ActStart persists Preflight on the node and starts its steps.
	ActStart ActionKind = "Start"
	// ActResume keeps driving a node whose persisted step is in flight.
	ActResume ActionKind = "Resume"
	// ActMarkDone records a node already on the newest revisions of every target.
	ActMarkDone ActionKind = "MarkDone"
	// ActRollback swaps an upgraded node back to the (restored) newest revision.
	ActRollback ActionKind = "Rollback"
	// ActMarkRolledBack records a node already back on the restored revision.
	ActMarkRolledBack ActionKind = "MarkRolledBack"
	// ActRetry resets a node to Pending: a failed one after `nodewise resume`
	// cleared a halt, a done one whose revision is no longer the newest.
	ActRetry ActionKind = "Retry"
	// ActPrepull creates the node's pre-pull pod (orchestrator/prepull);
	// ActPrepullDone deletes it once the node has started or finished.
	ActPrepull     ActionKind = "Prepull"
	ActPrepullDone ActionKind = "PrepullDone"
	// ActForget ends the status entry of a node deleted while in flight
	// (Skipped, with the reason): there is no Node left to record on.
	ActForget ActionKind = "Forget"
)

// Action is one step the executor takes.
type Action struct {
	Kind   ActionKind
	Node   string
	Reason string
}

// Decision is the planner's answer: the phase to record, why, the full ordered
// plan, and the actions to take now.
type Decision struct {
	Phase   v1alpha1.RolloutPhase
	Reason  string
	Order   []PlannedNode
	Actions []Action
	// Held maps each node another maintenance tool holds to why (locks.go),
	// shown as its status reason while it waits.
	Held map[string]string
	// NextWindow is when nodes may start next (windows, blackouts,
	// notBefore), if waiting for that.
	NextWindow time.Time
	// Promotion is what the upstream clusters still lack before the
	// rollout may start (spec.promotion), "" when nothing.
	Promotion string
	// Precheck is what the precheck found before the first start, "" when
	// nothing.
	Precheck string
	// MaxParallel and MaxUnavailable are the policy's limits resolved
	// against the selected nodes (a percentage scales with them).
	MaxParallel, MaxUnavailable int
}

// selectedNodes are the snapshot's nodes the rollout's selector picks.
func selectedNodes(s model.Snapshot, p model.Policy) []model.NodeView {
	selected := make([]model.NodeView, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		if p.Selector == nil || p.Selector.Matches(model.LabelSet(n.Labels)) {
			selected = append(selected, n)
		}
	}
	return selected
}

func known(r *roster.Roster, name string) bool { _, ok := r.Index(name); return ok }

// unknownInFlight are the entries of st in flight whose nodes r has no view
// of. None are looked for when st's counts (of its entries alone) find no
// entry in flight but those of nodes r has in flight, at their places.
func unknownInFlight(r *roster.Roster, st v1alpha1.NodeRolloutStatus) (out []v1alpha1.NodeStatus) {
	k := 0
	for _, i := range r.InFlight() {
		if p, ok := r.Pos(i); ok && p < len(st.Nodes) && st.Nodes[p].Name == r.Node(i).Name && model.InFlight(st.Nodes[p].State) {
			k++
		}
	}
	for j := 0; (int(st.Counts.Total) != len(st.Nodes) || int(st.Counts.InProgress) != k) && j < len(st.Nodes); j++ {
		if ns := st.Nodes[j]; model.InFlight(ns.State) && !known(r, ns.Name) {
			out = append(out, ns)
		}
	}
	return out
}

// ValidateTargets checks the targets exist and use OnDelete. A target without
// a ControllerRevision yet is not settled: the plan waits for it (Plan).
func ValidateTargets(targets []model.TargetView) error {
	var errs []error
	for _, t := range targets {
		switch {
		case !t.Found:
			errs = append(errs, fmt.Errorf("DaemonSet %s not found", t.Key()))
		case t.Strategy != appsv1.OnDeleteDaemonSetStrategyType:
			errs = append(errs, fmt.Errorf("DaemonSet %s uses updateStrategy %s: nodewise never edits a template; install the chart with the Helm value updateStrategy.type=OnDelete (e.g. --set updateStrategy.type=OnDelete) and re-apply", t.Key(), t.Strategy))
		}
	}
	return errors.Join(errs...)
}

// Plan decides the next actions from a snapshot, a policy and the time. It is
// pure: it reads nothing else and changes nothing.
func Plan(s model.Snapshot, p model.Policy, now time.Time) Decision {
	return PlanFrom(NewRoster(s, p), s, p, now)
}

// NewRoster keeps s's nodes (the slice itself) with what a plan by p reads
// of each (factsOf), for PlanFrom.
func NewRoster(s model.Snapshot, p model.Policy) *roster.Roster {
	return roster.New(s.Nodes, func(n model.NodeView) roster.Facts { return factsOf(n, p, s.Targets) })
}

// PlanFrom is Plan with s's nodes as r keeps them (NewRoster, then
// roster.Update for each node changed since): it walks only the nodes it
// may act on, those waiting, and the current window, and decides exactly
// what Plan decides.
func PlanFrom(r *roster.Roster, s model.Snapshot, p model.Policy, now time.Time) Decision {
	nsel, failed, others, done := r.Counts()
	maxParallel, maxUnavailable := p.MaxParallel.Of(nsel), p.MaxUnavailable.Of(nsel)
	if key := fmt.Sprint(maxParallel, p.Canaries); r.Stale(key) {
		order, missing := Order(r.Selected(), p.Canaries, maxParallel)
		r.Arrange(key, order, missing)
	}
	order, missing := r.Order()
	d := Decision{Order: order, MaxParallel: maxParallel, MaxUnavailable: maxUnavailable}

	// A pre-pull pod has done its work once its node is under way.
	for _, i := range r.PrepullDone() {
		d.Actions = append(d.Actions, Action{Kind: ActPrepullDone, Node: r.Node(i).Name})
	}
	// Nodes in flight always finish, whatever else is true: a node
	// relabelled out of the selector too (its worker makes it safe), and it
	// counts against maxUnavailable until it is.
	inflight := len(r.InFlight())
	for _, i := range r.InFlight() {
		d.Actions = append(d.Actions, Action{Kind: ActResume, Node: r.Node(i).Name})
	}
	// A node deleted while in flight has no record left to resume from: its
	// status entry ends, or it would read in flight forever.
	forgets := 0
	for _, ns := range unknownInFlight(r, s.Status) {
		d.Actions = append(d.Actions, Action{Kind: ActForget, Node: ns.Name, Reason: "node deleted during its " + string(ns.State) + " step"})
		forgets++
	}

	if p.Invalid != "" {
		return stopped(s, p, d, inflight, forgets)
	}
	var problems []error
	// A canary that is gone (deleted, relabelled out) once the rollout has
	// started is left out of the order; before, it is a mistake in the spec.
	if len(missing) > 0 && s.Status.StartTime == nil {
		problems = append(problems, fmt.Errorf("canary nodes not found or not selected: %s", strings.Join(missing, ", ")))
	}
	if err := ValidateTargets(s.Targets); err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		d.Phase, d.Reason = v1alpha1.PhasePending, OneLine(errors.Join(problems...))
		return d
	}

	for _, t := range s.Targets {
		if !t.Settled {
			// Right after a chart is applied the DaemonSet controller may not have
			// written the new ControllerRevision yet: nothing is "newest" until it has.
			d.Phase, d.Reason = v1alpha1.PhaseProgressing, fmt.Sprintf("waiting for the DaemonSet controller to observe %s", t.Key())
			return d
		}
	}
	if p.Rollback {
		return planRollback(s, p, d, r, inflight)
	}
	if p.Abort {
		d.Phase, d.Reason = v1alpha1.PhaseAborted, "aborted by the user"
		if inflight > 0 {
			d.Phase, d.Reason = v1alpha1.PhaseProgressing, fmt.Sprintf("aborting: making %d in-flight node(s) safe", inflight)
		}
		return d
	}
	for _, t := range s.Targets {
		if why := t.OffVersion(p.Version); why != "" {
			d.Phase, d.Reason = v1alpha1.PhaseHalted, why
			return d
		}
	}
	if failed > 0 || s.Status.Phase == v1alpha1.PhaseHalted {
		selected := r.Selected()
		if s.ResumeRequested {
			for _, n := range selected {
				if n.State == v1alpha1.NodeFailed {
					d.Actions = append(d.Actions, Action{Kind: ActRetry, Node: n.Name, Reason: "halt cleared by resume"})
				}
			}
			d.Phase, d.Reason = v1alpha1.PhaseProgressing, "resumed after a halt"
			return d
		}
		d.Phase, d.Reason = v1alpha1.PhaseHalted, s.Status.HaltReason
		if d.Reason == "" {
			d.Reason = failedReason(selected)
		}
		return d
	}

	// Nodes already on the newest revisions are done without disruption;
	// done counts the finished (factsOf), current is the lowest window with
	// unfinished work.
	current := r.Current()
	skipWhy := map[string]string{}
	for _, pos := range r.Visit() {
		n, _ := r.At(pos)
		st := n.State
		if (st == "" || st == v1alpha1.NodePending) && n.UpToDate(s.Targets) && !n.Retried {
			d.Actions = append(d.Actions, Action{Kind: ActMarkDone, Node: n.Name, Reason: "already on the newest revision"})
			st = v1alpha1.NodeDone
		}
		if st == v1alpha1.NodeDone {
			// A template changed again mid-rollout: a node done on the
			// revision before is not done on the newest; it goes again.
			if why, ok := behind(*n, s.Targets); ok {
				d.Actions = append(d.Actions, Action{Kind: ActRetry, Node: n.Name, Reason: why})
				st = v1alpha1.NodePending
			}
		}
		if why := notReadyExpired(*n, p, now); why != "" && (st == "" || st == v1alpha1.NodePending) {
			d.Actions = append(d.Actions, Action{Kind: ActSkip, Node: n.Name, Reason: why})
			skipWhy[n.Name] = why
			done++
		}
	}
	if current == 0 {
		current = -1 // only NotReady nodes left: none starts
	}
	if len(order) == 0 && s.Status.StartTime == nil {
		d.Phase, d.Reason = v1alpha1.PhaseFailed, noneSelected(p)
		return d
	}
	if done == len(order) {
		if forgets > 0 {
			// Not Completed yet: a completed rollout is not planned again,
			// and the deleted nodes' entries would read in flight forever.
			d.Phase, d.Reason = v1alpha1.PhaseProgressing, fmt.Sprintf("ending the status of %d node(s) deleted in flight", forgets)
			return d
		}
		var skipped []string
		for pos := range order {
			if n, _ := r.At(pos); n.State == v1alpha1.NodeSkipped || skipWhy[n.Name] != "" {
				skipped = append(skipped, n.Name)
			}
		}
		d.Phase, d.Reason = v1alpha1.PhaseCompleted, fmt.Sprintf("%d node(s) on the newest revision", done-len(skipped))
		if sk := skippedSummary(skipped, skipWhy, s.Status); sk != "" {
			d.Reason += ", " + sk
		}
		return d
	}

	// Promotion holds the first start only: once a node has started, the
	// rollout is under way and goes on by its own judge.
	if s.PromotionHold != "" && s.Status.StartTime == nil {
		d.Phase, d.Reason, d.Promotion = v1alpha1.PhasePending, "waiting for promotion: "+s.PromotionHold, s.PromotionHold
		return d
	}
	// So does the precheck: it fails closed, and nothing is cordoned.
	if s.PrecheckHold != "" && s.Status.StartTime == nil {
		d.Phase, d.Reason, d.Precheck = v1alpha1.PhasePending, s.PrecheckHold, s.PrecheckHold
		return d
	}
	switch {
	case p.Paused:
		d.Phase, d.Reason = v1alpha1.PhasePaused, "paused by the user"
		return d
	case p.Closed(now) != "":
		d.Phase, d.Reason = v1alpha1.PhaseWaitingForWindow, p.Closed(now)
		if next, ok := p.NextOpening(now); ok {
			d.NextWindow = next
			d.Reason += "; next opens " + next.UTC().Format(time.RFC3339)
		}
		if inflight > 0 {
			d.Phase = v1alpha1.PhaseProgressing
			d.Reason = fmt.Sprintf("finishing %d in-flight node(s); %s", inflight, d.Reason)
		}
		return d
	}

	if len(s.UnreadableLocks) > 0 {
		d.Phase, d.Reason = v1alpha1.PhaseProgressing, "no node starts: "+strings.Join(s.UnreadableLocks, "; ")
		return d
	}
	if s.AlertsBlock != "" {
		d.Phase, d.Reason = v1alpha1.PhaseProgressing, "no node starts: "+s.AlertsBlock
		return d
	}

	// Within the current window, nodes start in plan order as slots free,
	// with the nodes other maintenance holds counted (locks.go).
	if !p.CountOthers {
		others = 0
	}
	slots := d.MaxParallel - inflight - failed
	budget := d.MaxUnavailable - others - inflight - failed
	wave := 0
	var held []string
	lifted, moved := opportunistic(r, order, p, current)
	lo, hi := r.Span(current)
	for i, pos := range slices.Concat(lifted, walkOrder(r.Held(), lo, hi, lifted)) {
		hoisted := i < len(lifted)
		if _, waits := slices.BinarySearch(r.Held(), pos); slots <= 0 && wave != 0 && !hoisted && !waits {
			continue // no slot left and the wave known: in the window, only a waiting node has more to say
		}
		pn := order[pos]
		if hoisted {
			pn.Window = current
		}
		n, f := r.At(pos)
		due := f.Due
		// A node that waits (another tool holds it, NotReady) says so in
		// status whatever its window.
		if f.Held {
			why := waitReason(*n)
			held = append(held, n.Name+" "+why)
			if d.Held == nil {
				d.Held = map[string]string{}
			}
			d.Held[n.Name] = why
			continue
		}
		if pn.Window != current {
			continue
		}
		if wave == 0 && !hoisted && !model.Terminal(n.State) {
			wave = pn.Wave // the lowest wave with unfinished work, for the reason
		}
		if due {
			// A node someone else has cordoned is unavailable already:
			// swapping it takes a slot but no more of the budget.
			if slots <= 0 {
				continue
			}
			out := p.CountOthers && heldByOthers(*n)
			if budget <= 0 && !out {
				continue
			}
			// With prepull, a node starts only once its new images are on
			// it; a pull that failed halts before any cordon.
			if p.Prepull && !n.Prepull.Pulled {
				if n.Prepull.Failed != "" {
					d.Phase, d.Reason = v1alpha1.PhaseHalted, n.Prepull.Failed
					d.Actions = slices.DeleteFunc(d.Actions, func(a Action) bool { return a.Kind == ActStart })
					return d
				}
				if !n.Prepull.Exists || n.Prepull.Missing {
					d.Actions = append(d.Actions, Action{Kind: ActPrepull, Node: n.Name})
				}
				slots-- // the slot is the node's while its images come
				if !out {
					budget--
				}
				continue
			}
			if n.Prepull.Exists {
				// Gone before the node starts: a drain would not evict a bare pod.
				d.Actions = append(d.Actions, Action{Kind: ActPrepullDone, Node: n.Name})
			}
			d.Actions = append(d.Actions, Action{Kind: ActStart, Node: n.Name})
			slots--
			if !out {
				budget--
			}
		}
	}
	d.Phase, d.Reason = v1alpha1.PhaseProgressing, fmt.Sprintf("wave %d", wave)
	if others > 0 && budget <= 0 {
		d.Reason += fmt.Sprintf("; %d node(s) unavailable through other maintenance count against maxUnavailable %d", others, d.MaxUnavailable)
	}
	if len(held) > 0 {
		d.Reason += "; waiting: " + strings.Join(held, ", ")
	}
	if len(moved) > 0 {
		d.Reason += "; first, cordoned and drained by someone else: " + strings.Join(moved, ", ")
	}
	return d
}

// planRollback swaps upgraded nodes back in reverse plan order once every
// target's newest revision differs from the one the rollout moved nodes to.
func planRollback(s model.Snapshot, p model.Policy, d Decision, r *roster.Roster, inflight int) Decision {
	if p.Abort {
		// An abort stops a rollback too: no node starts its swap back, the
		// ones in flight are made safe (abortedStep).
		d.Phase, d.Reason = v1alpha1.PhaseAborted, "rollback aborted by the user"
		if inflight > 0 {
			d.Phase, d.Reason = v1alpha1.PhaseProgressing, fmt.Sprintf("aborting the rollback: making %d in-flight node(s) safe", inflight)
		}
		return d
	}
	for _, t := range s.Targets {
		for _, rec := range s.Status.Targets {
			if rec.Namespace == t.Ref.Namespace && rec.Name == t.Ref.Name && rec.Revision == t.NewestHash {
				d.Phase = v1alpha1.PhaseRollingBack
				d.Reason = fmt.Sprintf("waiting for the old template: DaemonSet %s is still at revision %s; re-apply the previous chart (updateStrategy.type=OnDelete)", t.Key(), t.NewestHash)
				return d
			}
		}
	}
	remaining := 0
	budget := min(d.MaxUnavailable, d.MaxParallel) - inflight
	for i := len(d.Order) - 1; i >= 0; i-- {
		n, _ := r.At(i)
		// A Failed node (the one a halt stopped on) may have been swapped
		// too: it goes back like the Done ones.
		if n.State != v1alpha1.NodeDone && n.State != v1alpha1.NodeFailed {
			continue
		}
		if n.UpToDate(s.Targets) {
			d.Actions = append(d.Actions, Action{Kind: ActMarkRolledBack, Node: n.Name, Reason: "already on the restored revision"})
			continue
		}
		remaining++
		if budget > 0 {
			d.Actions = append(d.Actions, Action{Kind: ActRollback, Node: n.Name})
			budget--
		}
	}
	d.Phase, d.Reason = v1alpha1.PhaseRollingBack, fmt.Sprintf("%d node(s) to swap back", remaining)
	if remaining == 0 && inflight == 0 {
		d.Phase, d.Reason = v1alpha1.PhaseRolledBack, "every upgraded node is back on the restored revision"
	}
	return d
}

// behind says which target a node runs a pod of at a revision other than
// the newest (a live pod, so one being recreated from the newest template
// does not count; readiness does not either: a Done node whose pod restarts
// is not swapped again).
func behind(n model.NodeView, targets []model.TargetView) (string, bool) {
	for _, t := range targets {
		p, ok := n.Pods[t.Key()]
		if !t.Settled || t.NewestHash == "" || !ok || p.Terminating || p.Hash == t.NewestHash {
			continue
		}
		return fmt.Sprintf("%s runs revision %s, but the newest is %s (the template changed during the rollout): swapping again", t.Key(), p.Hash, t.NewestHash), true
	}
	return "", false
}

func failedReason(nodes []model.NodeView) string {
	for _, n := range nodes {
		if n.State == v1alpha1.NodeFailed {
			return "node " + n.Name + " failed"
		}
	}
	return "halted"
}

// OneLine flattens a joined error for a one-line message (CLI, status).
func OneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// Counts tallies the node states of a status.
func Counts(nodes []v1alpha1.NodeStatus) v1alpha1.RolloutCounts {
	c := v1alpha1.RolloutCounts{Total: int32(len(nodes))}
	for _, n := range nodes {
		switch {
		case n.State == v1alpha1.NodeDone:
			c.Done++
		case n.State == v1alpha1.NodeSkipped:
			c.Skipped++
		case n.State == v1alpha1.NodeFailed:
			c.Failed++
		case n.State == v1alpha1.NodeRolledBack:
			c.RolledBack++
		case model.InFlight(n.State):
			c.InProgress++
		default:
			c.Pending++
		}
	}
	return c
}
