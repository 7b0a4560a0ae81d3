package worker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// lookGate is a judge gate that looks during the soak (gate.Looker): a
// look at or after failAt (zero: never) finds a conclusive regression.
type lookGate struct {
	*judgeGate
	failAt time.Duration

	mu    sync.Mutex
	looks []time.Duration
	soaks []time.Duration
}

var _ gate.Looker = (*lookGate)(nil)

func (g *lookGate) Look(_ context.Context, in gate.GateInput, elapsed time.Duration) (health.Verdict, bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.looks, g.soaks = append(g.looks, elapsed), append(g.soaks, in.Soak)
	if g.failAt == 0 || elapsed < g.failAt {
		return health.Verdict{Outcome: health.Pass}, false, nil
	}
	d := "failed early at 0:20 of 5:00 soak, sequential test"
	return health.Verdict{Outcome: health.Fail, Headline: "probe: resets received 0.2/s → 10/s (p<0.001); " + d,
		Reasons: []string{"probe: resets received 0.2/s → 10/s, p<0.001", d},
		Summary: &v1alpha1.NodeJudgement{IntervalOutcome: health.Fail, Regressions: 1, Decision: d}}, true, nil
}

// TestLooksDuringTheSoak drives a node through a five-minute soak on a fake
// clock with a gate that looks: the soak looks every health.LookEvery from
// its start, handing the gate the soak's length; a look that decides fails
// the node then, with the look's verdict and decision, before the soak's
// end and without a judgement; looks that never decide leave the node to
// its judgement at the soak's end, which passes it.
func TestLooksDuringTheSoak(t *testing.T) {
	for _, tc := range []struct {
		name   string
		failAt time.Duration
	}{{"a regression found at 0:20", 20 * time.Second}, {"nothing conclusive", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fixture.Clock{T: t0}
			g := &lookGate{judgeGate: passing(), failAt: tc.failAt}
			r := newRig(t, g, clk, func(s *v1alpha1.NodeRolloutSpec) { s.Baseline = v1alpha1.DurationOf(0) })
			r.sleepOn(clk)
			if err := r.drive(t.Context()); err != nil {
				t.Fatal(err)
			}
			if since := r.nodes.recordOf(t, v1alpha1.NodeSoak).SoakSince; !since.Equal(t0) {
				t.Fatalf("the soak began at %s, want %s", since, t0)
			}
			g.mu.Lock()
			looks, soaks := append([]time.Duration(nil), g.looks...), g.soaks
			g.mu.Unlock()
			want := int(longTime/health.LookEvery) - 1 // every 5 s before the soak's end
			if tc.failAt > 0 {
				want = int(tc.failAt / health.LookEvery)
			}
			if len(looks) != want {
				t.Fatalf("%d looks at %v: want %d", len(looks), looks, want)
			}
			for i, at := range looks {
				if at != time.Duration(i+1)*health.LookEvery || soaks[i] != longTime {
					t.Fatalf("looks at %v of soaks %v: want one every %s of the %s soak", looks, soaks, health.LookEvery, longTime)
				}
			}
			ns := r.status.node(node1)
			if tc.failAt == 0 {
				if ns.State != v1alpha1.NodeDone || len(g.inputs()) != 1 {
					t.Fatalf("node %s (%s), judged %d times: want Done by its judgement at the soak's end", ns.State, ns.Reason, len(g.inputs()))
				}
				return
			}
			if ns.State != v1alpha1.NodeFailed || len(g.inputs()) != 0 {
				t.Fatalf("node %s, judged %d times: want Failed by the look, before any judgement", ns.State, len(g.inputs()))
			}
			if !strings.HasSuffix(ns.Verdict, "failed early at 0:20 of 5:00 soak, sequential test") || ns.Judgement == nil || ns.Judgement.Decision == "" {
				t.Errorf("verdict %q, judgement %+v: want the look's, saying it failed early", ns.Verdict, ns.Judgement)
			}
			if st := r.status.status(); st.Phase != v1alpha1.PhaseHalted || r.halts(nodestep.HaltGateFailed) != 1 {
				t.Errorf("rollout %s, gate_failed halts %v: want Halted", st.Phase, r.halts(nodestep.HaltGateFailed))
			}
		})
	}
}

// sleepOn makes the worker's sleeps move clk: the fake clock moves only
// when the worker waits.
func (r *rig) sleepOn(clk *fixture.Clock) {
	r.Sleep = func(ctx context.Context, until time.Time) error {
		clk.AdvanceTo(until)
		return ctx.Err()
	}
}
