package health

import (
	"bytes"
	"slices"
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
	if err := WriteExplain(&buf, Explanation{Rollout: "mesh-1-28", Node: "node-a", State: "Failed", Verdict: v.Line(), Detail: v.Reasons, Judgement: v.Summary}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, want := range []string{"31 pods compared", "1 regressions", "\ndecision: failed at 5:00 of soak, fixed test\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q", want)
		}
	}
	// The headline leads, under the title.
	if len(lines) < 2 || lines[0] != "NodeRollout mesh-1-28, node node-a: state Failed" || lines[1] != "verdict: Fail: "+v.Headline || !strings.HasPrefix(v.Headline, "pod ") {
		t.Errorf("first lines %q, want the title and the verdict's headline (%q)", lines[:2], v.Headline)
	}
	// Every reason, one a line, under the table.
	detail := slices.Index(lines, "DETAIL (every reason behind the verdict, as its gate gave them)")
	if detail < 0 || len(lines) != detail+1+len(v.Reasons) || lines[detail+1] != "  "+v.Reasons[0] {
		t.Errorf("detail at line %d of %d, want the %d reasons under it", detail, len(lines), len(v.Reasons))
	}
	lines = lines[:detail-1]
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
	_ = WriteExplain(&buf, Explanation{Rollout: "r", Node: "n", State: "Failed", Verdict: "Fail: readiness: pod a not Ready (+1 more)",
		Detail: []string{"readiness: pod a not Ready", "readiness: pod b not Ready"}})
	if out := buf.String(); !strings.Contains(out, "no before/after table recorded") || !strings.HasSuffix(out, "  readiness: pod a not Ready\n  readiness: pod b not Ready\n") {
		t.Errorf("without a summary: %q", out)
	}
}
