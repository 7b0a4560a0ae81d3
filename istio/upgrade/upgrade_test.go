package upgrade

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// cluster is a mixed cluster at one version: istiod, ztunnel and
// istio-cni on two nodes, two sidecars, the default tag on its revision.
func cluster(version, rev string) inventory.Inventory {
	return inventory.Inventory{
		Revisions: []inventory.Revision{{Name: rev, Version: version, Ready: true}},
		Tags:      map[string]string{"default": rev},
		Nodes:     []inventory.Node{{Name: "n1", Ztunnel: version, CNI: version}, {Name: "n2", Ztunnel: version, CNI: version}},
		Pods: []inventory.Pod{{Namespace: "shop", Name: "a", Mode: inventory.ModeSidecar, Revision: rev, Version: version},
			{Namespace: "shop", Name: "b", Mode: inventory.ModeSidecar, Revision: rev, Version: version}},
	}
}

func states(p Plan) string {
	var out []string
	for _, s := range p.Steps {
		out = append(out, fmt.Sprintf("%d:%s=%s", s.Pass, s.Name, s.State))
	}
	return strings.Join(out, " ")
}

// TestPlanTwoPassesInOrder: 1.27 to 1.29 is two passes of six steps each
// (istiod 1.29 supports proxies one minor older), the removal of each old
// revision last and marked the point of no return; the objects to apply are
// the NodeRollout and RevisionMigration of each pass, the last pinned.
func TestPlanTwoPassesInOrder(t *testing.T) {
	p, err := Build(Input{Inventory: cluster("1.27.3", "1-27"), To: skew.MustParse("1.29.1")})
	if err != nil {
		t.Fatal(err)
	}
	want := "1:precheck=Done 1:istiod 1-28=Next 1:node components=Later 1:sidecar namespaces=Later 1:default tag=Later 1:remove 1-27=Later " +
		"2:precheck=Later 2:istiod 1-29=Later 2:node components=Later 2:sidecar namespaces=Later 2:default tag=Later 2:remove 1-28=Later"
	if got := states(p); got != want {
		t.Fatalf("steps:\n got %s\nwant %s", got, want)
	}
	if last := p.Steps[len(p.Steps)-1]; !last.PointOfNoReturn || !strings.Contains(last.Do, "nodewise revision remove 1-28") {
		t.Errorf("last step %+v, want the removal of 1-28, the point of no return", last)
	}
	objs := p.Objects()
	if len(objs) != 4 {
		t.Fatalf("%d objects, want a NodeRollout and a RevisionMigration per pass", len(objs))
	}
	if nr := objs[2].(*v1alpha1.NodeRollout); nr.Name != "ambient-1-29" || nr.Spec.Version != "1.29.1" {
		t.Errorf("second NodeRollout %s pinned to %q, want ambient-1-29 pinned to 1.29.1", nr.Name, nr.Spec.Version)
	}
	if nr := objs[0].(*v1alpha1.NodeRollout); nr.Spec.Version != "" || !strings.Contains(p.Steps[1].Do, "--version 1.28.x") {
		t.Errorf("the intermediate pass pins %q and installs %q; want no pin and the newest 1.28 patch", nr.Spec.Version, p.Steps[1].Do)
	}
	if rm := objs[3].(*v1alpha1.RevisionMigration); rm.Spec.From != "1-28" || rm.Spec.To != "1-29" {
		t.Errorf("second migration %s -> %s, want 1-28 -> 1-29", rm.Spec.From, rm.Spec.To)
	}
}

