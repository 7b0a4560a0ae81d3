package planner

import (
	"fmt"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// RequestDecision is what a node request (`nodewise retry`, `nodewise
// skip`) comes to: the state to record on the node (none when it is already
// there), or why it is refused.
type RequestDecision struct {
	// State and Reason are recorded on the node (State "": nothing to do).
	State  v1alpha1.NodeState
	Reason string
	// Refused says why nothing is done ("" when the request stands).
	Refused string
	// ClearsHalt: the rollout is halted and the request leaves no failed
	// node, so the halt (that node's failure) ends with it.
	ClearsHalt bool
}

// DecideRequest decides a node request from the snapshot (the node's state
// read from its record first, as the workers do). It is pure.
func DecideRequest(s model.Snapshot, p model.Policy, r model.NodeRequest) RequestDecision {
	refuse := func(format string, args ...any) RequestDecision {
		return RequestDecision{Refused: fmt.Sprintf("%s of node %s refused: ", r.Verb, r.Node) + fmt.Sprintf(format, args...)}
	}
	switch {
	case p.Abort:
		return refuse("the rollout is aborted")
	case p.Rollback:
		return refuse("the rollout is rolling back")
	}
	var node *model.NodeView
	failed := 0
	for _, n := range selectedNodes(s, p) {
		if n.Name == r.Node {
			node = &n
		}
		if n.State == v1alpha1.NodeFailed {
			failed++
		}
	}
	if node == nil {
		return refuse("no such node in the rollout (not found, or not selected by spec.nodeSelector)")
	}
	want := v1alpha1.NodePending
	if r.Verb == model.VerbSkip {
		want = v1alpha1.NodeSkipped
	}
	if node.State == want && (want == v1alpha1.NodeSkipped || node.Retried) {
		return RequestDecision{} // done already (the request acted on before a restart)
	}
	if why := model.RequestRefusal(r.Verb, node.State); why != "" {
		return refuse("%s", why)
	}
	if r.Verb == model.VerbSkip && node.State == v1alpha1.NodeFailed && node.Unschedulable {
		return refuse("it is cordoned (a swap that failed leaves its node for a person to look at): retry it, or uncordon it first")
	}
	by := r.By
	if by == "" {
		by = "an unknown user"
	}
	d := RequestDecision{State: want, Reason: fmt.Sprintf("retried by %s", by)}
	if r.Verb == model.VerbSkip {
		d.Reason = fmt.Sprintf("skipped by %s: %s", by, r.Reason)
	}
	if r.Verb == model.VerbRetry && r.Reason != "" {
		d.Reason += ": " + r.Reason
	}
	left := failed
	if node.State == v1alpha1.NodeFailed {
		left--
	}
	d.ClearsHalt = s.Status.Phase == v1alpha1.PhaseHalted && left == 0
	return d
}
