package planner

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Retry and skip: what each is allowed on, what it records, and when it
// ends a halt.
func TestDecideRequest(t *testing.T) {
	world := func() model.Snapshot {
		ns := fixture.Fleet(1, 5)
		fixture.SetState(ns, "zone-a-00", v1alpha1.NodeDone)
		fixture.SetState(ns, "zone-a-01", v1alpha1.NodeFailed)
		fixture.SetState(ns, "zone-a-02", v1alpha1.NodeSoak)
		fixture.SetState(ns, "zone-a-03", v1alpha1.NodeFailed)
		ns[3].Unschedulable = true // its swap failed: left cordoned
		return model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType),
			Status: v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted}}
	}
	p := fixture.Policy(t, nil)
	req := func(verb, node string) model.NodeRequest {
		return model.NodeRequest{Token: "t", Verb: verb, Node: node, Reason: "disk to be replaced", By: "alice"}
	}
	cases := []struct {
		verb, node string
		state      v1alpha1.NodeState
		refused    string
		reason     string
	}{
		{model.VerbRetry, "zone-a-01", v1alpha1.NodePending, "", "retried by alice"},
		{model.VerbSkip, "zone-a-04", v1alpha1.NodeSkipped, "", "skipped by alice: disk to be replaced"},
		{model.VerbSkip, "zone-a-01", v1alpha1.NodeSkipped, "", "skipped by alice"},
		{model.VerbSkip, "zone-a-02", "", "in flight (Soak)", ""},
		{model.VerbRetry, "zone-a-02", "", "in flight (Soak)", ""},
		{model.VerbRetry, "zone-a-04", "", "not Failed", ""},
		{model.VerbSkip, "zone-a-00", "", "it is Done", ""},
		{model.VerbSkip, "zone-a-03", "", "it is cordoned", ""},
		{model.VerbSkip, "node-999", "", "no such node in the rollout", ""},
	}
	for _, tc := range cases {
		d := DecideRequest(world(), p, req(tc.verb, tc.node))
		if d.State != tc.state || (tc.refused == "") != (d.Refused == "") || !strings.Contains(d.Refused, tc.refused) || !strings.Contains(d.Reason, tc.reason) {
			t.Errorf("%s %s: %+v, want state %q refused %q reason %q", tc.verb, tc.node, d, tc.state, tc.refused, tc.reason)
		}
		if d.ClearsHalt {
			t.Errorf("%s %s clears the halt with another node still failed", tc.verb, tc.node)
		}
	}
	// The last failed node retried (or skipped): the halt ends with it.
	s := world()
	fixture.SetState(s.Nodes, "zone-a-03", v1alpha1.NodeDone)
	for _, verb := range []string{model.VerbRetry, model.VerbSkip} {
		if d := DecideRequest(s, p, req(verb, "zone-a-01")); !d.ClearsHalt || d.Refused != "" {
			t.Errorf("%s of the last failed node: %+v, want it to end the halt", verb, d)
		}
	}
	// Acted on before a restart: nothing more to do, nothing refused.
	fixture.SetState(s.Nodes, "zone-a-04", v1alpha1.NodeSkipped)
	if d := DecideRequest(s, p, req(model.VerbSkip, "zone-a-04")); d.State != "" || d.Refused != "" {
		t.Errorf("skip of a skipped node: %+v, want nothing to do", d)
	}
	for _, mut := range []func(*v1alpha1.NodeRolloutSpec){
		func(s *v1alpha1.NodeRolloutSpec) { s.Abort = true },
		func(s *v1alpha1.NodeRolloutSpec) { s.Rollback = true },
	} {
		if d := DecideRequest(world(), fixture.Policy(t, mut), req(model.VerbRetry, "zone-a-01")); d.Refused == "" {
			t.Errorf("retry during abort or rollback: %+v, want refused", d)
		}
	}
}
