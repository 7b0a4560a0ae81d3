package orchestrator

import (
	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
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
