package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

type fakeGate struct {
	fails  []string
	noData []string
	err    error
	max    int
}

func (g fakeGate) Name() string              { return "fake" }
func (g fakeGate) MaxConsecutiveErrors() int { return g.max }
func (g fakeGate) Check(context.Context, string) (wire.GateResult, error) {
	return wire.GateResult{Failures: g.fails, NoData: g.noData}, g.err
}

// judgeScenario draws one simulated node and returns a judge whose agent
// answers with the soak's last snapshot, and the input to judge it.
func judgeScenario(t *testing.T, seed uint64, ch func(r *rand.Rand, pods []simPod) *simChange) (*Judge, Input, wire.Snapshot) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	pods := newSimNode(r)
	var c *simChange
	if ch != nil {
		c = ch(r, pods)
	}
	series, soakStart, cur := simSnapshots(r, pods, c)
	j, err := NewJudge(JudgeConfig{
		Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil }),
		Now:    func() time.Time { return cur.Time.Add(5 * time.Second) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return j, Input{Node: "node-a", Baseline: series, SoakStart: soakStart}, cur
}

func mustJudge(t *testing.T, j *Judge, in Input) Verdict {
	t.Helper()
	v, err := j.Judge(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	if v.Summary == nil {
		t.Fatalf("verdict without summary: %+v", v)
	}
	return v
}

func hasReason(v Verdict, sub string) bool {
	for _, r := range v.Reasons {
		if strings.Contains(r, sub) {
			return true
		}
	}
	return false
}

func TestJudgeHealthyPasses(t *testing.T) {
	j, in, _ := judgeScenario(t, 1, nil)
	v := mustJudge(t, j, in)
	if v.Outcome != Pass || v.Summary.PodsCompared != simPods+1 || v.Summary.Tests < 100 || v.Summary.ConsecutiveFailures != 0 {
		t.Fatalf("healthy node: %s %q %+v", v.Outcome, v.Reasons, v.Summary)
	}
}

func TestJudgeRegressionFailsAfterConsecutiveIntervals(t *testing.T) {
	j, in, _ := judgeScenario(t, 2, injectResets)
	first := mustJudge(t, j, in)
	if first.Outcome != Inconclusive || first.Summary.ConsecutiveFailures != 1 || !hasReason(first, "failing interval 1 of 2") {
		t.Fatalf("first failing interval: %s %q", first.Outcome, first.Reasons)
	}
	in.Previous = first.Summary
	second := mustJudge(t, j, in)
	if second.Outcome != Fail || second.Summary.ConsecutiveFailures != 2 || !hasReason(second, "resets received") || second.Summary.Regressions == 0 {
		t.Fatalf("second failing interval: %s %q", second.Outcome, second.Reasons)
	}
	// A passing interval in between resets the count.
	in.Previous = &v1alpha1.NodeJudgement{Judgements: 3, ConsecutiveFailures: 0}
	if v := mustJudge(t, j, in); v.Outcome != Inconclusive || v.Summary.Judgements != 4 {
		t.Fatalf("after a pass the count restarts: %s %+v", v.Outcome, v.Summary)
	}
	in.Gates.ConsecutiveFailures = 1
	in.Previous = nil
	if v := mustJudge(t, j, in); v.Outcome != Fail {
		t.Fatalf("consecutiveFailures 1 fails at once: %s", v.Outcome)
	}
}

func TestJudgeFailsClosed(t *testing.T) {
	_, in, cur := judgeScenario(t, 1, nil)
	for _, c := range []struct {
		name   string
		snap   func() (wire.Snapshot, error)
		now    time.Time
		reason string
	}{
		{"agent down", func() (wire.Snapshot, error) { return wire.Snapshot{}, errors.New("connection refused") }, cur.Time, "did not answer: connection refused"},
		{"stale", func() (wire.Snapshot, error) { return cur, nil }, cur.Time.Add(5 * time.Minute), "is stale"},
		{"agent restarted", func() (wire.Snapshot, error) {
			s := cur
			s.StartTime = cur.Time.Add(-time.Minute)
			return s, nil
		}, cur.Time, "agent restarted"},
	} {
		j, err := NewJudge(JudgeConfig{
			Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return c.snap() }),
			Now:    func() time.Time { return c.now },
		})
		if err != nil {
			t.Fatal(err)
		}
		if v := mustJudge(t, j, in); v.Outcome != Fail || !hasReason(v, c.reason) {
			t.Errorf("%s: %s %q, want Fail with %q", c.name, v.Outcome, v.Reasons, c.reason)
		}
	}
	j, _, _ := judgeScenario(t, 1, nil)
	in.Baseline = in.Baseline[:1]
	if v := mustJudge(t, j, in); v.Outcome != Fail || !hasReason(v, "no baseline") {
		t.Errorf("no baseline: %s %q", v.Outcome, v.Reasons)
	}
}

