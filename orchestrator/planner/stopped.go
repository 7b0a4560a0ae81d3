package planner

import (
	"fmt"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// stopped is the decision for a rollout that cannot go on
// (model.Policy.Invalid): no node starts, and the nodes in flight are
// resumed to be made safe (their workers leave with nodestep.LeaveStopped).
// The node list is the status's own: a spec that cannot be read (a
// selector) adds no entry and drops none. An abort still ends it, Aborted
// once nothing is in flight (a deletion lets go then too: fleet.Pass.HoldsNodes).
func stopped(s model.Snapshot, p model.Policy, d Decision, inflight, forgets int) Decision {
	d.Order = make([]PlannedNode, 0, len(s.Status.Nodes))
	for _, ns := range s.Status.Nodes {
		d.Order = append(d.Order, PlannedNode{Name: ns.Name, Zone: ns.Zone, Canary: ns.Canary, Wave: int(ns.Wave)})
	}
	d.Phase, d.Reason = v1alpha1.PhasePending, p.Invalid
	switch {
	case p.Abort && inflight+forgets == 0:
		d.Phase, d.Reason = v1alpha1.PhaseAborted, "aborted by the user"
	case p.Abort:
		d.Reason = fmt.Sprintf("aborting: making %d in-flight node(s) safe; %s", inflight, p.Invalid)
	case inflight > 0:
		d.Reason = fmt.Sprintf("%s; no node starts, making %d in-flight node(s) safe", p.Invalid, inflight)
	}
	return d
}

// noneSelected is why a rollout that selects no node fails: a typo in a
// label would otherwise read as a finished upgrade.
func noneSelected(p model.Policy) string {
	if p.Selector == nil || p.Selector.Empty() {
		return "no node to roll: the cluster has none"
	}
	return fmt.Sprintf("spec.nodeSelector %s matches no node: check its labels (kubectl get nodes -l '%s')", p.Selector, p.Selector)
}
