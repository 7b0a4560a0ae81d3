package health

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// demoNode is a node shaped like the demo's canary under the faulty -rst
// ztunnel build: the probe's pod (both sides) carries ~30 connections a
// second, one quiet workload pod is enrolled (1/1), and in the soak the
// probe's proxy side sends resets it never sent before. rstPerSec 0 is the
// healthy build.
func demoNode(rstPerSec uint64) (Input, wire.Snapshot) {
	t0 := time.Date(2026, 12, 7, 2, 44, 50, 0, time.UTC)
	enrolled := &wire.Enrollment{Pods: []wire.PodEnrollment{{Namespace: "shop", Name: "cart-b4f7b7b66-p8hkt", UID: "cart", Result: wire.Enrolled}}}
	hist := func(n uint64) wire.Log2Histogram {
		h := wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)}
		h.Buckets[5] = n
		return h
	}
	// snap is the agent's counters at second s; resets sent from soakFrom on.
	soakFrom := uint64(10)
	snap := func(s uint64) wire.Snapshot {
		rst := uint64(0)
		if s > soakFrom {
			rst = rstPerSec * (s - soakFrom)
		}
		pod := func(ns, name, uid string, side wire.Side, connects, resets uint64) wire.PodCounters {
			return wire.PodCounters{Namespace: ns, Name: name, UID: uid, Side: side, Connects: connects, ResetsSent: resets,
				ConnectLatency: hist(connects), SRTT: hist(connects), ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}
		}
		return wire.Snapshot{Node: "node-007", Time: t0.Add(time.Duration(s) * time.Second), StartTime: t0, Mode: wire.ModeEBPF, Seq: s, Enrollment: enrolled,
			Pods: []wire.PodCounters{
				pod(DefaultProbeNamespace, "nodewise-probe-jqxmx", "probe", wire.SideApp, 30*s, 0),
				pod(DefaultProbeNamespace, "nodewise-probe-jqxmx", "probe", wire.SideProxy, 30*s, rst),
				pod("shop", "cart-b4f7b7b66-p8hkt", "cart", wire.SideApp, s/2, 0),
			}}
	}
	in := Input{Node: "node-007", Gates: Config{ConsecutiveFailures: 1, Inconclusive: v1alpha1.InconclusivePass},
		Baseline: []wire.Snapshot{snap(0), snap(2), snap(4), snap(6), snap(8), snap(10)}, SoakStart: snap(soakFrom)}
	return in, snap(soakFrom + 20)
}

func judgeDemoNode(t *testing.T, rstPerSec uint64) Verdict {
	t.Helper()
	in, cur := demoNode(rstPerSec)
	j, err := NewJudge(JudgeConfig{Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil }),
		Now: func() time.Time { return cur.Time }})
	if err != nil {
		t.Fatal(err)
	}
	return mustJudge(t, j, in)
}

// TestHeadlineNamesTheDemosProbeResets: the demo's halt reads as one line
// that leads with the failing evidence (the probe's resets sent, before →
// after, p), not with the enrollment check that passed, within
// HeadlineMax; the reasons keep the rest.
func TestHeadlineNamesTheDemosProbeResets(t *testing.T) {
	v := judgeDemoNode(t, 3)
	if v.Outcome != Fail {
		t.Fatalf("faulty build: %s %q", v.Outcome, v.Reasons)
	}
	want := "probe: resets sent 0/s → 3/s (p<0.001)"
	if v.Headline != want {
		t.Errorf("headline %q, want %q", v.Headline, want)
	}
	if line := v.Line(); line != "Fail: "+want || utf8.RuneCountInString(line) > HeadlineMax {
		t.Errorf("line %q (%d characters), want %q within %d", line, utf8.RuneCountInString(line), "Fail: "+want, HeadlineMax)
	}
	if !hasReason(v, "enrolled 1/1") || !hasReason(v, "probe: 2 pods") {
		t.Errorf("the detail lost the enrollment or the probe's line: %q", v.Reasons)
	}
}

