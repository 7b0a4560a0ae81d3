package dashboard

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// xOf is where the time axis puts t over haltedSpan, computed apart from
// layoutPlot.
func xOf(t time.Time) float64 {
	return plotLeft + (plotRight-plotLeft)*float64(t.Sub(haltedSpan.BaselineFrom))/float64(haltedSpan.SoakTo.Sub(haltedSpan.BaselineFrom))
}

// lineOf is p's line of one series over one window.
func lineOf(t *testing.T, p plotView, kind, window string) lineView {
	t.Helper()
	for _, l := range p.Lines {
		if l.Kind == kind && l.Window == window {
			return l
		}
	}
	t.Fatalf("no %s line over the %s", kind, window)
	return lineView{}
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.01 }

// pairs reads an SVG points attribute back into coordinates.
func pairs(t *testing.T, points string) [][2]float64 {
	t.Helper()
	var out [][2]float64
	for _, p := range strings.Fields(points) {
		xs, ys, ok := strings.Cut(p, ",")
		x, errX := strconv.ParseFloat(xs, 64)
		y, errY := strconv.ParseFloat(ys, 64)
		if !ok || errX != nil || errY != nil {
			t.Fatalf("points %q: %q is no x,y", points, p)
		}
		out = append(out, [2]float64{x, y})
	}
	return out
}

// TestLayoutPlotScales: time runs across from the baseline's start (the
// plot's left) to the soak's end (its right), the swap marker stands at
// the swap, values run up from zero (the bottom) to a round top above the
// largest, and each series gets one line per window it has points in.
func TestLayoutPlotScales(t *testing.T) {
	c := chartData{ID: "resets", Title: "Resets", Unit: "resets/s", Series: []seriesData{
		{Kind: seriesNode, Label: "node-001", Points: []point{
			{t0, 0, windowBaseline}, {t0.Add(30 * time.Second), 0.2, windowBaseline},
			{t0.Add(150 * time.Second), 4.2, windowSoak}, {t0.Add(3 * time.Minute), 3, windowSoak}}},
		{Kind: seriesControl, Label: "controls", Points: []point{{t0.Add(30 * time.Second), 0.2, windowBaseline}, {t0.Add(150 * time.Second), 0.2, windowSoak}}},
	}}
	p := layoutPlot(c, haltedSpan)
	if !near(p.Swap.X, xOf(haltedSpan.SwapAt)) || p.Swap.At != "2026-12-03T03:01:00Z" {
		t.Errorf("swap marker at x=%g (%s), want x=%g at the swap", p.Swap.X, p.Swap.At, xOf(haltedSpan.SwapAt))
	}
	// 4.2 over four steps: a step of 2, a top of 6.
	if got := len(p.YTicks); got != 4 || p.YTicks[0].Label != "0" || p.YTicks[3].Label != "6" || !near(p.YTicks[0].At, plotBottom) || !near(p.YTicks[3].At, plotTop) {
		t.Errorf("y ticks %+v, want 0 to 6 by 2, bottom to top", p.YTicks)
	}
	if len(p.Lines) != 4 || p.Lines[3].Kind != seriesNode {
		t.Fatalf("%d lines, want controls then node (on top) over baseline and soak: %+v", len(p.Lines), p.Lines)
	}
	nodeB, nodeS, ctrlB, ctrlS := lineOf(t, p, seriesNode, windowBaseline), lineOf(t, p, seriesNode, windowSoak), lineOf(t, p, seriesControl, windowBaseline), lineOf(t, p, seriesControl, windowSoak)
	node, soak := pairs(t, nodeB.Points), pairs(t, nodeS.Points)
	if len(node) != 2 || len(soak) != 2 {
		t.Fatalf("node lines %+v %+v", nodeB, nodeS)
	}
	for _, c := range []struct {
		name string
		got  [2]float64
		x, y float64
	}{
		{"baseline's start at zero", node[0], plotLeft, plotBottom},
		{"0.2 at 30 s", node[1], xOf(t0.Add(30 * time.Second)), plotBottom - 0.2/6*(plotBottom-plotTop)},
		{"4.2 at 150 s", soak[0], xOf(t0.Add(150 * time.Second)), plotBottom - 4.2/6*(plotBottom-plotTop)},
		{"soak's end", soak[1], plotRight, plotBottom - 3.0/6*(plotBottom-plotTop)},
	} {
		if !near(c.got[0], c.x) || !near(c.got[1], c.y) {
			t.Errorf("%s: at (%g, %g), want (%g, %g)", c.name, c.got[0], c.got[1], c.x, c.y)
		}
	}
	if nodeB.HasLabel || !nodeS.HasLabel || nodeS.Label != "node-001" || ctrlB.HasLabel || !ctrlS.HasLabel {
		t.Errorf("direct labels: want each series' on its last line alone: %+v", p.Lines)
	}
	if nodeB.Dash != "" || ctrlB.Dash == "" || !strings.Contains(nodeB.Markers, "a3.2 3.2 0 1 0") || !strings.Contains(ctrlB.Markers, "h6.4v6.4h-6.4z") || strings.Contains(ctrlB.Markers, "a3.2") {
		t.Errorf("node and controls are not told apart by dash and marker (circles, squares): %+v", p.Lines)
	}
	if len(p.Bands) != 3 || !near(p.Bands[0].X, plotLeft) || !near(p.Bands[0].X+p.Bands[0].Width, p.Swap.X) ||
		!near(p.Bands[1].X+p.Bands[1].Width, xOf(haltedSpan.SoakFrom)) || !near(p.Bands[2].X+p.Bands[2].Width, plotRight) {
		t.Errorf("bands %+v", p.Bands)
	}
	// Minutes from the swap, from −1 to +2, the swap's 0 at its marker.
	var labels []string
	for _, tk := range p.XTicks {
		labels = append(labels, tk.Label)
		if tk.Label == "0" && !near(tk.At, p.Swap.X) {
			t.Errorf("the x tick 0 at %g, the swap at %g", tk.At, p.Swap.X)
		}
	}
	if got := strings.Join(labels, " "); got != "−1 −0.5 0 +0.5 +1 +1.5 +2" || p.XLabel != "minutes from the swap" {
		t.Errorf("x ticks %q (%s)", got, p.XLabel)
	}
	if p.Desc != "Resets (resets/s), baseline → soak: node-001 0.1 resets/s → 3.6 resets/s; controls 0.2 resets/s → 0.2 resets/s." || p.Empty != "" {
		t.Errorf("desc %q, empty %q", p.Desc, p.Empty)
	}
}

