package dashboard

import (
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// The series a node's plots draw (data-series), and the windows their
// points fall in (data-window): the ones the judge compared.
const (
	seriesNode     = "node"
	seriesControl  = "control"
	seriesProbe    = "probe"
	windowBaseline = "baseline"
	windowSoak     = "soak"
)

// judgedSpan is a judgement's windows on one clock: the baseline from
// BaselineFrom to SwapAt, the swap to SoakFrom, the soak to SoakTo.
type judgedSpan struct {
	BaselineFrom, SwapAt, SoakFrom, SoakTo time.Time
}

// window names the judged window [from, to] lies in: baseline or soak, ""
// for one that reaches into the swap (it mixes the old ztunnel with the
// new) or lies outside both. An interval that starts before the baseline
// or ends after the soak counts by its middle.
func (w judgedSpan) window(from, to time.Time) string {
	mid := from.Add(to.Sub(from) / 2)
	switch {
	case !to.After(w.SwapAt) && !mid.Before(w.BaselineFrom):
		return windowBaseline
	case !from.Before(w.SoakFrom) && !mid.After(w.SoakTo):
		return windowSoak
	}
	return ""
}

// agentHistory is one node's snapshots, placed on the dashboard's clock.
type agentHistory struct {
	Node  string
	Snaps []wire.Snapshot
	// Shift is the dashboard's clock less the agent's, measured on the answer.
	Shift time.Duration
	// Every and Keep are how often the agent keeps a snapshot, and for how long.
	Every, Keep time.Duration
}

// tally is what the plots read of one group of pods over some time: the
// seconds counted (summed over the nodes pooled), the pods, and their counts.
type tally struct {
	seconds        float64
	pods           int
	resets, failed uint64
	connectLatency []uint64 // Log2Histogram buckets, summed
	latencySamples uint64
}

func (t *tally) add(o tally) {
	t.seconds += o.seconds
	t.pods += o.pods
	t.resets += o.resets
	t.failed += o.failed
	t.latencySamples += o.latencySamples
	if len(t.connectLatency) < len(o.connectLatency) {
		t.connectLatency = append(t.connectLatency, make([]uint64, len(o.connectLatency)-len(t.connectLatency))...)
	}
	for i, v := range o.connectLatency {
		t.connectLatency[i] += v
	}
}

// interval is what one agent counted between two of its snapshots, for the
// workload's pods and for the probe's apart (as the judge keeps them).
type interval struct {
	From, To        time.Time
	workload, probe tally
}

// intervals subtracts each snapshot of h from the next. A pod counts when
// both snapshots hold it (by UID and side) and none of its counters went
// back; a pod that appeared or left between them counts in neither.
func intervals(h agentHistory, probeNamespace string) []interval {
	var out []interval
	for i := 1; i < len(h.Snaps); i++ {
		a, b := h.Snaps[i-1], h.Snaps[i]
		if !a.StartTime.Equal(b.StartTime) || !b.Time.After(a.Time) {
			continue // the agent restarted, or the same snapshot again
		}
		iv := interval{From: a.Time.Add(h.Shift), To: b.Time.Add(h.Shift)}
		secs := b.Time.Sub(a.Time).Seconds()
		iv.workload.seconds, iv.probe.seconds = secs, secs
		before := make(map[podSide]wire.PodCounters, len(a.Pods))
		for _, p := range a.Pods {
			before[podSide{p.UID, p.Side}] = p
		}
		for _, p := range b.Pods {
			q, ok := before[podSide{p.UID, p.Side}]
			if !ok {
				continue
			}
			d, ok := podDelta(q, p)
			if !ok {
				continue
			}
			if p.Namespace == probeNamespace {
				iv.probe.add(d)
			} else {
				iv.workload.add(d)
			}
		}
		out = append(out, iv)
	}
	return out
}

type podSide struct {
	uid  string
	side wire.Side
}

// podDelta is what a pod counted from a to b; false when a counter went
// back (its counters were reset: not an interval to read).
func podDelta(a, b wire.PodCounters) (tally, bool) {
	d := tally{pods: 1}
	sub := func(x, y uint64) (uint64, bool) { return y - x, y >= x }
	var ok [4]bool
	var sent, received uint64
	sent, ok[0] = sub(a.ResetsSent, b.ResetsSent)
	received, ok[1] = sub(a.ResetsReceived, b.ResetsReceived)
	d.resets = sent + received
	d.failed, ok[2] = sub(failures(a), failures(b))
	d.latencySamples, ok[3] = sub(a.ConnectLatency.Total(), b.ConnectLatency.Total())
	for _, o := range ok {
		if !o {
			return tally{}, false
		}
	}
	d.connectLatency = make([]uint64, len(b.ConnectLatency.Buckets))
	for i, v := range b.ConnectLatency.Buckets {
		var w uint64
		if i < len(a.ConnectLatency.Buckets) {
			w = a.ConnectLatency.Buckets[i]
		}
		if v < w {
			return tally{}, false
		}
		d.connectLatency[i] = v - w
	}
	return d, true
}

func failures(p wire.PodCounters) uint64 {
	var n uint64
	for _, v := range p.ConnectFailures {
		n += v
	}
	return n
}

// chartData is one plot before it is laid out: its series of points.
type chartData struct {
	ID, Title, Unit string
	Series          []seriesData
}

// seriesData is one line of a plot: a kind (seriesNode, …), its label and
// its points in time order, each in a judged window.
type seriesData struct {
	Kind, Label string
	Points      []point
}

type point struct {
	T      time.Time
	V      float64
	Window string
}

// The judged families the node page plots, each with what it reads of a
// tally (false: nothing to read in that interval).
var families = []struct {
	id, title, unit string
	value           func(tally) (float64, bool)
}{
	{"resets", "Connection resets, sent and received", "resets/s", func(t tally) (float64, bool) {
		return float64(t.resets) / t.seconds, t.pods > 0 && t.seconds > 0
	}},
	{"failed-connects", "Failed connects", "failed connects/s", func(t tally) (float64, bool) {
		return float64(t.failed) / t.seconds, t.pods > 0 && t.seconds > 0
	}},
	{"connect-latency", "Connect latency, p99", "ms", func(t tally) (float64, bool) {
		return wire.Log2Histogram{Buckets: t.connectLatency}.Quantile(0.99) / 1000, t.latencySamples > 0
	}},
}

// buildCharts reads the judged node's history and its control nodes' over
// the judged windows into one chart per family: the node's workload pods,
// the control nodes' pooled (their counts over their time, so a mean per
// node, and one latency histogram), and the probe's pods on the node. The
// points are the judged node's own intervals that lie in a window; a
// control node's interval counts in the one holding its middle.
func buildCharts(span judgedSpan, node agentHistory, controls []agentHistory, probeNamespace string) []chartData {
	type bin struct {
		iv      interval
		window  string
		control tally
	}
	var bins []bin
	for _, iv := range intervals(node, probeNamespace) {
		if w := span.window(iv.From, iv.To); w != "" {
			bins = append(bins, bin{iv: iv, window: w})
		}
	}
	for _, c := range controls {
		for _, iv := range intervals(c, probeNamespace) {
			mid := iv.From.Add(iv.To.Sub(iv.From) / 2)
			for i := range bins {
				if !mid.Before(bins[i].iv.From) && mid.Before(bins[i].iv.To) {
					bins[i].control.add(iv.workload)
					break
				}
			}
		}
	}
	controlLabel := "controls"
	if len(controls) == 1 {
		controlLabel = "control " + controls[0].Node
	}
	var out []chartData
	for _, f := range families {
		c := chartData{ID: f.id, Title: f.title, Unit: f.unit}
		nodeS := seriesData{Kind: seriesNode, Label: node.Node}
		ctrlS := seriesData{Kind: seriesControl, Label: controlLabel}
		probeS := seriesData{Kind: seriesProbe, Label: "probe"}
		for _, b := range bins {
			at := b.iv.From.Add(b.iv.To.Sub(b.iv.From) / 2)
			if v, ok := f.value(b.iv.workload); ok {
				nodeS.Points = append(nodeS.Points, point{at, v, b.window})
			}
			if v, ok := f.value(b.control); ok {
				ctrlS.Points = append(ctrlS.Points, point{at, v, b.window})
			}
			if v, ok := f.value(b.iv.probe); ok {
				probeS.Points = append(probeS.Points, point{at, v, b.window})
			}
		}
		c.Series = append(c.Series, nodeS)
		if len(controls) > 0 {
			c.Series = append(c.Series, ctrlS)
		}
		c.Series = append(c.Series, probeS)
		out = append(out, c)
	}
	return out
}