func TestJudgePlannedResetsAreNotARegression(t *testing.T) {
	j, in, cur := judgeScenario(t, 1, nil)
	// An in-place swap: 400 connections of one pod were older than the 25 s
	// deadline just before the swap, and the swap reset every one of them.
	last := &in.Baseline[len(in.Baseline)-1]
	last.Pods = append([]wire.PodCounters(nil), last.Pods...)
	last.Pods[3].ConnAges = make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
	last.Pods[3].ConnAges[10] = 400 // [45 s, 60 s)
	cur.Pods = append([]wire.PodCounters(nil), cur.Pods...)
	cur.Pods[3].ResetsReceived += 400
	j.src = SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil })
	in.Gates.ConsecutiveFailures = 1

	drained := mustJudge(t, j, in)
	if drained.Outcome != Fail || !hasReason(drained, "pod "+cur.Pods[3].Namespace+"/"+cur.Pods[3].Name+": resets received") {
		t.Fatalf("with no drain deadline known the burst is a regression: %s %q", drained.Outcome, drained.Reasons)
	}
	in.DrainDeadline = DrainDeadline(10 * time.Minute)
	if young := mustJudge(t, j, in); young.Outcome != Fail {
		t.Fatalf("connections younger than the drain deadline are not planned: %s %q", young.Outcome, young.Reasons)
	}
	in.DrainDeadline = DrainDeadline(30 * time.Second)
	inPlace := mustJudge(t, j, in)
	if inPlace.Outcome != Pass || inPlace.Summary.PlannedResets != 400 || !hasReason(inPlace, "planned resets: ") {
		t.Fatalf("planned resets: %s %q %+v", inPlace.Outcome, inPlace.Reasons, inPlace.Summary)
	}
}

func TestJudgeInconclusivePolicy(t *testing.T) {
	j, in, _ := judgeScenario(t, 1, nil)
	in.Gates.MinNodeConnections = 1 << 40 // no node has that much traffic
	for policy, want := range map[InconclusivePolicy]Outcome{v1alpha1.InconclusivePass: Pass, v1alpha1.InconclusivePause: Inconclusive, v1alpha1.InconclusiveFail: Fail, "": Inconclusive} {
		in.Gates.Inconclusive = policy
		v := mustJudge(t, j, in)
		if v.Outcome != want || !hasReason(v, "not enough traffic") {
			t.Errorf("policy %q: %s %q, want %s", policy, v.Outcome, v.Reasons, want)
		}
	}
	in.Gates.Inconclusive = "Maybe"
	if _, err := j.Judge(context.Background(), in); err == nil || !strings.Contains(err.Error(), "Pass, Pause or Fail") {
		t.Errorf("bad policy: %v", err)
	}
}