// TestLayoutPlotEdges: a plot without points says so and draws no line; a
// series of one point draws its marker; all zeros, or a span of no length,
// still give finite coordinates.
func TestLayoutPlotEdges(t *testing.T) {
	for _, c := range []struct {
		name      string
		series    []seriesData
		span      judgedSpan
		lines     int
		empty     bool
		yTopLabel string
	}{
		{"no series", nil, haltedSpan, 0, true, "1"},
		{"series without points", []seriesData{{Kind: seriesNode, Label: "n"}, {Kind: seriesProbe, Label: "probe"}}, haltedSpan, 0, true, "1"},
		{"one point", []seriesData{{Kind: seriesProbe, Label: "probe", Points: []point{{t0.Add(2 * time.Minute), 0.5, windowSoak}}}}, haltedSpan, 1, false, "0.6"},
		{"all zero", []seriesData{{Kind: seriesNode, Label: "n", Points: []point{{t0, 0, windowBaseline}, {t0.Add(time.Second), 0, windowBaseline}}}}, haltedSpan, 1, false, "1"},
		{"no length", []seriesData{{Kind: seriesNode, Label: "n", Points: []point{{t0, 2, windowBaseline}}}}, judgedSpan{t0, t0, t0, t0}, 1, false, "2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := layoutPlot(chartData{ID: "x", Title: "X", Unit: "/s", Series: c.series}, c.span)
			if len(p.Lines) != c.lines || (p.Empty != "") != c.empty {
				t.Fatalf("%d lines, empty %q; want %d lines, empty %v", len(p.Lines), p.Empty, c.lines, c.empty)
			}
			if top := p.YTicks[len(p.YTicks)-1]; top.Label != c.yTopLabel || !near(top.At, plotTop) {
				t.Errorf("y axis tops at %q (%g), want %q at the plot's top", top.Label, top.At, c.yTopLabel)
			}
			for _, l := range p.Lines {
				if l.N != len(pairs(t, l.Points)) || l.Markers == "" || !l.HasLabel {
					t.Errorf("line %+v: want its points, their markers and its label", l)
				}
			}
			for _, f := range []float64{p.Swap.X, p.YTicks[0].At} {
				if math.IsNaN(f) || math.IsInf(f, 0) {
					t.Errorf("a coordinate is %g", f)
				}
			}
			if len(p.XTicks) == 0 {
				t.Error("no x ticks")
			}
			if len(p.Legend) != len(c.series) {
				t.Errorf("legend %+v for %d series", p.Legend, len(c.series))
			}
		})
	}
}

// TestNiceCeiling: the value axis tops at 1, 2 or 5 times a power of ten
// times its steps, at or above the largest value.
func TestNiceCeiling(t *testing.T) {
	for _, c := range []struct{ max, top, step float64 }{
		{4.2, 6, 2}, {4, 4, 1}, {0.6, 0.6, 0.2}, {0.07, 0.08, 0.02}, {95, 100, 50}, {1234, 1500, 500}, {0, 1, 0.25},
	} {
		top, step := niceCeiling(c.max, 4)
		if !near(top, c.top) || !near(step, c.step) {
			t.Errorf("niceCeiling(%g) = %g by %g, want %g by %g", c.max, top, step, c.top, c.step)
		}
	}
}

// TestSpreadLabels: direct labels closer than labelGap are moved apart,
// and none leaves the plot's bottom.
func TestSpreadLabels(t *testing.T) {
	ls := []*lineView{{LabelY: 100}, {LabelY: 104}, {LabelY: 60}, {LabelY: plotBottom}, {LabelY: plotBottom - 1}}
	spreadLabels(ls)
	for i := 1; i < len(ls); i++ {
		if ls[i].LabelY-ls[i-1].LabelY < labelGap-1e-9 {
			t.Errorf("labels at %g and %g", ls[i-1].LabelY, ls[i].LabelY)
		}
	}
	if last := ls[len(ls)-1].LabelY; last > plotBottom+4 {
		t.Errorf("a label at %g, below the plot", last)
	}
}