// TestStatusFollowsTheCluster: each step is Done as the cluster reaches
// it, a running object is Running, a halted one Blocked, and only the first
// step not done is Next.
func TestStatusFollowsTheCluster(t *testing.T) {
	to := skew.MustParse("1.28.1")
	inv := cluster("1.27.3", "1-27")
	in := Input{Inventory: inv, To: to, PrecheckErrors: 1}
	p, _ := Build(in)
	if s := p.Current(); s.Name != "precheck" || s.State != Blocked {
		t.Fatalf("with a precheck error: current %+v, want the precheck Blocked", s)
	}
	in.PrecheckErrors = 0
	in.Inventory.Revisions = append(in.Inventory.Revisions, inventory.Revision{Name: "1-28", Version: "1.28.1", Ready: true})
	in.Rollouts = []v1alpha1.NodeRollout{{}}
	in.Rollouts[0].Name, in.Rollouts[0].Status.Phase = "ambient-1-28", v1alpha1.PhaseProgressing
	p, _ = Build(in)
	if got := states(p); got != "1:precheck=Done 1:istiod 1-28=Done 1:node components=Running 1:sidecar namespaces=Later 1:default tag=Later 1:remove 1-27=Later" {
		t.Fatalf("istiod installed, rollout running: %s", got)
	}
	in.Rollouts[0].Status.Phase, in.Rollouts[0].Status.HaltReason = v1alpha1.PhaseHalted, "node n1: gate Fail"
	if p, _ = Build(in); p.Current().State != Blocked || !strings.Contains(p.Current().Why, "node n1: gate Fail") {
		t.Fatalf("rollout halted: current %+v", p.Current())
	}
	for i := range in.Inventory.Nodes {
		in.Inventory.Nodes[i].Ztunnel, in.Inventory.Nodes[i].CNI = "1.28.1", "1.28.1"
	}
	for i := range in.Inventory.Pods {
		in.Inventory.Pods[i].Version = "1.28.1"
	}
	in.Inventory.Tags["default"] = "1-28"
	if p, _ = Build(in); p.Current().Name != "remove 1-27" || p.Current().State != Next {
		t.Fatalf("all moved: current %+v, want the removal next", p.Current())
	}
	in.Inventory.Revisions = in.Inventory.Revisions[1:]
	if p, _ = Build(in); p.Current() != nil {
		t.Fatalf("old revision removed: current %+v, want done", p.Current())
	}
}

// TestWaypointsAfterTheNodeComponents: a cluster with waypoints gets a
// waypoint step between the node components and the sidecar namespaces
// (Istio's ambient upgrade guide's order), applying a waypoints: Only
// RevisionMigration (the label change per waypoint given for doing it by
// hand), Blocked when that halts; it is Next once the nodes are done, Running while a
// waypoint rolls, Done when every waypoint runs the target on the new
// revision; and a waypoint older than every sidecar sets where the plan
// starts.
func TestWaypointsAfterTheNodeComponents(t *testing.T) {
	to := skew.MustParse("1.28.1")
	in := Input{Inventory: cluster("1.27.3", "1-27"), To: to, PrecheckErrors: 0}
	in.Inventory.Waypoints = []inventory.Waypoint{{Namespace: "mesh", Name: "waypoint", Revision: "1-27", Version: "1.27.3", Pods: 1}, {Namespace: "pay", Name: "reviews", Revision: "1-27", Version: "1.27.3", Pods: 1}}
	in.Inventory.Revisions = append(in.Inventory.Revisions, inventory.Revision{Name: "1-28", Version: "1.28.1", Ready: true})
	for i := range in.Inventory.Nodes {
		in.Inventory.Nodes[i].Ztunnel, in.Inventory.Nodes[i].CNI = "1.28.1", "1.28.1"
	}
	p, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	if got := states(p); got != "1:precheck=Done 1:istiod 1-28=Done 1:node components=Done 1:waypoints=Next 1:sidecar namespaces=Later 1:default tag=Later 1:remove 1-27=Later" {
		t.Fatalf("steps: %s", got)
	}
	cur := p.Current()
	if !strings.HasSuffix(cur.Do, "by hand: kubectl label gateway -n mesh waypoint istio.io/rev=1-28 --overwrite; kubectl label gateway -n pay reviews istio.io/rev=1-28 --overwrite") ||
		cur.Why != "2 of 2 waypoints behind: mesh/waypoint 1.27.3 on 1-27, pay/reviews 1.27.3 on 1-27" {
		t.Fatalf("waypoint step: do %q, why %q", cur.Do, cur.Why)
	}
	if rm, ok := cur.Object.(*v1alpha1.RevisionMigration); !ok || rm.Name != "waypoints-1-28" || rm.Spec.From != "1-27" || rm.Spec.To != "1-28" || rm.Spec.Waypoints != v1alpha1.WaypointsOnly {
		t.Fatalf("waypoint step object %+v, want RevisionMigration waypoints-1-28 1-27 -> 1-28, waypoints: Only", cur.Object)
	}
	in.Migrations = []v1alpha1.RevisionMigration{{}}
	in.Migrations[0].Name, in.Migrations[0].Status.Phase, in.Migrations[0].Status.Reason = "waypoints-1-28", v1alpha1.MigrationHalted, "wave canary failed its gate"
	if p, _ = Build(in); p.Current().State != Blocked || !strings.Contains(p.Current().Why, "wave canary failed its gate") {
		t.Fatalf("waypoint migration halted: current %+v", p.Current())
	}
	in.Migrations = nil
	in.Inventory.Waypoints[0] = inventory.Waypoint{Namespace: "mesh", Name: "waypoint", Revision: "1-27", Version: "1.27.3", Pods: 2, Rolling: true}
	if p, _ = Build(in); p.Current().Name != "waypoints" || p.Current().State != Running {
		t.Fatalf("a waypoint rolling: current %+v", p.Current())
	}
	for i := range in.Inventory.Waypoints {
		in.Inventory.Waypoints[i].Revision, in.Inventory.Waypoints[i].Version, in.Inventory.Waypoints[i].Rolling = "1-28", "1.28.1", false
	}
	if p, _ = Build(in); p.Current().Name != "sidecar namespaces" {
		t.Fatalf("waypoints moved: current %+v, want the sidecar namespaces", p.Current())
	}
	in = Input{Inventory: cluster("1.27.3", "1-27"), To: skew.MustParse("1.28.1")}
	in.Inventory.Waypoints = []inventory.Waypoint{{Namespace: "mesh", Name: "waypoint", Revision: "1-27", Version: "1.26.0"}}
	if p, _ = Build(in); len(p.Passes) != 2 {
		t.Fatalf("a 1.26 waypoint under 1.28: %d passes, want 2", len(p.Passes))
	}
}

