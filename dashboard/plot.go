package dashboard

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The plot's frame in SVG user units: the viewBox, and the plot area inside
// it (room for the legend above, the axes' ticks and labels left and below,
// the series' direct labels right).
const (
	plotWidth, plotHeight     = 520.0, 260.0
	plotLeft, plotRight       = 52.0, 420.0
	plotTop, plotBottom       = 34.0, 212.0
	legendY                   = 14.0
	labelGap                  = 12.0 // the least vertical distance between two direct labels
	markerSize                = 3.2
	maxXTicks, maxYTicks      = 7, 5
	minusSign                 = "−"
	noSamplesInTheWindowsText = "No samples in the judged windows."
)

// plotView is one plot laid out, for the "plot" template: every coordinate
// is computed here, so the template only writes them out.
type plotView struct {
	ID, Title, Unit string
	// Desc says in words what the plot shows: each series' mean over the
	// baseline and over the soak (the SVG's <desc>).
	Desc string
	// Empty is why nothing is drawn ("" when something is).
	Empty         string
	Width, Height float64
	Left, Right   float64
	Top, Bottom   float64
	// PlotHeight is Bottom less Top; TickEnd the x ticks' lower end.
	PlotHeight, TickEnd float64
	XTicks, YTicks      []tick
	XLabel              string
	Bands               []band
	Swap                marker
	Lines               []lineView
	Legend              []legendItem
}

// tick is an axis tick: its position along the axis and its label.
type tick struct {
	At    float64
	Label string
}

// band is a judged window's (or the swap's) stretch of the time axis.
type band struct {
	Window, Label string
	X, Width      float64
}

// marker is the swap's vertical line, at the time the swap started.
type marker struct {
	X  float64
	At string // RFC 3339
}

// lineView is one series over one window (plotView.Lines holds them last
// series first, so the first is drawn on top): a polyline through its points,
// a marker shape at each, and, on the last window it has points in, its
// direct label at the right edge.
type lineView struct {
	Kind, Window, Label string
	Points              string // "x,y x,y …"
	Markers             string // one path of every point's marker
	Dash                string // stroke-dasharray ("" solid)
	N                   int
	LabelY              float64
	HasLabel            bool
}

// legendItem is one series in the legend: a sample of its line and marker.
type legendItem struct {
	Kind, Label, Dash, Marker string
	// X0 and X1 are the sample line's ends, TextX where its label starts.
	X0, X1, TextX float64
}

// Each series is told apart by its dash pattern and marker shape as well as
// its colour (the style sheet's), so the plot reads without colour.
var seriesStyle = map[string]struct {
	dash   string
	marker func(x, y float64) string
}{
	seriesNode:    {"", circleAt},
	seriesControl: {"6 4", squareAt},
	seriesProbe:   {"2 3", triangleAt},
}

func circleAt(x, y float64) string {
	r := markerSize
	return fmt.Sprintf("M%s %sa%s %s 0 1 0 %s 0a%s %s 0 1 0 %s 0", num(x-r), num(y), num(r), num(r), num(2*r), num(r), num(r), num(-2*r))
}

func squareAt(x, y float64) string {
	r := markerSize
	return fmt.Sprintf("M%s %sh%sv%sh%sz", num(x-r), num(y-r), num(2*r), num(2*r), num(-2*r))
}

func triangleAt(x, y float64) string {
	r := markerSize * 1.2
	return fmt.Sprintf("M%s %sl%s %sh%sz", num(x), num(y-r), num(r), num(1.7*r), num(-2*r))
}

// num writes a coordinate with at most two decimals.
func num(f float64) string { return strconv.FormatFloat(math.Round(f*100)/100, 'f', -1, 64) }

