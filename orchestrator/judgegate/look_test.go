package judgegate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

// TestGateLooksDuringTheSoak: a look at the soak so far, through the
// Recorder's samples, fails a node whose pod's resets rose ×4 (the decision
// and the judged windows recorded, the node released), and decides nothing
// on a healthy node or under gates.method Fixed.
func TestGateLooksDuringTheSoak(t *testing.T) {
	for _, tc := range []struct {
		name    string
		regress bool
		method  v1alpha1.DecisionMethod
		decides bool
	}{
		{"a regression", true, v1alpha1.MethodSequential, true},
		{"healthy", false, v1alpha1.MethodSequential, false},
		{"a regression under the fixed method (the default)", true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rigFleet(t, v1alpha1.GatesSpec{MinNodeConnections: 10, Method: tc.method}, map[string]bool{"w1": tc.regress}, nil, "")
			in := r.in
			in.Soak = 10 * time.Minute
			v, decided, err := r.gate.Look(context.Background(), in, 5*time.Minute)
			if err != nil || decided != tc.decides {
				t.Fatalf("look: decided %t (%v), %s %q: want decided %t", decided, err, v.Outcome, v.Headline, tc.decides)
			}
			if !tc.decides {
				return
			}
			const want = "failed early at 5:00 of 10:00 soak, sequential test"
			if v.Outcome != health.Fail || !strings.HasPrefix(v.Headline, "pod shop/p2: resets received") || !strings.HasSuffix(v.Headline, want) ||
				v.Summary.Decision != want || v.Summary.SwapAt == "" {
				t.Errorf("verdict %s %q, judgement %+v: want pod shop/p2's resets failing early, its windows recorded", v.Outcome, v.Headline, v.Summary)
			}
			if _, _, err := r.rec.Windows("w1", in.BaselineStart, in.SwapStart, time.Time{}); err == nil || !strings.Contains(err.Error(), "never tracked") {
				t.Error("the node is still sampled after the look failed it")
			}
		})
	}
}

// TestSuccessorsJudgementAfterALookSaysWhereItsBaselineCameFrom: a
// successor's first look during the soak takes the node's and its controls'
// baselines back from their records into its Recorder; its judgement at the
// soak's end, which then finds them there, still says they came from the
// records, as a successor that did not look says.
func TestSuccessorsJudgementAfterALookSaysWhereItsBaselineCameFrom(t *testing.T) {
	r := rigFleet(t, v1alpha1.GatesSpec{MinNodeConnections: 10, Method: v1alpha1.MethodSequential}, nil, []string{"c1", "c2"}, "zone a")
	_, atSoak := kept(t, r)
	g := successor(t, r.agents)
	in := r.in
	in.Record, in.Controls, in.Soak = atSoak.Baseline, atSoak.Controls, 10*time.Minute
	if _, decided, err := g.Look(context.Background(), in, time.Minute); err != nil || decided {
		t.Fatalf("look at a healthy node: decided %t (%v)", decided, err)
	}
	v, err := g.Judge(context.Background(), in)
	all := strings.Join(v.Reasons, "\n")
	if err != nil || v.Outcome != health.Pass || !strings.Contains(all, "baseline restored from the record of the swap at") ||
		!strings.Contains(all, "control group restored from the record of the swap at") {
		t.Fatalf("%v %s %q: want a Pass that says its baseline and its controls came from the records", err, v.Outcome, v.Reasons)
	}
}
