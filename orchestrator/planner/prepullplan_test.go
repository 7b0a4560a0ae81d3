package planner

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// With prepull, a node starts only once its images are pulled; a failed pull
// halts with nothing started.
func TestPlanPrepullsBeforeTheStart(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tgts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable, s.Prepull = intstr.FromInt32(1), intstr.FromInt32(1), true
	})
	ns := fixture.Fleet(1, 3)
	d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if len(d.Actions) != 1 || d.Actions[0].Kind != ActPrepull || d.Actions[0].Node != "zone-a-00" {
		t.Fatalf("actions %v, want a pre-pull of zone-a-00 only", d.Actions)
	}
	ns[0].Prepull = model.PrepullView{Exists: true}
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now); len(d.Actions) != 0 {
		t.Fatalf("pulling: actions %v, want none (the slot is taken)", d.Actions)
	}
	// One target's pod is there, another's not yet (a crash between the
	// creates): the pre-pull is made again, which creates the missing one.
	ns[0].Prepull = model.PrepullView{Exists: true, Missing: true}
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now); len(d.Actions) != 1 || d.Actions[0].Kind != ActPrepull {
		t.Fatalf("a pod missing: actions %v, want the pre-pull again", d.Actions)
	}
	ns[0].Prepull = model.PrepullView{Exists: true, Pulled: true}
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if len(d.Actions) != 2 || d.Actions[0].Kind != ActPrepullDone || d.Actions[1].Kind != ActStart {
		t.Fatalf("pulled: actions %v, want the pod deleted then the start", d.Actions)
	}
	ns[0].Prepull = model.PrepullView{Exists: true, Failed: "pre-pull of image x on node zone-a-00 failed: ErrImagePull: m"}
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if d.Phase != v1alpha1.PhaseHalted || !strings.Contains(d.Reason, "image x on node zone-a-00") || len(starts(d)) != 0 {
		t.Fatalf("failed pull: phase %s reason %q starts %v", d.Phase, d.Reason, starts(d))
	}
}
