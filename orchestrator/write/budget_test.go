package write

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// bigStatus is a status of n nodes in 5 zones, each judged by the judge with
// a full judgement (6 node rows and health.MaxSummaryPodRows pod rows);
// every tenth node is still soaking (maxParallel 10%) and every hundredth failed.
func bigStatus(n int) *v1alpha1.NodeRolloutStatus {
	s := &v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		at := &metav1.Time{Time: t0.Add(time.Duration(i) * time.Second)}
		j := &v1alpha1.NodeJudgement{Judgements: 3, BaselineSeconds: 300, SoakSeconds: 300, PodsCompared: 40, Tests: 120, JudgedAt: at.Format(time.RFC3339)}
		for r := range 6 + health.MaxSummaryPodRows {
			j.Rows = append(j.Rows, v1alpha1.JudgementRow{Pod: fmt.Sprintf("shop/cart-5d8f7c9b6-%05d", r), Metric: "resets", Before: "0.20/s", After: "0.21/s", P: "p=0.41"})
		}
		ns := v1alpha1.NodeStatus{Name: fmt.Sprintf("node-%05d", i), Zone: fmt.Sprintf("zone-%c", 'a'+i%5), Wave: int32(i/50 + 1),
			State: v1alpha1.NodeDone, StateSince: at, StartTime: at, FinishTime: at,
			Verdict:   "Pass: no regression in 120 tests over 40 pods (5m0s baseline, 5m0s soak); control nodes: 12 untouched, no shift",
			Judgement: j}
		switch {
		case i%100 == 7:
			ns.State, ns.Verdict, ns.Reason = v1alpha1.NodeFailed, "Fail: resets 0.2/s → 4.1/s on 3 pods", "gate failed"
		case i%10 == 3:
			ns.State, ns.FinishTime = v1alpha1.NodeSoak, nil
		}
		s.Nodes = append(s.Nodes, ns)
	}
	s.Counts = planner.Counts(s.Nodes)
	return s
}

// TestFitStatusKeepsAFleetUnderTheBudget: a status of 5,000 judged nodes
// (≈ 60 MiB as it stands) fits within the budget once trimmed; the nodes
// that are soaking or failed keep every detail, the passed ones keep their
// state, zone, wave, finish time and outcome; a status that fits is untouched.
func TestFitStatusKeepsAFleetUnderTheBudget(t *testing.T) {
	for _, n := range []int{1000, 5000} {
		s := bigStatus(n)
		before := jsonSize(s)
		trimmed := fitStatus(s, statusBudget)
		after := jsonSize(s)
		t.Logf("%d nodes: %d KiB → %d KiB, %d entries trimmed", n, before/1024, after/1024, trimmed)
		if after > statusBudget {
			t.Errorf("%d nodes: %d bytes after trimming, over the budget %d", n, after, statusBudget)
		}
		orig := bigStatus(n)
		for i, ns := range s.Nodes {
			o := orig.Nodes[i]
			if ns.Name != o.Name || ns.State != o.State || ns.Zone != o.Zone || ns.Wave != o.Wave || !ns.FinishTime.Equal(o.FinishTime) {
				t.Fatalf("entry %d changed what the planner reads: %+v, was %+v", i, ns, o)
			}
			switch o.State {
			case v1alpha1.NodeFailed:
				if ns.Verdict != o.Verdict || ns.Reason != o.Reason || ns.Judgement == nil || len(ns.Judgement.Rows) != len(o.Judgement.Rows) || ns.StartTime == nil {
					t.Fatalf("failed entry %d was trimmed: %+v", i, ns)
				}
				continue
			case v1alpha1.NodeSoak:
				if ns.Verdict != o.Verdict || ns.Judgement == nil || ns.Judgement.Judgements != o.Judgement.Judgements || ns.StartTime == nil {
					t.Fatalf("soaking entry %d lost more than its rows: %+v", i, ns)
				}
				continue
			}
			if ns.Verdict != o.Verdict && ns.Verdict != "Pass"+trimmedMark {
				t.Fatalf("entry %d: verdict %q", i, ns.Verdict)
			}
		}
		if s.Counts != orig.Counts {
			t.Errorf("counts %+v, were %+v", s.Counts, orig.Counts)
		}
	}

	small := bigStatus(20)
	want := jsonSize(small)
	if n := fitStatus(small, statusBudget); n != 0 || jsonSize(small) != want {
		t.Errorf("a status of %d bytes was trimmed (%d entries)", want, n)
	}
	// The oldest passed nodes go first.
	s := bigStatus(300)
	fitStatus(s, jsonSize(s)-1)
	if !strings.HasSuffix(s.Nodes[0].Verdict, trimmedMark) || strings.HasSuffix(s.Nodes[299].Verdict, trimmedMark) {
		t.Errorf("trimmed the newest before the oldest: first %q, last %q", s.Nodes[0].Verdict, s.Nodes[299].Verdict)
	}
}

