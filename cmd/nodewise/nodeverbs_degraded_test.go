package main

import (
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestNodeVerbOnANodeADegradedStatusOmits: a status over its budget omits
// entries (status.omitted counts them); skip or retry of a node it does not
// list goes to the orchestrator, which checks the node's own record, and is
// refused only while the status lists every node.
func TestNodeVerbOnANodeADegradedStatusOmits(t *testing.T) {
	nr := &v1alpha1.NodeRollout{Status: v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing,
		Nodes:   []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeSoak}},
		Omitted: &v1alpha1.RolloutCounts{Total: 11999, Pending: 11999}}}
	nr.Name = "fleet"
	r := model.NodeRequest{Verb: "skip", Node: "n7"}
	if err := checkNodeRequest(nr, r); err != nil {
		t.Errorf("skip of a node a degraded status omits: %v", err)
	}
	nr.Status.Omitted = nil
	if err := checkNodeRequest(nr, r); err == nil || !strings.Contains(err.Error(), "no such node") {
		t.Errorf("skip of a node a whole status does not list: %v, want refused", err)
	}
}