func TestJudgeExternalGates(t *testing.T) {
	j, in, _ := judgeScenario(t, 1, nil)
	in.Gates.ConsecutiveFailures = 1
	in.External = []ExternalGate{fakeGate{fails: []string{"success rate 0.91 below 0.99"}, max: 3}}
	if v := mustJudge(t, j, in); v.Outcome != Fail || !hasReason(v, "gate fake: success rate 0.91") {
		t.Errorf("threshold crossed: %s %q", v.Outcome, v.Reasons)
	}
	in.External = []ExternalGate{fakeGate{err: errors.New("connection refused"), max: 3}}
	var prev *v1alpha1.NodeJudgement
	for i, want := range []Outcome{Inconclusive, Inconclusive, Fail} {
		in.Previous = prev
		v := mustJudge(t, j, in)
		if v.Outcome != want || int(v.Summary.ConsecutiveQueryErrors) != i+1 {
			t.Fatalf("query error %d: %s %q errors %d, want %s", i+1, v.Outcome, v.Reasons, v.Summary.ConsecutiveQueryErrors, want)
		}
		prev = v.Summary
	}
	in.External = []ExternalGate{fakeGate{max: 3}}
	in.Previous = prev
	if v := mustJudge(t, j, in); v.Outcome != Pass || v.Summary.ConsecutiveQueryErrors != 0 {
		t.Errorf("a good query resets the error count: %s %+v", v.Outcome, v.Summary)
	}
	// A query that saw nothing holds the node, and gates.inconclusive (about
	// too little traffic) does not make it pass; a crossed threshold still fails.
	in.Previous = nil
	empty := fakeGate{noData: []string{"query success-rate returned no samples for node n1"}, max: 3}
	in.External = []ExternalGate{empty}
	for _, pol := range []v1alpha1.InconclusivePolicy{"", v1alpha1.InconclusivePass, v1alpha1.InconclusiveFail} {
		in.Gates.Inconclusive = pol
		if v := mustJudge(t, j, in); v.Outcome != Inconclusive || !hasReason(v, "gate fake: query success-rate returned no samples") {
			t.Errorf("no data, gates.inconclusive %q: %s %q, want Inconclusive naming the query", pol, v.Outcome, v.Reasons)
		}
	}
	in.Gates.Inconclusive = ""
	in.External = []ExternalGate{empty, fakeGate{fails: []string{"p99 0.4 above 0.25"}, max: 3}}
	if v := mustJudge(t, j, in); v.Outcome != Fail || !hasReason(v, "p99 0.4") || !hasReason(v, "returned no samples") {
		t.Errorf("no data and a failure: %s %q, want Fail with both reasons", v.Outcome, v.Reasons)
	}
}

func TestJudgeMetrics(t *testing.T) {
	_, in, cur := judgeScenario(t, 1, nil)
	reg := prometheus.NewRegistry()
	down := false
	j, err := NewJudge(JudgeConfig{Registry: reg, Now: func() time.Time { return cur.Time },
		Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) {
			if down {
				return wire.Snapshot{}, errors.New("refused")
			}
			return cur, nil
		})})
	if err != nil {
		t.Fatal(err)
	}
	mustJudge(t, j, in)
	down = true
	mustJudge(t, j, in)
	in.External = []ExternalGate{fakeGate{err: errors.New("x"), max: 3}}
	down = false
	mustJudge(t, j, in)
	if err := testutil.CollectAndCompare(reg, strings.NewReader(`
# HELP nodewise_judgements_total Judgements of a node's soak against its baseline, by outcome (Pass, Fail, Inconclusive).
# TYPE nodewise_judgements_total counter
nodewise_judgements_total{outcome="Fail"} 1
nodewise_judgements_total{outcome="Inconclusive"} 1
nodewise_judgements_total{outcome="Pass"} 1
# HELP nodewise_judge_failed_closed_total Judgements failed because the judge could not trust its input, by cause (agent_unavailable, agent_stale, window, no_baseline).
# TYPE nodewise_judge_failed_closed_total counter
nodewise_judge_failed_closed_total{cause="agent_unavailable"} 1
# HELP nodewise_gate_query_errors_total External gate evaluations (Prometheus queries) that could not query their source.
# TYPE nodewise_gate_query_errors_total counter
nodewise_gate_query_errors_total 1
`)); err != nil {
		t.Error(err)
	}
	if _, err := NewJudge(JudgeConfig{Registry: reg, Source: j.src}); err == nil {
		t.Error("registering twice on one registry must fail")
	}
}