// TestWaypointStepSaysItsMethod: to 1.32 with every ztunnel on 1.32 the
// waypoint step says it moves them by weighted canary, and while its
// migration runs, where the current wave's weight is; with a ztunnel still
// on 1.30 it relabels, and says the canary is used once every ztunnel is
// 1.31+; to 1.28 it relabels and says nothing of canaries.
func TestWaypointStepSaysItsMethod(t *testing.T) {
	step := func(in Input) Step {
		p, err := Build(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Steps {
			if s.Name == "waypoints" {
				return s
			}
		}
		t.Fatal("no waypoint step")
		return Step{}
	}
	in := Input{Inventory: cluster("1.31.2", "1-31"), To: skew.MustParse("1.32.0")}
	in.Inventory.Waypoints = []inventory.Waypoint{{Namespace: "mesh", Name: "waypoint", Revision: "1-31", Version: "1.31.2", Pods: 1}}
	in.Inventory.Revisions = append(in.Inventory.Revisions, inventory.Revision{Name: "1-32", Version: "1.32.0", Ready: true})
	for i := range in.Inventory.Nodes {
		in.Inventory.Nodes[i].Ztunnel, in.Inventory.Nodes[i].CNI = "1.32.0", "1.32.0"
	}
	if s := step(in); !strings.HasPrefix(s.Changes, "each waypoint moved in waves by weighted canary (istiod 1.32.0 and all") {
		t.Errorf("all on 1.32: %q", s.Changes)
	}
	m := v1alpha1.RevisionMigration{}
	m.Name, m.Status.Phase, m.Status.WaypointMethod = "waypoints-1-32", v1alpha1.MigrationGating, v1alpha1.WaypointCanary
	m.Status.Waves = []v1alpha1.ResolvedWave{{Name: "canary", CanaryWeight: 50}}
	in.Migrations = []v1alpha1.RevisionMigration{m}
	if s := step(in); s.State != Running || s.Why != "RevisionMigration waypoints-1-32 is Gating (wave canary by canary at 50%); 1 of 1 waypoints behind" {
		t.Errorf("running: %s %q", s.State, s.Why)
	}
	in.Migrations = nil
	in.Inventory.Nodes[0].Ztunnel = "1.30.4"
	if s := step(in); !strings.HasPrefix(s.Changes, "each waypoint's Gateway labelled istio.io/rev=") || !strings.Contains(s.Changes, "by weighted canary instead if every ztunnel is 1.31+ when the migration starts (now: ztunnel on") {
		t.Errorf("a ztunnel on 1.30: %q", s.Changes)
	}
	old := Input{Inventory: cluster("1.27.3", "1-27"), To: skew.MustParse("1.28.1")}
	old.Inventory.Waypoints = in.Inventory.Waypoints[:1]
	old.Inventory.Waypoints[0].Revision, old.Inventory.Waypoints[0].Version = "1-27", "1.27.3"
	if s := step(old); strings.Contains(s.Changes, "canary") {
		t.Errorf("to 1.28: %q", s.Changes)
	}
}
