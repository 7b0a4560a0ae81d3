package health

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// TestAssessSwap: the swap window's decision, on windows built by hand. A
// baseline of 60 s on one pod with 20 connects a second and no failures;
// the swap window of 30 s holds what each case says.
func TestAssessSwap(t *testing.T) {
	pod := func(uid string, d time.Duration, c Counts) PodWindow {
		return PodWindow{PodKey: PodKey{Namespace: "shop", Name: "cart", Side: wire.SideApp}, UID: uid, Duration: d, Counts: c}
	}
	base := Window{Duration: time.Minute, Pods: []PodWindow{pod("u1", time.Minute, Counts{Connects: 1200, ResetsReceived: 1})}}
	cart := PodKey{Namespace: "shop", Name: "cart", Side: wire.SideApp}
	for _, tc := range []struct {
		name     string
		swap     Counts
		uid      string            // of the pod in the swap window (u1: the baseline's)
		open     map[PodKey]uint64 // connections open at the swap's start
		disabled bool              // the failed-connects count gate is switched off
		want     []Metric
		tested   int
	}{
		// A replace swap with drain never: the node has no listener for
		// seconds, and new connects are refused.
		{name: "refused connects", swap: Counts{Connects: 200, ConnectFailures: 400}, want: []Metric{v1alpha1.MetricConnectFailures}, tested: 1},
		// A make-before-break swap: the traffic goes on, a reset or two.
		{name: "clean hand-over", swap: Counts{Connects: 600, ResetsReceived: 2}, tested: 0},
		// The old ztunnel resets the connections that outlive its drain
		// deadline, young or old at the swap's start: the swap's plan, so
		// not the node's.
		{name: "resets of connections open at the swap", swap: Counts{Connects: 600, ResetsReceived: 50}, open: map[PodKey]uint64{cart: 50}, tested: 0},
		// Beyond one per open connection they count.
		{name: "resets beyond the open connections", swap: Counts{Connects: 600, ResetsReceived: 120}, open: map[PodKey]uint64{cart: 50},
			want: []Metric{v1alpha1.MetricResetsReceived}, tested: 1},
		// Failures at the baseline's own rate are no regression.
		{name: "as noisy as before", swap: Counts{Connects: 600, ConnectFailures: 30, ResetsReceived: 1}, tested: 1},
		// A pod that appeared during the swap has no before to compare.
		{name: "a new pod", swap: Counts{Connects: 200, ConnectFailures: 400}, uid: "u2", tested: 0},
		{name: "failed connects switched off", swap: Counts{Connects: 200, ConnectFailures: 400}, disabled: true, tested: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := base
			if tc.name == "as noisy as before" {
				b = Window{Duration: time.Minute, Pods: []PodWindow{pod("u1", time.Minute, Counts{Connects: 1200, ConnectFailures: 60, ResetsReceived: 1})}}
			}
			uid := tc.uid
			if uid == "" {
				uid = "u1"
			}
			sw := pod(uid, 30*time.Second, tc.swap)
			sw.Appeared = uid != "u1"
			cfg, err := NewConfig(Config{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.disabled {
				cfg.Counts[v1alpha1.MetricConnectFailures] = CountThresholds{Disabled: true}
			}
			got := assessSwap(cfg, b, Window{Duration: 30 * time.Second, Pods: []PodWindow{sw}}, Dispersion{}, tc.open)
			var regressed []Metric
			tested := 0
			for _, r := range got.Rows {
				if r.Regressed {
					regressed = append(regressed, r.Metric)
				}
				if r.Tested {
					tested++
				}
				if tc.disabled && r.Metric == v1alpha1.MetricConnectFailures {
					t.Errorf("a disabled count gate has a swap row: %+v", r)
				}
			}
			if strings.Join(metricNames(regressed), ",") != strings.Join(metricNames(tc.want), ",") || tested != tc.tested {
				t.Errorf("regressed %v with %d tested, want %v with %d; rows %+v", regressed, tested, tc.want, tc.tested, got.Rows)
			}
			if got.Regressions() != len(tc.want) {
				t.Errorf("Regressions() %d, want %d", got.Regressions(), len(tc.want))
			}
		})
	}
}

func metricNames(ms []Metric) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m))
	}
	return out
}

// swapNode is a node judged over a 60 s baseline, a 30 s swap and a 30 s
// soak: one workload pod with 20 connects a second throughout, failPerSec
// refused connects a second during the swap alone, and young streams open
// (10 s old) at the swap's start, reset in the swap window (at the old
// ztunnel's drain deadline, which they outlive).
func swapNode(failPerSec, young uint64) (Input, wire.Snapshot) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	const swapFrom, soakFrom = 60, 90
	snap := func(s uint64) wire.Snapshot {
		fails := failPerSec * (min(max(s, swapFrom), soakFrom) - swapFrom)
		p := wire.PodCounters{Namespace: "shop", Name: "cart", UID: "u1", Side: wire.SideApp, Connects: 20 * s,
			ConnectFailures: map[wire.ConnectErrorClass]uint64{wire.ConnectRefused: fails}, ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}
		switch {
		case s == swapFrom:
			p.ConnAges[1] = young
		case s > swapFrom:
			p.ResetsReceived = young
		}
		return wire.Snapshot{Node: "node-001", Time: t0.Add(time.Duration(s) * time.Second), StartTime: t0, Mode: wire.ModeEBPF, Seq: s, Pods: []wire.PodCounters{p}}
	}
	in := Input{Node: "node-001", Soak: 30 * time.Second, DrainDeadline: 25 * time.Second,
		Gates:    Config{ProbeOptional: true, ConsecutiveFailures: 1, Inconclusive: v1alpha1.InconclusivePass},
		Baseline: []wire.Snapshot{snap(0), snap(20), snap(40), snap(swapFrom)}, SoakStart: snap(soakFrom)}
	return in, snap(soakFrom + 30)
}

