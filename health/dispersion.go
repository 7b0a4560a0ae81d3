package health

import (
	"fmt"

	"github.com/nodewise/nodewise/health/wire"
)

// Dispersion is how much more variable than Poisson each count is, per pod
// and metric, as measured in the baseline (quasi-Poisson φ ≥ 1). Resets arrive
// in clumps (a peer tearing down a pool resets many connections at once), so a
// pure Poisson test would call ordinary clumps regressions; dividing the
// counts by φ before the test accounts for that.
type Dispersion struct {
	Pod  map[PodKey]map[Metric]float64 `json:"pod,omitempty"`
	Node map[Metric]float64            `json:"node,omitempty"`
}

// Of returns φ for one pod's metric (the zero PodKey is the node). A pod with
// too few baseline events to measure its own gets the node's pooled φ, and a
// node without any gets prior.
func (d Dispersion) Of(k PodKey, m Metric, prior float64) float64 {
	if v, ok := d.Pod[k][m]; ok && k.Name != "" {
		return v
	}
	if v, ok := d.Node[m]; ok {
		return v
	}
	return prior
}

// shrinkDF is the weight, in degrees of freedom, of the node-wide pooled φ in
// each pod's estimate: a pod's own φ from ten one-minute sub-windows is noisy.
const shrinkDF = 10

// EstimateDispersion measures φ from a series of baseline snapshots (taken at
// regular intervals before the node is cordoned). For each pod and count metric
// it compares the counts in consecutive sub-windows with what the pod's
// traffic in each predicts (Pearson X² over k−1 degrees of freedom), shrinks
// each pod's estimate towards the node-wide pooled value, and never returns
// less than prior (or 1). Fewer than three snapshots measure nothing: every
// φ is then prior.
func EstimateDispersion(series []wire.Snapshot, prior float64) (Dispersion, error) {
	prior = max(prior, 1)
	d := Dispersion{Pod: map[PodKey]map[Metric]float64{}, Node: map[Metric]float64{}}
	if len(series) < 3 {
		return d, nil
	}
	type acc struct {
		counts, traffic []float64
	}
	subs := map[PodKey]map[Metric]*acc{}
	for i := 1; i < len(series); i++ {
		w, err := NewWindow(series[i-1], series[i])
		if err != nil {
			return Dispersion{}, fmt.Errorf("baseline sub-window %d: %w", i, err)
		}
		for _, p := range w.Pods {
			if p.Appeared {
				continue
			}
			if subs[p.PodKey] == nil {
				subs[p.PodKey] = map[Metric]*acc{}
			}
			for _, m := range CountMetrics {
				a := subs[p.PodKey][m]
				if a == nil {
					a = &acc{}
					subs[p.PodKey][m] = a
				}
				a.counts = append(a.counts, float64(countOf(p.Counts, m)))
				exp := float64(p.Counts.Traffic())
				if exp == 0 {
					exp = w.Duration.Seconds()
				}
				a.traffic = append(a.traffic, exp)
			}
		}
	}
	type est struct{ x2, df float64 }
	pods := map[PodKey]map[Metric]est{}
	pooled := map[Metric]est{}
	for k, ms := range subs {
		for m, a := range ms {
			var c, t float64
			for i := range a.counts {
				c += a.counts[i]
				t += a.traffic[i]
			}
			if c < 10 || t == 0 || len(a.counts) < 2 {
				continue // too few events to say anything about their spread
			}
			var x2 float64
			for i := range a.counts {
				e := c * a.traffic[i] / t
				if e > 0 {
					x2 += (a.counts[i] - e) * (a.counts[i] - e) / e
				}
			}
			e := est{x2, float64(len(a.counts) - 1)}
			if pods[k] == nil {
				pods[k] = map[Metric]est{}
			}
			pods[k][m] = e
			p := pooled[m]
			pooled[m] = est{p.x2 + e.x2, p.df + e.df}
		}
	}
	for m, p := range pooled {
		d.Node[m] = max(prior, p.x2/p.df)
	}
	for k, ms := range pods {
		d.Pod[k] = map[Metric]float64{}
		for m, e := range ms {
			node := d.Node[m]
			d.Pod[k][m] = max(prior, (e.x2+shrinkDF*node)/(e.df+shrinkDF))
		}
	}
	return d, nil
}
