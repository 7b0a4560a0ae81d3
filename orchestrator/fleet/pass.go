package fleet

import (
	"context"
	"errors"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/roster"
	"github.com/nodewise/nodewise/orchestrator/standing"
)

// Pass is one reconcile pass of a NodeRollout, decided: what it planned
// from and every effect it has, which the applier carries out in this
// order: Kured's lock released (Finished, and nothing else); the requests
// recorded with who asked; the node request acted on (and the pass ends);
// nothing more when NotYet; Kured's lock held for KuredNodes; the
// finalizer added; the decision's node actions; the resume acknowledged;
// the phase and node list written; the finalizer removed.
type Pass struct {
	// Finished: the rollout finished and its spec did not change since.
	Finished bool
	Deleting bool
	// Requests are the verbs asked of the rollout whose asker is not yet
	// recorded (model.DueRequests).
	Requests []v1alpha1.VerbRequest
	Policy   model.Policy
	Snap     model.Snapshot
	// Inputs are what the snapshot's node views were built from; Kept is
	// the views it came from (nil: the fleet was observed anew); Roster
	// keeps the snapshot's nodes with what the plan reads of each (Kept's,
	// or made for this pass).
	Inputs *Inputs
	Kept   *View
	Roster *roster.Roster
	// Request is a pending `nodewise retry` or `skip`, decided; IgnoredRequest
	// is why one could not be read.
	Request        *NodeRequest
	IgnoredRequest error
	// NotYet says why the rollout cannot complete yet: the DaemonSet cache
	// is behind the API on a target (a rollout applied right after its
	// template changed would complete having swapped nothing).
	NotYet   string
	Decision planner.Decision
	// KuredNodes are the nodes to hold Kured's lock for: those in flight
	// and those the plan starts (none: the lock is released).
	KuredNodes []string
}

// NodeRequest is a pending node request and its decision.
type NodeRequest struct {
	model.NodeRequest
	planner.RequestDecision
}

// Pass observes nr's fleet (from kept, the views of its last pass, when
// given) and decides the pass. It reads the caches, the API server's copy
// of the targets when the plan completes, and the blocking alerts; it
// writes nothing.
func (o *Observer) Pass(ctx context.Context, nr *v1alpha1.NodeRollout, kept *View) (*Pass, error) {
	deleting := nr.DeletionTimestamp != nil
	switch nr.Status.Phase {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseAborted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseFailed, v1alpha1.PhaseIdle:
		if nr.Status.ObservedGeneration == nr.Generation && !deleting && (nr.Status.Phase != v1alpha1.PhaseIdle || !o.wakes(nr)) {
			return &Pass{Finished: true}, nil // a spec change (e.g. rollback) wakes it
		}
	}
	now := o.Now()
	ps := &Pass{Deleting: deleting, Requests: model.DueRequests(nr, metav1.NewTime(now)), Policy: o.policy(nr)}
	p := ps.Policy
	if kept != nil && kept.In != nil {
		ps.Snap, ps.Inputs, ps.Kept, ps.Roster = kept.Snapshot(nr), kept.In, kept, kept.Roster
	} else {
		var err error
		if ps.Snap, ps.Inputs, err = o.Observe(nr, p); err != nil {
			return nil, err
		}
		ps.Roster = planner.NewRoster(ps.Snap, p)
	}
	ps.Snap.AlertsBlock = o.alertsBlock(ctx, p.Blocking) // read here, not in the workers' snapshots
	if standing.Due(nr.Status, nr.Spec, ps.Snap.Targets) {
		ps.Snap.Status.StartTime = nil // a standing policy's next run plans as a new rollout: promotion holds its first start
	}
	if nr.Spec.Promotion != nil && ps.Snap.Status.StartTime == nil && !deleting {
		ps.Snap.PromotionHold = "this process reads no upstream cluster"
		if o.Promotion != nil {
			ps.Snap.PromotionHold = o.Promotion(ctx, nr, ps.Snap.Targets)
		}
	}
	if o.Precheck != nil && ps.Snap.Status.StartTime == nil && ps.Snap.PromotionHold == "" && !deleting {
		var nodes []string
		for _, n := range ps.Snap.Nodes {
			if p.Selector == nil || p.Selector.Matches(model.LabelSet(n.Labels)) {
				nodes = append(nodes, n.Name)
			}
		}
		ps.Snap.PrecheckHold = o.Precheck(ctx, nr, ps.Snap.Targets, nodes)
	}
	if !deleting {
		r, pending, err := model.PendingNodeRequest(nr.Annotations)
		switch {
		case err != nil:
			ps.IgnoredRequest = err
		case pending:
			ps.Request = &NodeRequest{r, planner.DecideRequest(ps.Snap, p, r)}
			return ps, nil // the next pass plans from the node's new state
		}
	}
	ps.Decision = planner.PlanFrom(ps.Roster, ps.Snap, p, now)
	if ps.Decision.Phase == v1alpha1.PhaseCompleted && nr.Status.Phase != v1alpha1.PhaseCompleted {
		// Completed is final: the rollout's and the DaemonSet's watches
		// have no order between them, so the plan may predate the new
		// template in the cache.
		behind, err := o.targetsBehind(ctx, p.Targets)
		if err != nil {
			return nil, err
		}
		if ps.NotYet = behind; behind != "" {
			return ps, nil // the DaemonSet's event starts the next pass
		}
	}
	ps.KuredNodes = kuredNodes(p, ps.Roster, ps.Decision)
	return ps, nil
}