// TestJudgeFailsABrokenHandOver: a hand-over that refuses connects for its
// swap fails the node, though its soak is clean, with the swap window in
// the headline and the detail; the same node with a clean hand-over
// passes and says its swap window was judged, and so does one whose 30
// young streams the old ztunnel reset at its deadline. Under the
// sequential method the first look fails the broken one.
func TestJudgeFailsABrokenHandOver(t *testing.T) {
	judge := func(fails uint64, young ...uint64) (*Judge, Input) {
		in, cur := swapNode(fails, append(young, 0)[0])
		j, err := NewJudge(JudgeConfig{Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil }),
			Now: func() time.Time { return cur.Time }})
		if err != nil {
			t.Fatal(err)
		}
		return j, in
	}
	j, in := judge(15)
	v := mustJudge(t, j, in)
	if want := "swap window: failed connects 0/s → 15/s over 30s (p<0.001)"; v.Outcome != Fail || !strings.HasPrefix(v.Headline, want) {
		t.Errorf("broken hand-over: %s %q, want Fail %q", v.Outcome, v.Headline, want)
	}
	if v.Summary.Regressions != 1 || !hasReason(v, "450 in the 30s swap window against 0 in the baseline; counted against the node") {
		t.Errorf("regressions %d, reasons %q", v.Summary.Regressions, v.Reasons)
	}

	j, in = judge(0)
	v = mustJudge(t, j, in)
	if v.Outcome != Pass || !hasReason(v, "swap window (cordon to soak, 30s, 1 pods through it): 0 failed connects (too few to test)") {
		t.Errorf("clean hand-over: %s %q %q", v.Outcome, v.Headline, v.Reasons)
	}

	j, in = judge(0, 30)
	v = mustJudge(t, j, in)
	if v.Outcome != Pass || !hasReason(v, "30 resets of connections open at the swap's start not counted") {
		t.Errorf("young streams reset at the drain deadline: %s %q %q", v.Outcome, v.Headline, v.Reasons)
	}

	j, in = judge(15)
	in.Gates.Sequential = true
	lv, decided, err := j.Look(context.Background(), in, 5*time.Second)
	if err != nil || !decided || lv.Outcome != Fail || !strings.HasPrefix(lv.Headline, "swap window: failed connects") {
		t.Errorf("sequential look: decided %v %s %q (%v), want an early Fail on the swap window", decided, lv.Outcome, lv.Headline, err)
	}
}

// TestSimHealthySwapWindowFalseFail: the swap family on the seeded healthy
// nodes of the acceptance simulation (sim_test.go: a 10-minute baseline,
// then a 60 s swap window drawn from the same traffic, bursts and
// over-dispersion, nothing refused or reset by the swap): it must fail at
// most as often as the soak's families are allowed to (1%), and a broken
// hand-over drawn on the same nodes (every pod's connects refused for a
// third of the window, as a node without a listener for 20 s refuses
// them) is caught on nearly every node.
func TestSimHealthySwapWindowFalseFail(t *testing.T) {
	cfg, err := NewConfig(Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7^0x9e3779b97f4a7c15))
	const trials = 1000
	fails, caught := 0, 0
	var examples []string
	for range trials {
		series, swapEnd, _ := simSnapshots(r, newSimNode(r), nil)
		last := series[len(series)-1]
		base, err := NewWindow(series[0], last)
		if err != nil {
			t.Fatal(err)
		}
		disp, err := EstimateDispersion(series, cfg.CountDispersion)
		if err != nil {
			t.Fatal(err)
		}
		sw, err := NewWindow(last, swapEnd)
		if err != nil {
			t.Fatal(err)
		}
		if s := assessSwap(cfg, base, sw, disp, OpenAtSwap(last)); s.Regressions() > 0 {
			fails++
			if len(examples) < 3 {
				examples = append(examples, s.reasons()[0])
			}
		}
		sw.Pods = append([]PodWindow(nil), sw.Pods...)
		for i := range sw.Pods {
			sw.Pods[i].Counts.ConnectFailures += sw.Pods[i].Counts.Connects / 3
		}
		if s := assessSwap(cfg, base, sw, disp, OpenAtSwap(last)); s.Regressions() > 0 {
			caught++
		}
	}
	t.Logf("healthy swap windows: %d of %d failed (%.2f%%), examples %q; a third of the connects refused caught on %d", fails, trials, 100*float64(fails)/trials, examples, caught)
	if float64(fails)/trials > 0.01 {
		t.Errorf("swap window false-Fail rate %.2f%% > 1%%", 100*float64(fails)/trials)
	}
	if caught < trials*99/100 {
		t.Errorf("refused connects caught on %d of %d nodes, want at least 99%%", caught, trials)
	}
}
