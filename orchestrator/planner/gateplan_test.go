package planner

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func TestDefaultBaselineAndSoakAreNonZero(t *testing.T) {
	p, err := model.NewPolicy(v1alpha1.NodeRolloutSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Baseline != model.DefaultBaseline || p.Soak != model.DefaultSoak || p.Baseline == 0 || p.Soak == 0 {
		t.Errorf("minimal spec: baseline %s, soak %s", p.Baseline, p.Soak)
	}
	// Zero only when asked for.
	p, err = model.NewPolicy(v1alpha1.NodeRolloutSpec{Baseline: &v1alpha1.Duration{}, Soak: &v1alpha1.Duration{}})
	if err != nil || p.Baseline != 0 || p.Soak != 0 {
		t.Errorf("explicit 0s: baseline %s, soak %s, %v", p.Baseline, p.Soak, err)
	}
}

func TestPlanPrintsEachNodesGate(t *testing.T) {
	order := []PlannedNode{
		{Name: "a1", Zone: "a", Canary: true, Wave: 1, Window: 1},
		{Name: "a2", Zone: "a", Wave: 2, Window: 2},
		{Name: "a3", Zone: "a", Wave: 2, Window: 2},
		{Name: "b1", Zone: "b", Wave: 3, Window: 3},
		{Name: "b2", Zone: "b", Wave: 4, Window: 4},
	}
	p, _ := model.NewPolicy(v1alpha1.NodeRolloutSpec{})
	var b bytes.Buffer
	if err := RenderPlan(&b, Decision{Order: order}, p, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("\n%s", out)
	for node, want := range map[string]string{
		"a1": "baseline 5m, soak 5m, against 2 control nodes in zone a",
		"a2": "against 2 control nodes in the cluster (zone a has none left)", // a3 soaks beside it: not a control
		"b1": "against 1 control node in zone b",
		"b2": "before/after alone (no control nodes left)",
	} {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[1] == node {
				line = l
			}
		}
		if !strings.Contains(line, want) {
			t.Errorf("node %s: %q, want %q", node, line, want)
		}
	}
	if want := "Decision: fixed test (gates.method: Fixed): a node is first judged at the end of its 5m soak"; !strings.Contains(out, want) {
		t.Errorf("the plan does not say how nodes are decided: want %q in\n%s", want, out)
	}
	if want := "Baseline: 5m, waited only where nothing already holds it: skipped under the readiness gate (no judge wired, no --agent-ca: nothing reads a baseline)"; !strings.Contains(out, want) {
		t.Errorf("the plan does not say when the baseline is waited: want %q in\n%s", want, out)
	}
	seq, _ := model.NewPolicy(v1alpha1.NodeRolloutSpec{Gates: v1alpha1.GatesSpec{Method: v1alpha1.MethodSequential}})
	b.Reset()
	if err := RenderPlan(&b, Decision{Order: order}, seq, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if want := "Decision: sequential test (gates.method: Sequential): a look every few seconds fails a node as soon as a regression is conclusive; it passes only after its full 5m soak"; !strings.Contains(b.String(), want+"\n") {
		t.Errorf("gates.method Sequential: want %q in\n%s", want, b.String())
	}
	off, _ := model.NewPolicy(v1alpha1.NodeRolloutSpec{Gates: v1alpha1.GatesSpec{ControlGroup: v1alpha1.ControlGroupDisabled}})
	b.Reset()
	if err := RenderPlan(&b, Decision{Order: order}, off, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(b.String(), "before/after alone (control group switched off)"); got != len(order) || strings.Contains(b.String(), "against") {
		t.Errorf("control group off: %d of %d nodes say it is switched off:\n%s", got, len(order), b.String())
	}
	p.Soak = 0
	b.Reset()
	_ = RenderPlan(&b, Decision{Order: order}, p, time.Now(), 0)
	if !strings.Contains(b.String(), "no before/after judgement") {
		t.Errorf("zero soak: %s", b.String())
	}
}

// TestControlsAtJudgeTime is the table behind GateInput.Control: the plan's
// later nodes, in the zone first, less every node that is no longer a fair
// control as the rollout stands (cordoned, started or finished, already on
// the newest revision, not selected).
func TestControlsAtJudgeTime(t *testing.T) {
	ref := v1alpha1.TargetRef{Namespace: "istio-system", Name: "ztunnel"}
	tv := model.TargetView{Ref: ref, Found: true, NewestHash: "new", Settled: true}
	node := func(name, zone string, st v1alpha1.NodeState, cordoned bool, hash string) model.NodeView {
		return model.NodeView{Name: name, Zone: zone, Labels: map[string]string{"pool": "apps"}, Ready: true, State: st, Unschedulable: cordoned,
			Pods: map[string]model.PodView{tv.Key(): {Name: "ztunnel-" + name, Hash: hash, Ready: true}}}
	}
	pending := v1alpha1.NodePending
	s := model.Snapshot{Targets: []model.TargetView{tv}, Nodes: []model.NodeView{
		node("a1", "a", v1alpha1.NodeGate, false, "new"), // judged
		node("a2", "a", pending, false, "old"),
		node("a3", "a", pending, true, "old"),            // cordoned by someone else
		node("a4", "a", v1alpha1.NodeDone, false, "new"), // swapped
		node("a5", "a", pending, false, "new"),           // on the newest revision already
		node("b1", "b", pending, false, "old"),
		node("b2", "b", pending, false, "old"),
		node("b3", "b", v1alpha1.NodeCordon, true, "old"), // started meanwhile
		node("b4", "b", "", false, "old"),                 // not in status yet: Pending
	}}
	other := node("b0", "b", pending, false, "old")
	other.Labels = map[string]string{"pool": "infra"}
	s.Nodes = append(s.Nodes, other)
	sel, err := labels.Parse("pool=apps")
	if err != nil {
		t.Fatal(err)
	}
	// Windows: canary a1 1, canary b1 2, the rest of zone a 3, of zone b 4.
	p := model.Policy{Targets: []v1alpha1.TargetRef{ref}, Selector: sel, Canaries: []string{"a1", "b1"}, MaxParallel: model.Nodes(1)}
	for _, tc := range []struct {
		node, scope string
		want        []string
	}{
		{"a1", "zone a", []string{"a2"}},
		{"a2", "the cluster (zone a has none left)", []string{"b2", "b4"}}, // a3–a5 share its window
		{"b1", "zone b", []string{"b2", "b4"}},
		{"b2", "", nil}, // the last window
		{"b0", "", nil}, // not selected: not in the plan
	} {
		got, scope := Controls(s, p, tc.node)
		if !slices.Equal(got, tc.want) || scope != tc.scope {
			t.Errorf("%s: controls %v in %q, want %v in %q", tc.node, got, scope, tc.want, tc.scope)
		}
	}
	// Switched off (spec.gates.controlGroup: Disabled), no node has any.
	p.NoControlGroup = true
	for _, n := range []string{"a1", "a2", "b1"} {
		if got, scope := Controls(s, p, n); got != nil || scope != "" {
			t.Errorf("%s with the control group off: controls %v in %q, want none", n, got, scope)
		}
	}
}