// TestFitStatusDropsBaselinesLast: 60 nodes in flight at once, each with a
// full 32 KiB baseline record and a full 16 KiB control record (≈ 2.8
// MiB), fit once some records go, and only after every other cut: every
// control record before the first baseline record; the nodes' state and
// counters stay.
func TestFitStatusDropsBaselinesLast(t *testing.T) {
	s := bigStatus(600)
	for i := range s.Nodes {
		if i < 60 {
			s.Nodes[i].State, s.Nodes[i].FinishTime = v1alpha1.NodeSoak, nil
			s.Nodes[i].Baseline = strings.Repeat("A", record.DefaultBaselineBytes)
			s.Nodes[i].Controls = strings.Repeat("C", record.DefaultControlsBytes)
		}
	}
	fitStatus(s, statusBudget)
	if size := jsonSize(s); size > statusBudget {
		t.Fatalf("%d bytes after trimming, over the budget %d", size, statusBudget)
	}
	kept, controls := 0, 0
	for i, ns := range s.Nodes[:60] {
		if ns.Baseline != "" {
			kept++
		}
		if ns.Controls != "" {
			controls++
		}
		if ns.State != v1alpha1.NodeSoak || ns.Judgement == nil || ns.Judgement.Judgements != 3 {
			t.Fatalf("entry %d lost its state or counters: %+v", i, ns)
		}
	}
	t.Logf("%d of 60 baseline records and %d control records kept within the budget", kept, controls)
	if kept == 0 || kept == 60 || controls != 0 {
		t.Errorf("%d of 60 records and %d control records kept: want only as many dropped as the budget needs, the control records first", kept, controls)
	}
	mid := bigStatus(600)
	for i := range mid.Nodes[:20] {
		mid.Nodes[i].State, mid.Nodes[i].FinishTime = v1alpha1.NodeSoak, nil
		mid.Nodes[i].Baseline = strings.Repeat("A", record.DefaultBaselineBytes)
		mid.Nodes[i].Controls = strings.Repeat("C", record.DefaultControlsBytes)
	}
	fitStatus(mid, statusBudget)
	midControls := 0
	for i, ns := range mid.Nodes[:20] {
		if ns.Baseline == "" {
			t.Errorf("entry %d lost its baseline record where dropping control records was enough", i)
		}
		if ns.Controls != "" {
			midControls++
		}
	}
	if midControls == 0 || midControls == 20 {
		t.Errorf("20 nodes in flight: %d of 20 control records kept, want some dropped to fit and no more", midControls)
	}
	small := bigStatus(20)
	small.Nodes[3].Baseline = strings.Repeat("A", record.DefaultBaselineBytes)
	fitStatus(small, statusBudget)
	if small.Nodes[3].Baseline == "" {
		t.Error("a status within the budget lost a baseline record")
	}
}

// TestFitStatusBoundsMessagesAndTrimsFailedEntries: #27 finding 6. A halt
// reason built from hundreds of failing Prometheus samples (≈ 60 KiB) is
// cut below the API's 32,768-character Condition message limit everywhere
// it lands (halt reason, condition, node reason and verdict); and a status
// whose Failed and Skipped entries alone are over the budget is brought
// under it, those entries keeping their state and reason.
func TestFitStatusBoundsMessagesAndTrimsFailedEntries(t *testing.T) {
	var samples []string
	for i := range 600 {
		samples = append(samples, fmt.Sprintf("query success_rate: sample {pod=\"shop/cart-5d8f7c9b6-%05d\"} = 0.81 < 0.99", i))
	}
	reason := "node n1: gate Fail: " + strings.Join(samples, "; ")
	s := &v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, HaltReason: reason,
		Conditions: []metav1.Condition{{Type: "Halted", Status: metav1.ConditionTrue, Reason: "Halted", Message: reason}},
		Nodes:      []v1alpha1.NodeStatus{{Name: "n1", State: v1alpha1.NodeFailed, Reason: reason, Verdict: reason, Detail: samples}}}
	fitStatus(s, statusBudget)
	const conditionLimit = 32768
	for what, msg := range map[string]string{"haltReason": s.HaltReason, "condition": s.Conditions[0].Message, "node reason": s.Nodes[0].Reason, "node verdict": s.Nodes[0].Verdict} {
		if len(msg) > conditionLimit || !strings.HasPrefix(msg, "node n1: gate Fail: query success_rate") {
			t.Errorf("%s: %d bytes (limit %d), starting %.40q", what, len(msg), conditionLimit, msg)
		}
	}
	// The detail keeps its first lines whole within the limit and the CRD's
	// MaxItems, and says how many it cut.
	if d := s.Nodes[0].Detail; len(d) > detailItems || len(strings.Join(d, "")) > messageLimit+100 || d[0] != samples[0] ||
		!strings.HasPrefix(d[len(d)-1], fmt.Sprintf("… %d more reasons cut", len(samples)-len(d)+1)) {
		t.Errorf("detail: %d lines, %d bytes, last %q", len(d), len(strings.Join(d, "")), d[len(d)-1])
	}
	if long := boundDetail([]string{reason}, messageLimit); len(long) != 1 || len(long[0]) > messageLimit/2 || !strings.Contains(long[0], "bytes cut") {
		t.Errorf("one reason over the limit: %d lines, first %d bytes", len(long), len(long[0]))
	}
	many := make([]string, 100)
	if d := boundDetail(many, messageLimit); len(d) != detailItems || d[detailItems-1] != "… 37 more reasons cut (status size)" {
		t.Errorf("100 short reasons: %d lines, last %q", len(d), d[len(d)-1])
	}

	big := bigStatus(3000)
	for i := range big.Nodes {
		big.Nodes[i].State = []v1alpha1.NodeState{v1alpha1.NodeFailed, v1alpha1.NodeSkipped}[i%2]
		big.Nodes[i].Reason = "gate failed"
	}
	fitStatus(big, statusBudget)
	if size := jsonSize(big); size > statusBudget {
		t.Errorf("3000 Failed/Skipped entries: %d bytes after trimming, over the budget %d", size, statusBudget)
	}
	for i, ns := range big.Nodes {
		if ns.State != []v1alpha1.NodeState{v1alpha1.NodeFailed, v1alpha1.NodeSkipped}[i%2] || ns.Reason != "gate failed" {
			t.Fatalf("entry %d lost its state or reason: %+v", i, ns)
		}
	}
}