// TestHeadlineOfAPass: a pass says what was tested, and a pass with nothing
// testable says so plainly.
func TestHeadlineOfAPass(t *testing.T) {
	v := judgeDemoNode(t, 0)
	if want := "no regression in the probe's 4 tests; no workload pod had the traffic to test"; v.Outcome != Pass || v.Headline != want {
		t.Errorf("healthy build: %s %q, want Pass %q", v.Outcome, v.Headline, want)
	}
	in, cur := demoNode(0)
	quiet := func(s wire.Snapshot) wire.Snapshot {
		s.Pods = s.Pods[2:] // the workload pod alone, a connection every 2 s
		return s
	}
	for i := range in.Baseline {
		in.Baseline[i] = quiet(in.Baseline[i])
	}
	in.SoakStart, cur = quiet(in.SoakStart), quiet(cur)
	j, err := NewJudge(JudgeConfig{Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil }),
		Now: func() time.Time { return cur.Time }})
	if err != nil {
		t.Fatal(err)
	}
	v = mustJudge(t, j, in)
	if want := "nothing to test: 10 connections in 20s of soak (need 100); passed by gates.inconclusive: Pass"; v.Outcome != Pass || v.Headline != want {
		t.Errorf("no traffic: %s %q, want Pass %q", v.Outcome, v.Headline, want)
	}
}

// TestHeadlineOfLostEnrollment: enrollment lost in the swap leads, with the
// pod and the check, whatever the traffic said.
func TestHeadlineOfLostEnrollment(t *testing.T) {
	in, cur := demoNode(0)
	cur.Enrollment = &wire.Enrollment{Pods: []wire.PodEnrollment{{Namespace: "shop", Name: "cart-b4f7b7b66-p8hkt", UID: "cart",
		Result: wire.NotEnrolled, Failed: wire.CheckListeners, Detail: "nothing listens on 15008"}}}
	j, err := NewJudge(JudgeConfig{Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil }),
		Now: func() time.Time { return cur.Time }})
	if err != nil {
		t.Fatal(err)
	}
	v := mustJudge(t, j, in)
	want := "enrollment: pod shop/cart-b4f7b7b66-p8hkt was enrolled before the swap and is not after it: listeners failed: nothing listens on 15008"
	if v.Outcome != Fail || v.Headline != want {
		t.Errorf("lost enrollment: %s %q, want Fail %q", v.Outcome, v.Headline, want)
	}
}

// TestLeadAndCut: a headline made of findings names the first and counts
// the rest, and never runs past HeadlineMax characters.
func TestLeadAndCut(t *testing.T) {
	long := strings.Repeat("é", 300)
	if got := Lead([]string{long, "b", "c"}); utf8.RuneCountInString(got) != HeadlineMax || !strings.HasSuffix(got, "… (+2 more)") {
		t.Errorf("Lead of a long finding: %q (%d characters)", got, utf8.RuneCountInString(got))
	}
	if got := Lead([]string{"readiness: pod a not Ready\nsince 12:00"}); got != "readiness: pod a not Ready" {
		t.Errorf("Lead keeps one line: %q", got)
	}
	if got := (Verdict{Outcome: Fail, Reasons: []string{"x", "y"}}).Line(); got != "Fail: x (+1 more)" {
		t.Errorf("Line without a headline: %q", got)
	}
}

// TestWorstFirst: among regressions the smallest p as printed leads; at
// p<0.001 a pod's row leads the node's totals (it says where), then the
// larger rise.
func TestWorstFirst(t *testing.T) {
	pod := func(name string, p, before, after float64) Comparison {
		return Comparison{Pod: PodKey{Namespace: "shop", Name: name}, Metric: v1alpha1.MetricResetsReceived, PAdj: p, Before: before, After: after, Regressed: true}
	}
	node := pod("", 1e-12, 6, 9)
	rows := []Comparison{pod("slow", 0.004, 0, 9), node, pod("small", 1e-5, 1, 2), pod("big", 1e-4, 1, 8)}
	worstFirst(rows)
	var got []string
	for _, r := range rows {
		got = append(got, r.Pod.Name)
	}
	if want := []string{"big", "small", "", "slow"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("order %q, want %q", got, want)
	}
	if h := evidence(rows, SwapWindow{}, []string{"gate prometheus: success rate 0.9 < 0.99"}); h != "pod shop/big: resets received 1/s → 8/s (p<0.001) (+4 more)" {
		t.Errorf("evidence %q", h)
	}
	if h := evidence(nil, SwapWindow{}, []string{"gate prometheus: success rate 0.9 < 0.99"}); h != "gate prometheus: success rate 0.9 < 0.99" {
		t.Errorf("a gate's failure alone: %q", h)
	}
}
