package orchestrator

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// A NodeRollout that has started a node carries FinalizerReleaseNodes, so
// deleting it is an abort first: its in-flight nodes are made safe (a
// started swap finishes, the node is uncordoned) before the object goes.
// Without it, `kubectl delete noderollout` mid-drain would leave cordoned
// nodes that no rollout owns any more.

// holdsNodes says the decision starts or drives a node: the rollout must
// hold its finalizer before it acts.
func holdsNodes(d planner.Decision) bool {
	for _, a := range d.Actions {
		switch a.Kind {
		case planner.ActStart, planner.ActResume, planner.ActRollback:
			return true
		}
	}
	return false
}

// releasable says a deleted rollout has nothing left to make safe: no node
// in flight in the snapshot, and no worker of it running in this process.
func (e *executor) releasable(nr *v1alpha1.NodeRollout, snap model.Snapshot) bool {
	for _, n := range snap.Nodes {
		if model.InFlight(n.State) {
			return false
		}
	}
	return !e.claims.Holds(nr.Name)
}

// heldNodes is, for a rollout that cannot be observed under its policy (an
// invalid spec), the nodes it may still hold, read the one way (nodeState):
// every node of the cache with a status entry or a record of the rollout.
func (e *executor) heldNodes(nr *v1alpha1.NodeRollout) model.Snapshot {
	var snap model.Snapshot
	status := map[string]v1alpha1.NodeState{}
	for _, ns := range nr.Status.Nodes {
		status[ns.Name] = ns.State
	}
	if nodes, err := e.nodes.List(labels.Everything()); err == nil {
		for _, n := range nodes {
			rec := nodestep.ParseRecord(n.Annotations)
			if rec.RolloutUID != nr.UID && status[n.Name] == "" {
				continue
			}
			st, _ := nodestep.NodeState(e.claims.Claimed(nr.Name, n.Name), rec, nr.UID, status[n.Name])
			snap.Nodes = append(snap.Nodes, model.NodeView{Name: n.Name, State: st})
		}
	}
	return snap // a node deleted holds nothing (ActForget, for a valid rollout)
}
