package health

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// Every client ×3: before/after alone fails the node; with the control
// group it passes and the reason says the control moved the same way.
func TestAssessControlExplainsClusterWideShift(t *testing.T) {
	cfg, _ := NewConfig(Config{})
	r := rand.New(rand.NewPCG(31, 31))
	for range 5 {
		with, alone, _, _ := clusterTrial(r, nil, cfg, defaultTiming, clusterCase{shift: shiftLoad3x})
		if alone.Outcome != Fail || with.Outcome == Fail {
			continue
		}
		found := false
		for _, s := range with.Reasons {
			found = found || strings.Contains(s, "moved the same way") && strings.Contains(s, "3 control nodes in zone a")
		}
		if with.ExplainedByControl == 0 || !found || with.Control != "3 control nodes in zone a" {
			t.Fatalf("explained %d, control %q, reasons %q", with.ExplainedByControl, with.Control, with.Reasons)
		}
		return
	}
	t.Fatal("no trial where the control group turned a before/after Fail into a Pass")
}

// A control node whose agent does not answer is left out with a reason, and
// with none left the node is judged before/after alone.
func TestJudgeLeavesOutUnreachableControl(t *testing.T) {
	j, in, cur := judgeScenario(t, 1, nil)
	j.src = SnapshotFunc(func(_ context.Context, node string) (Snapshot, error) {
		if node == "node-b" {
			return Snapshot{}, errors.New("connection refused")
		}
		return cur, nil
	})
	in.Control = []ControlNode{{Node: "node-b", Baseline: in.Baseline, SoakStart: in.SoakStart}}
	in.ControlScope = "zone a"
	v := mustJudge(t, j, in)
	if v.Outcome != Pass || !hasReason(v, "control node node-b left out: agent did not answer") || !hasReason(v, "judged before/after alone") {
		t.Fatalf("%s %q", v.Outcome, v.Reasons)
	}
}
