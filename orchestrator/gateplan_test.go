package orchestrator

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestDefaultBaselineAndSoakAreNonZero(t *testing.T) {
	p, err := NewPolicy(v1alpha1.NodeRolloutSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Baseline != DefaultBaseline || p.Soak != DefaultSoak || p.Baseline == 0 || p.Soak == 0 {
		t.Errorf("minimal spec: baseline %s, soak %s", p.Baseline, p.Soak)
	}
	// Zero only when asked for.
	p, err = NewPolicy(v1alpha1.NodeRolloutSpec{Baseline: &v1alpha1.Duration{}, Soak: &v1alpha1.Duration{}})
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
	p, _ := NewPolicy(v1alpha1.NodeRolloutSpec{})
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
	p.Soak = 0
	b.Reset()
	_ = RenderPlan(&b, Decision{Order: order}, p, time.Now(), 0)
	if !strings.Contains(b.String(), "no before/after judgement") {
		t.Errorf("zero soak: %s", b.String())
	}
}