// wakes says an idle standing policy plans again (standing.Wake): a new
// revision of a target, or a target gone or off OnDelete. A target that
// cannot be read wakes it too: the pass says why.
func (o *Observer) wakes(nr *v1alpha1.NodeRollout) bool {
	p, err := model.NewPolicy(nr.Spec)
	if err != nil {
		return true
	}
	var targets []model.TargetView
	for _, ref := range p.Targets {
		tv, err := o.Targets.Target(ref)
		if err != nil {
			return true
		}
		targets = append(targets, tv)
	}
	return standing.Wake(nr.Status, targets) != ""
}

// policy is nr's policy, its targets typed; an invalid one (a bad spec,
// targets outside the Istio namespace, nodes another rollout has) says why
// in Invalid: no node starts, those in flight are made safe. A deleted
// rollout aborts.
func (o *Observer) policy(nr *v1alpha1.NodeRollout) model.Policy {
	p, perr := model.NewPolicy(nr.Spec)
	p.ZtunnelSwap = o.ZtunnelSwap
	p, terr := o.typeTargets(p) // the kinds name the steps of nodes in flight too
	if perr = errors.Join(perr, terr, planner.TargetsInNamespace(p.Targets, o.IstioNamespace)); perr == nil {
		perr = o.Overlapping(nr, p)
	}
	if perr != nil {
		p.Invalid = planner.OneLine(perr)
	} else if nr.DeletionTimestamp != nil {
		p.Abort = true // an invalid one's workers leave by its deletion too
	}
	return p
}

// kuredNodes are the nodes Kured's lock is held for: the rollout's in
// flight and those the plan starts (none when the rollout only honours
// the lock).
func kuredNodes(p model.Policy, r *roster.Roster, d planner.Decision) []string {
	if !p.TakeKuredLock {
		return nil
	}
	var nodes []string
	for _, i := range r.InFlight() {
		nodes = append(nodes, r.Node(i).Name)
	}
	for _, a := range d.Actions {
		if starts(a) && !slices.Contains(nodes, a.Node) {
			nodes = append(nodes, a.Node)
		}
	}
	slices.Sort(nodes)
	return nodes
}

// starts: the action takes a node out of service (its worker cordons it).
func starts(a planner.Action) bool {
	return a.Kind == planner.ActStart || a.Kind == planner.ActRollback
}

// KuredLockRefused drops the plan's starts of nodes not in flight, which
// wait (fail closed) and say why: Kured's lock could not be held for them.
// Nodes already in flight finish.
func (ps *Pass) KuredLockRefused(why string) {
	d := &ps.Decision
	held := make(map[string]string, len(d.Held))
	maps.Copy(held, d.Held)
	d.Actions = slices.DeleteFunc(d.Actions, func(a planner.Action) bool {
		if starts(a) && !slices.ContainsFunc(ps.Snap.Nodes, func(n model.NodeView) bool { return n.Name == a.Node && model.InFlight(n.State) }) {
			held[a.Node] = why
			return true
		}
		return false
	})
	d.Held = held
	d.Reason += "; no node starts: " + why
}

// HoldStarts drops the plan's starts of nodes not in flight, which wait:
// the rollout is in phase (Progressing for a hold, Halted for a halt) with
// reason why. Nodes already in flight finish.
func (ps *Pass) HoldStarts(phase v1alpha1.RolloutPhase, why string) {
	d := &ps.Decision
	inFlight := func(node string) bool {
		return slices.ContainsFunc(ps.Snap.Nodes, func(n model.NodeView) bool { return n.Name == node && model.InFlight(n.State) })
	}
	d.Actions = slices.DeleteFunc(d.Actions, func(a planner.Action) bool { return starts(a) && !inFlight(a.Node) })
	ps.KuredNodes = slices.DeleteFunc(ps.KuredNodes, func(n string) bool { return !inFlight(n) })
	d.Phase, d.Reason = phase, why
}

// Starts says the decision starts a node that is not in flight.
func (ps *Pass) Starts() bool {
	for _, a := range ps.Decision.Actions {
		if a.Kind == planner.ActStart {
			return true
		}
	}
	return false
}

// CanariesDone says every canary node of the policy is done (or skipped).
func (ps *Pass) CanariesDone() bool {
	for _, c := range ps.Policy.Canaries {
		if !slices.ContainsFunc(ps.Snap.Nodes, func(n model.NodeView) bool { return n.Name == c && model.Terminal(n.State) }) {
			return false
		}
	}
	return true
}

// HoldsNodes says the decision starts or drives a node: the rollout must
// hold its finalizer (model.FinalizerReleaseNodes) before it acts, so that
// deleting it is an abort first (its in-flight nodes made safe) and not
// cordoned nodes no rollout owns.
func (ps *Pass) HoldsNodes() bool {
	for _, a := range ps.Decision.Actions {
		switch a.Kind {
		case planner.ActStart, planner.ActResume, planner.ActRollback:
			return true
		}
	}
	return false
}

// AcksResume says the pass acknowledges a resume request: the rollout is
// valid and no longer halted.
func (ps *Pass) AcksResume() bool {
	return ps.Snap.ResumeRequested && ps.Decision.Phase != v1alpha1.PhaseHalted && ps.Policy.Invalid == ""
}

// NoneInFlight says no node of the snapshot is in flight: a deleted
// rollout's finalizer may go once no worker of it runs either.
func (ps *Pass) NoneInFlight() bool {
	return !slices.ContainsFunc(ps.Snap.Nodes, func(n model.NodeView) bool { return model.InFlight(n.State) })
}

// NextInLine are the nodes whose skew check may run ahead (planner.NextInLine).
func (ps *Pass) NextInLine() []string {
	return planner.NextInLineFrom(ps.Roster, ps.Decision)
}