// TestJudgePlannedResetsDuringTheSwap: the old ztunnel resets its old
// connections at its drain deadline, before the new one is Ready, so the
// resets fall between the baseline and the soak. They are counted as
// planned (at most one per old connection) and the node passes.
func TestJudgePlannedResetsDuringTheSwap(t *testing.T) {
	j, in, cur := judgeScenario(t, 1, nil)
	last := &in.Baseline[len(in.Baseline)-1]
	last.Pods = append([]wire.PodCounters(nil), last.Pods...)
	last.Pods[3].ConnAges = make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
	last.Pods[3].ConnAges[10] = 30 // [45 s, 60 s)
	cur.Pods = append([]wire.PodCounters(nil), cur.Pods...)
	cur.Pods[3].ResetsReceived += 40
	j.src = SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil })
	in.SoakStart.Pods = append([]wire.PodCounters(nil), in.SoakStart.Pods...)
	swapBefore := in.SoakStart.Pods[3].ResetsReceived - last.Pods[3].ResetsReceived
	in.SoakStart.Pods[3].ResetsReceived += 40 // 30 planned, and 10 more than the plan
	in.Gates.ConsecutiveFailures = 1

	if v := mustJudge(t, j, in); v.Summary.PlannedResets != 0 {
		t.Fatalf("with no drain deadline known nothing is planned: %+v", v.Summary)
	}
	in.DrainDeadline = DrainDeadline(30 * time.Second)
	v := mustJudge(t, j, in)
	if want := min(30, swapBefore+40); v.Outcome != Pass || v.Summary.PlannedResets != int64(want) || !hasReason(v, fmt.Sprintf("planned resets during the swap: %d on 1 pods", want)) {
		t.Fatalf("want Pass with %d planned resets during the swap: %s %q %+v", want, v.Outcome, v.Reasons, v.Summary)
	}
}

// TestJudgementKeepsConnectionAges: the persisted judgement carries, for the
// pod whose resets regressed, its connection ages before → after: 400
// connections of 45–60 s before the swap, 3 young ones after it.
func TestJudgementKeepsConnectionAges(t *testing.T) {
	j, in, cur := judgeScenario(t, 1, nil)
	last := &in.Baseline[len(in.Baseline)-1]
	last.Pods = append([]wire.PodCounters(nil), last.Pods...)
	last.Pods[3].ConnAges = make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
	last.Pods[3].ConnAges[0], last.Pods[3].ConnAges[10] = 100, 400 // [0, 1 s) and [45 s, 60 s)
	cur.Pods = append([]wire.PodCounters(nil), cur.Pods...)
	cur.Pods[3].ResetsReceived += 400
	cur.Pods[3].ConnAges = make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
	cur.Pods[3].ConnAges[1] = 3 // [1 s, 2 s)
	j.src = SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil })
	in.Gates.ConsecutiveFailures = 1
	v := mustJudge(t, j, in)
	pod := cur.Pods[3].Namespace + "/" + cur.Pods[3].Name
	var got *v1alpha1.PodAges
	for i := range v.Summary.PodAges {
		if v.Summary.PodAges[i].Pod == pod {
			got = &v.Summary.PodAges[i]
		}
	}
	if got == nil {
		t.Fatalf("no connection ages for %s in %+v (rows %d)", pod, v.Summary.PodAges, len(v.Summary.Rows))
	}
	want := v1alpha1.PodAges{Pod: pod, Before: v1alpha1.ConnAges{Open: 500, Median: "45", Oldest: "45"}, After: v1alpha1.ConnAges{Open: 3, Median: "1", Oldest: "1"}}
	if *got != want {
		t.Errorf("connection ages %+v, want %+v", *got, want)
	}
	if n := len(v.Summary.PodAges); n > MaxSummaryPodRows {
		t.Errorf("%d pods' ages, want at most %d", n, MaxSummaryPodRows)
	}
}

func TestSummarizeAges(t *testing.T) {
	h := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
	if got := summarizeAges(h); got != (v1alpha1.ConnAges{}) {
		t.Errorf("none open: %+v", got)
	}
	h[0], h[2], h[len(h)-1] = 1, 1, 1 // [0,1), [2,5), ≥ 3600 s
	if got := summarizeAges(h); got != (v1alpha1.ConnAges{Open: 3, Median: "2", Oldest: "3600"}) {
		t.Errorf("three open: %+v", got)
	}
}
