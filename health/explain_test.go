package health

import (
	"bytes"
	"strings"
	"testing"
)

func TestWriteExplain(t *testing.T) {
	// A real judgement: the simulated node with a 3x reset regression.
	j, in, _ := judgeScenario(t, 2, injectResets)
	in.Gates.ConsecutiveFailures = 1
	v := mustJudge(t, j, in)
	if v.Outcome != Fail {
		t.Fatalf("scenario must fail: %q", v.Reasons)
	}
	var buf bytes.Buffer
	if err := WriteExplain(&buf, Explanation{Rollout: "mesh-1-28", Node: "node-a", State: "Failed", Verdict: "Fail: " + v.Reasons[0], Judgement: v.Summary}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, want := range []string{"NodeRollout mesh-1-28, node node-a: state Failed", "verdict: Fail: pod ", "31 pods compared", "1 regressions"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	// Header, the node's four count rows, then pods with the regression first.
	hdr := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "POD") {
			hdr = i
		}
	}
	if hdr < 0 || len(lines) < hdr+6 {
		t.Fatalf("no table:\n%s", out)
	}
	for i, m := range []string{"resets received", "resets sent", "failed connects", "retransmits"} {
		if l := lines[hdr+1+i]; !strings.HasPrefix(l, "(node)") || !strings.Contains(l, m) {
			t.Errorf("node row %d = %q, want %s", i, l, m)
		}
	}
	first := lines[hdr+5]
	if !strings.Contains(first, "resets received") || !strings.HasSuffix(first, "REGRESSED") || !strings.Contains(first, "p<0.001") {
		t.Errorf("first pod row = %q, want the regressed pod", first)
	}
	if n := len(lines) - hdr - 1; n != 4+MaxSummaryPodRows {
		t.Errorf("%d rows, want 4 node rows and %d pod rows", n, MaxSummaryPodRows)
	}

	buf.Reset()
	_ = WriteExplain(&buf, Explanation{Rollout: "r", Node: "n", State: "Soak"})
	if !strings.Contains(buf.String(), "no before/after table recorded") {
		t.Errorf("without a summary: %q", buf.String())
	}
}
