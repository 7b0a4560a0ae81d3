package dashboard

import (
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// haltedSpan is haltedRollout's judgement of node-001: a minute of
// baseline, a minute of swap, a minute of soak.
var haltedSpan = judgedSpan{BaselineFrom: t0, SwapAt: t0.Add(time.Minute), SoakFrom: t0.Add(2 * time.Minute), SoakTo: t0.Add(3 * time.Minute)}

// values are a series' points in one window, and whether they lie in time
// order inside it.
func values(t *testing.T, s seriesData, window string, from, to time.Time) []float64 {
	t.Helper()
	var out []float64
	var last time.Time
	for _, p := range s.Points {
		if p.Window != window {
			continue
		}
		if p.T.Before(from) || p.T.After(to) || p.T.Before(last) {
			t.Errorf("%s's %s point at %s is outside %s–%s or out of order", s.Label, window, p.T, from, to)
		}
		last = p.T
		out = append(out, p.V)
	}
	return out
}

// allNear says every value is within rel of want, relatively.
func allNear(got []float64, want, rel float64) bool {
	for _, v := range got {
		if v < want*(1-rel) || v > want*(1+rel) {
			return false
		}
	}
	return len(got) > 0
}

func series(t *testing.T, charts []chartData, id, kind string) seriesData {
	t.Helper()
	for _, c := range charts {
		if c.ID != id {
			continue
		}
		for _, s := range c.Series {
			if s.Kind == kind {
				return s
			}
		}
	}
	t.Fatalf("no %s series in chart %s", kind, id)
	return seriesData{}
}

// TestChartsReadTheJudgedWindows: each family's points are the judged
// node's intervals inside the baseline and inside the soak (none from the
// swap between), its workload's rates apart from the probe's, and the
// control nodes pooled to a mean per node.
func TestChartsReadTheJudgedWindows(t *testing.T) {
	node := agentHistory{Node: "node-001", Snaps: agentHistoryOf("node-001", true).Snapshots}
	controls := []agentHistory{{Node: "node-002", Snaps: agentHistoryOf("node-002", false).Snapshots}, {Node: "node-003", Snaps: agentHistoryOf("node-003", false).Snapshots}}
	charts := buildCharts(haltedSpan, node, controls, "nodewise-probe")
	if len(charts) != 3 || charts[0].ID != "resets" || charts[1].ID != "failed-connects" || charts[2].ID != "connect-latency" {
		t.Fatalf("charts %+v", charts)
	}
	for _, c := range []struct {
		id, kind            string
		baseline, soak, rel float64
	}{
		{"resets", seriesNode, 0.2, 4, 1e-9},
		{"resets", seriesControl, 0.2, 0.2, 1e-9},
		{"resets", seriesProbe, 0, 0.6, 1e-9},
		{"failed-connects", seriesNode, 0, 0.2, 1e-9},
		{"failed-connects", seriesControl, 0, 0, 1e-9},
		{"connect-latency", seriesNode, 1.536, 6.144, 1.001 / 3},    // p99 inside the 1–2 ms bucket, then inside the 4–8 ms one
		{"connect-latency", seriesControl, 1.536, 1.536, 1.001 / 3}, // steady
	} {
		s := series(t, charts, c.id, c.kind)
		b := values(t, s, windowBaseline, haltedSpan.BaselineFrom, haltedSpan.SwapAt)
		a := values(t, s, windowSoak, haltedSpan.SoakFrom, haltedSpan.SoakTo)
		// 12 intervals of 5 s in each minute-long window; those that reach
		// into the swap, or start before the baseline, are not drawn.
		if len(b) != 12 || len(a) != 12 || !allNear(b, c.baseline, c.rel) || !allNear(a, c.soak, c.rel) {
			t.Errorf("%s %s: baseline %v, soak %v; want 12 points of %g, then 12 of %g", c.id, c.kind, b, a, c.baseline, c.soak)
		}
		if len(s.Points) != 24 {
			t.Errorf("%s %s has %d points, want the 24 of the windows", c.id, c.kind, len(s.Points))
		}
	}
	// A swap that starts between two snapshots: the interval over it mixes
	// the old ztunnel with the new and is not drawn.
	late := haltedSpan
	late.SwapAt = late.SwapAt.Add(3 * time.Second)
	if b := values(t, series(t, buildCharts(late, node, controls, "nodewise-probe"), "resets", seriesNode), windowBaseline, late.BaselineFrom, late.SwapAt); len(b) != 12 || !allNear(b, 0.2, 1e-9) {
		t.Errorf("baseline up to a swap 3 s into an interval: %v, want the 12 whole intervals before it", b)
	}
	if l := series(t, charts, "resets", seriesControl).Label; l != "controls" {
		t.Errorf("the control series reads %q", l)
	}
	one := buildCharts(haltedSpan, node, controls[:1], "nodewise-probe")
	if l := series(t, one, "resets", seriesControl).Label; l != "control node-002" {
		t.Errorf("one control's series reads %q", l)
	}
	for _, s := range buildCharts(haltedSpan, node, nil, "nodewise-probe")[0].Series {
		if s.Kind == seriesControl {
			t.Error("a control series without control nodes")
		}
	}
}

// TestChartsPlaceASkewedAgentOnTheDashboardsClock: an agent whose clock is
// 42 s ahead (not a whole number of its 5 s periods), shifted back by the
// offset measured on its answer, gives the same points as one on time.
func TestChartsPlaceASkewedAgentOnTheDashboardsClock(t *testing.T) {
	h := agentHistoryOf("node-001", true)
	for i := range h.Snapshots {
		h.Snapshots[i].Time = h.Snapshots[i].Time.Add(42 * time.Second)
	}
	got := buildCharts(haltedSpan, agentHistory{Node: "node-001", Snaps: h.Snapshots, Shift: -42 * time.Second}, nil, "nodewise-probe")
	want := buildCharts(haltedSpan, agentHistory{Node: "node-001", Snaps: agentHistoryOf("node-001", true).Snapshots}, nil, "nodewise-probe")
	s, w := series(t, got, "resets", seriesNode), series(t, want, "resets", seriesNode)
	if len(s.Points) != len(w.Points) || len(s.Points) == 0 {
		t.Fatalf("%d points, want %d", len(s.Points), len(w.Points))
	}
	for i := range s.Points {
		if !s.Points[i].T.Equal(w.Points[i].T) || s.Points[i].V != w.Points[i].V || s.Points[i].Window != w.Points[i].Window {
			t.Errorf("point %d: %+v, want %+v", i, s.Points[i], w.Points[i])
		}
	}
}

// TestChartsSkipWhatCannotBeSubtracted: the interval over an agent restart
// (its counters start again), a pod's counters that went back, and a pod
// that appeared are not read as traffic.
func TestChartsSkipWhatCannotBeSubtracted(t *testing.T) {
	h := agentHistoryOf("node-001", false)
	restart := t0.Add(30 * time.Second)
	for i := range h.Snapshots {
		if s := &h.Snapshots[i]; s.Time.After(restart) {
			s.StartTime = restart // counters of a new run: the interval across it is no interval
		}
	}
	iv := intervals(agentHistory{Node: "node-001", Snaps: h.Snapshots}, "nodewise-probe")
	if len(iv) != len(h.Snapshots)-2 {
		t.Errorf("%d intervals of %d snapshots over one restart, want %d", len(iv), len(h.Snapshots), len(h.Snapshots)-2)
	}
	for _, i := range iv {
		if i.From.Equal(restart) {
			t.Errorf("an interval across the restart: %s–%s", i.From, i.To)
		}
	}

	a := wire.Snapshot{Node: "n", Time: t0, StartTime: t0.Add(-time.Hour), Pods: []wire.PodCounters{
		{Namespace: "default", Name: "old", UID: "1", Side: wire.SideApp, ResetsSent: 50},
		{Namespace: "default", Name: "steady", UID: "2", Side: wire.SideApp, ResetsSent: 10},
	}}
	b := wire.Snapshot{Node: "n", Time: t0.Add(10 * time.Second), StartTime: t0.Add(-time.Hour), Pods: []wire.PodCounters{
		{Namespace: "default", Name: "old", UID: "1", Side: wire.SideApp, ResetsSent: 5},      // went back
		{Namespace: "default", Name: "steady", UID: "2", Side: wire.SideApp, ResetsSent: 30},  // +20
		{Namespace: "default", Name: "new", UID: "3", Side: wire.SideApp, ResetsSent: 1000},   // appeared
		{Namespace: "default", Name: "steady", UID: "2", Side: wire.SideProxy, ResetsSent: 7}, // another side, appeared
	}}
	got := intervals(agentHistory{Node: "n", Snaps: []wire.Snapshot{a, b}}, "nodewise-probe")
	if len(got) != 1 || got[0].workload.resets != 20 || got[0].workload.pods != 1 || got[0].workload.seconds != 10 {
		t.Errorf("intervals %+v, want the steady pod's 20 resets over 10 s alone", got)
	}
}
