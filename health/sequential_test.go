package health

import (
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// seqSoak is the default soak the sequential tests look through.
const seqSoak = 5 * time.Minute

// seqNode draws one simulated node (its baseline and the snapshot at its
// soak's start) and a judge whose agent answers with *cur.
func seqNode(t testing.TB, r *rand.Rand) ([]simPod, []wire.Snapshot, wire.Snapshot, *Judge, *wire.Snapshot) {
	t.Helper()
	pods := newSimNode(r)
	series, soakStart, _ := simSnapshots(r, pods, nil)
	cur := new(wire.Snapshot)
	j, err := NewJudge(JudgeConfig{
		Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return *cur, nil }),
		Now:    func() time.Time { return cur.Time.Add(time.Second) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return pods, series, soakStart, j, cur
}

// rstChange is the faulty -rst ztunnel build on the probe: a quarter of its
// connections reset.
func rstChange(pods []simPod) *simChange {
	p := len(pods) - 1
	return &simChange{pod: p, resetScale: 0.25 / pods[p].resetRecvP, latScale: 1}
}

// A build that resets a quarter of the probe's connections fails at the
// first look, 5 s into a 5-minute soak, and the verdict says so; the same
// node under the fixed method is not decided during the soak.
func TestLookFailsAClearRegressionEarly(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 1))
	pods, series, soakStart, j, cur := seqNode(t, r)
	*cur = simMore(r, pods, rstChange(pods), soakStart, int(LookEvery/time.Second))
	in := Input{Node: "node-a", Gates: Config{Sequential: true}, Baseline: series, SoakStart: soakStart, Soak: seqSoak}
	v, failed, err := j.Look(context.Background(), in, LookEvery)
	if err != nil {
		t.Fatal(err)
	}
	if !failed || v.Outcome != Fail {
		t.Fatalf("look at 0:05: decided %t, %s %q: want an early Fail", failed, v.Outcome, v.Headline)
	}
	const want = "failed early at 0:05 of 5:00 soak, sequential test"
	if !strings.HasPrefix(v.Headline, "probe: resets received") || !strings.HasSuffix(v.Headline, want) || v.Summary.Decision != want {
		t.Errorf("headline %q, decision %q: want the probe's resets, then %q", v.Headline, v.Summary.Decision, want)
	}
	in.Gates.Sequential = false
	if _, failed, _ := j.Look(context.Background(), in, LookEvery); failed {
		t.Error("the fixed method decided during the soak")
	}
}

// Healthy seeded nodes looked at every LookEvery through a 5-minute soak:
// the looks together fail no more of them than their share of the
// significance allows (0.05% of 150 is 0.075 expected; at most 1 of 150
// by the binomial, p ≈ 0.997). Each look at the whole significance fails
// several.
func TestLooksDoNotFailHealthyNodesBeyondTheirAlpha(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 2))
	failed, nodes := 0, 150
	var examples []string
	for range nodes {
		pods, series, soakStart, j, cur := seqNode(t, r)
		in := Input{Node: "node-a", Gates: Config{Sequential: true}, Baseline: series, SoakStart: soakStart, Soak: seqSoak}
		*cur = soakStart
		for k := 1; k <= Looks(seqSoak); k++ {
			*cur = simMore(r, pods, nil, *cur, int(LookEvery/time.Second))
			v, early, err := j.Look(context.Background(), in, time.Duration(k)*LookEvery)
			if err != nil {
				t.Fatal(err)
			}
			if early {
				failed++
				examples = append(examples, v.Headline)
				break
			}
		}
	}
	t.Logf("%d of %d healthy nodes failed by a look (%d looks): %q", failed, nodes, Looks(seqSoak), examples)
	if failed > 1 {
		t.Errorf("%d of %d healthy nodes failed early: more than the looks' share of the significance allows", failed, nodes)
	}
}

// A look never passes a node: a healthy node's look decides nothing, even
// when its verdict at that look is a Pass; only the judgement at the soak's
// end passes it, and it says it took the whole soak.
func TestPassingNeedsTheFullSoak(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 3))
	pods, series, soakStart, j, cur := seqNode(t, r)
	*cur = simMore(r, pods, nil, soakStart, 60)
	in := Input{Node: "node-a", Gates: Config{Sequential: true}, Baseline: series, SoakStart: soakStart, Soak: seqSoak}
	v, decided, err := j.Look(context.Background(), in, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != Pass || decided || v.Summary.Decision != "" {
		t.Fatalf("look at 1:00 of a healthy node: %s, decided %t (%q); want a Pass that decides nothing", v.Outcome, decided, v.Summary.Decision)
	}
	*cur = simMore(r, pods, nil, *cur, 240)
	end := mustJudge(t, j, in)
	const want = "passed at 5:00, after the 5:00 soak, sequential test"
	if end.Outcome != Pass || end.Summary.Decision != want || end.Reasons[len(end.Reasons)-1] != want {
		t.Errorf("end of the soak: %s, decision %q, reasons %q: want Pass, %q", end.Outcome, end.Summary.Decision, end.Reasons, want)
	}
}

// The judgement at the soak's end spends what the looks did not: its
// significance is the whole one under the fixed method (the default), 90%
// of it under the sequential one, so the end never rejects what the fixed method would not.
func TestEndSignificanceLeavesTheLooksTheirShare(t *testing.T) {
	c, _ := NewConfig(Config{Sequential: true})
	if got := c.endSignificance(); math.Abs(got-0.0045) > 1e-12 {
		t.Errorf("sequential end α %g, want 0.0045", got)
	}
	fixed := c
	fixed.Sequential = false
	if got := fixed.endSignificance(); got != 0.005 {
		t.Errorf("fixed end α %g, want 0.005", got)
	}
	looks := 0.0
	for k := 1; k <= Looks(seqSoak)+3; k++ { // a look past the last slot spends nothing more
		looks += LookSignificance(0.005, seqSoak, time.Duration(k)*LookEvery)
	}
	if got, want := looks+c.endSignificance(), 0.005; got > want+1e-12 {
		t.Errorf("looks and end spend α %g, more than %g", got, want)
	}
}
