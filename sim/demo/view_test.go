package demo

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestBeforeAfterShowsTheNodeTotals(t *testing.T) {
	j := &v1alpha1.NodeJudgement{Rows: []v1alpha1.JudgementRow{
		{Metric: "resets_sent", Before: "0/s", After: "2.5/s"},
		{Pod: "shop/cart", Metric: "resets_sent", Before: "0/s", After: "2.5/s"},
		{Metric: "connect_latency", Before: "p99 1.2ms", After: "p99 1.3ms"},
	}}
	want := "resets_sent 0/s → 2.5/s; connect_latency p99 1.2ms → p99 1.3ms"
	if got := beforeAfter(j); got != want {
		t.Errorf("beforeAfter = %q, want %q", got, want)
	}
	if got := beforeAfter(nil); got != "" {
		t.Errorf("no judgement: %q, want nothing", got)
	}
}

// TestDemoHaltPrintsOneHaltedLine: the faulty -rst build's halt, as the
// orchestrator records it for node-007, prints one HALTED line under 200
// characters naming the probe's resets before → after. The headline is
// printed once where each part of the output names the node (its step, the
// HALTED line, its row of the node table, the summary), every line short:
// the node's reason, which repeats its verdict, is not printed again.
func TestDemoHaltPrintsOneHaltedLine(t *testing.T) {
	const line = "Fail: probe: resets sent 0/s → 3.1/s (p<0.001)"
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "faulty-1.28.2-rst"}, Status: v1alpha1.NodeRolloutStatus{
		Phase: v1alpha1.PhaseHalted, HaltReason: "node node-007: gate " + line,
		Counts: v1alpha1.RolloutCounts{Total: 2, Failed: 1, Pending: 1},
		Nodes: []v1alpha1.NodeStatus{
			{Name: "node-007", Zone: "zone-a", Canary: true, Wave: 1, State: v1alpha1.NodeFailed, Reason: "gate " + line, Verdict: line,
				Detail: []string{"enrolled 1/1 (ambient pods in the mesh at the soak's end)", "probe nodewise-probe/nodewise-probe-jqxmx (proxy): resets sent 0/s → 3.1/s, control ×+Inf, p<0.001",
					"agent clock on node node-006 ran up to 0s behind the orchestrator's (tolerance 1s, last measured 0s)"}},
			{Name: "node-001", Zone: "zone-a", Wave: 2, State: v1alpha1.NodePending},
		}}}
	var out bytes.Buffer
	v := newView(&out, false)
	v.show(nr)
	v.final(nr)
	printSummary(&out, Summary{FaultyPhase: v1alpha1.PhaseHalted, HaltedNode: "node-007", HaltReason: nr.Status.HaltReason},
		Config{Nodes: 12, Zones: 3, From: "1.27.3", To: "1.28.1", FaultyTag: "1.28.2-rst"})
	var halted []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "HALTED") {
			halted = append(halted, l)
		}
		if n := utf8.RuneCountInString(l); n > 200 {
			t.Errorf("a line of %d characters: %q", n, l)
		}
	}
	if len(halted) != 1 || utf8.RuneCountInString(halted[0]) >= 200 || !strings.Contains(halted[0], "node node-007: gate "+line) {
		t.Errorf("HALTED lines %q: want one under 200 characters naming the probe's resets on node-007", halted)
	}
	var with []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "resets sent 0/s → 3.1/s") {
			with = append(with, strings.Fields(l)[0])
		}
	}
	if len(with) != 4 || !slices.Equal(with[1:], []string{"HALTED:", "1", "halt"}) {
		t.Errorf("the headline printed on lines starting %q, want the step's, HALTED, the node's row and the summary's:\n%s", with, out.String())
	}
}