// layoutPlot lays c out over the judged windows: time across from the
// baseline's start to the soak's end, labelled in minutes (or seconds)
// from the swap, values up from zero to a round number above the largest.
func layoutPlot(c chartData, span judgedSpan) plotView {
	p := plotView{ID: c.ID, Title: c.Title, Unit: c.Unit, Width: plotWidth, Height: plotHeight,
		Left: plotLeft, Right: plotRight, Top: plotTop, Bottom: plotBottom, PlotHeight: plotBottom - plotTop, TickEnd: plotBottom + 4}
	t0, t1 := span.BaselineFrom, span.SoakTo
	if !t1.After(t0) {
		t1 = t0.Add(time.Second)
	}
	x := func(t time.Time) float64 {
		f := float64(t.Sub(t0)) / float64(t1.Sub(t0))
		return plotLeft + math.Max(0, math.Min(1, f))*(plotRight-plotLeft)
	}
	top := 0.0
	for _, s := range c.Series {
		for _, pt := range s.Points {
			top = math.Max(top, pt.V)
		}
	}
	yTop, yStep := niceCeiling(top, maxYTicks-1)
	y := func(v float64) float64 { return plotBottom - v/yTop*(plotBottom-plotTop) }
	for v := 0.0; v <= yTop+yStep/2; v += yStep {
		p.YTicks = append(p.YTicks, tick{At: y(v), Label: strconv.FormatFloat(v, 'g', 3, 64)})
	}
	p.XTicks, p.XLabel = timeTicks(span.SwapAt, t0, t1, x)
	bandOf := func(window string, from, to time.Time) band {
		return band{Window: window, Label: window, X: x(from), Width: x(to) - x(from)}
	}
	p.Bands = []band{bandOf(windowBaseline, span.BaselineFrom, span.SwapAt), bandOf("swap", span.SwapAt, span.SoakFrom), bandOf(windowSoak, span.SoakFrom, span.SoakTo)}
	p.Swap = marker{X: x(span.SwapAt), At: span.SwapAt.UTC().Format(time.RFC3339)}

	legendX := plotLeft
	var labelled []int // the index in p.Lines of each series' last line
	var desc []string
	for _, s := range c.Series {
		st := seriesStyle[s.Kind]
		p.Legend = append(p.Legend, legendItem{Kind: s.Kind, Label: s.Label, Dash: st.dash, Marker: st.marker(legendX+12, legendY), X0: legendX, X1: legendX + 24, TextX: legendX + 30})
		legendX += 44 + 7*float64(len([]rune(s.Label)))
		last := -1
		for _, w := range []string{windowBaseline, windowSoak} {
			l := lineView{Kind: s.Kind, Window: w, Label: s.Label, Dash: st.dash}
			var pts, marks []string
			for _, pt := range s.Points {
				if pt.Window != w {
					continue
				}
				px, py := x(pt.T), y(pt.V)
				pts = append(pts, num(px)+","+num(py))
				marks = append(marks, st.marker(px, py))
				l.LabelY = py
			}
			if len(pts) == 0 {
				continue
			}
			l.Points, l.Markers, l.N = strings.Join(pts, " "), strings.Join(marks, ""), len(pts)
			p.Lines = append(p.Lines, l)
			last = len(p.Lines) - 1
		}
		if last >= 0 {
			labelled = append(labelled, last)
		}
		desc = append(desc, describe(s, c.Unit))
	}
	labels := make([]*lineView, 0, len(labelled))
	for _, i := range labelled {
		p.Lines[i].HasLabel = true
		labels = append(labels, &p.Lines[i])
	}
	spreadLabels(labels)
	slices.Reverse(p.Lines) // the first series (the judged node) drawn last, on top
	if len(p.Lines) == 0 {
		p.Empty = noSamplesInTheWindowsText
	}
	p.Desc = c.Title + " (" + c.Unit + "), baseline → soak: " + strings.Join(desc, "; ") + "."
	return p
}

// describe is a series' mean over the baseline and over the soak, in words.
func describe(s seriesData, unit string) string {
	mean := func(w string) string {
		sum, n := 0.0, 0
		for _, pt := range s.Points {
			if pt.Window == w {
				sum, n = sum+pt.V, n+1
			}
		}
		if n == 0 {
			return "no samples"
		}
		return strconv.FormatFloat(sum/float64(n), 'g', 3, 64) + " " + unit
	}
	return fmt.Sprintf("%s %s → %s", s.Label, mean(windowBaseline), mean(windowSoak))
}

// spreadLabels moves the direct labels apart, top to bottom, so that no
// two are closer than labelGap, keeping them inside the plot's height.
func spreadLabels(ls []*lineView) {
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].LabelY < ls[j].LabelY })
	for i := range ls {
		if i > 0 && ls[i].LabelY < ls[i-1].LabelY+labelGap {
			ls[i].LabelY = ls[i-1].LabelY + labelGap
		}
	}
	// Pushed below the plot: shift the run back up.
	for i := len(ls) - 1; i >= 0; i-- {
		limit := plotBottom + 4 - labelGap*float64(len(ls)-1-i)
		if ls[i].LabelY > limit {
			ls[i].LabelY = limit
		}
	}
}

// niceCeiling is the round number at or above max (1, 2 or 5 times a power
// of ten, as a step, times at most n steps) and that step; 1 and its step
// for a max of zero or less.
func niceCeiling(max float64, n int) (float64, float64) {
	if max <= 0 || math.IsNaN(max) || math.IsInf(max, 0) {
		return 1, 1 / float64(n)
	}
	step := niceStep(max / float64(n))
	return math.Ceil(max/step-1e-9) * step, step
}

// niceStep is the least of 1, 2 and 5 times a power of ten at or above raw.
func niceStep(raw float64) float64 {
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5} {
		if raw <= m*mag*(1+1e-9) {
			return m * mag
		}
	}
	return 10 * mag
}

// timeTicks are the time axis' ticks from t0 to t1, at round numbers of
// minutes (seconds, for under three minutes) from the swap, the swap's
// labelled 0, and the axis' label saying which unit.
func timeTicks(swap, t0, t1 time.Time, x func(time.Time) float64) ([]tick, string) {
	unit, label := time.Minute, "minutes from the swap"
	if t1.Sub(t0) < 3*time.Minute {
		unit, label = time.Second, "seconds from the swap"
	}
	span := float64(t1.Sub(t0)) / float64(unit)
	step := niceStep(span / maxXTicks)
	first := math.Ceil(float64(t0.Sub(swap))/float64(unit)/step-1e-9) * step
	var out []tick
	for v := first; len(out) <= 2*maxXTicks && swap.Add(time.Duration(v*float64(unit))).Compare(t1) <= 0; v += step {
		text := strconv.FormatFloat(math.Abs(v), 'g', 4, 64)
		switch {
		case v < -step/1e6:
			text = minusSign + text
		case v > step/1e6:
			text = "+" + text
		default:
			text = "0"
		}
		out = append(out, tick{At: x(swap.Add(time.Duration(v * float64(unit)))), Label: text})
	}
	return out, label
}
