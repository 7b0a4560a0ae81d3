package health

import (
	"fmt"
	"math"
	"strings"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// ControlNode is one control node of a judgement: a node not yet swapped and
// not cordoned, whose change over the judged node's two intervals is what the
// judged node's change is compared with. The judge fetches its current
// snapshot itself, as it does the judged node's.
type ControlNode struct {
	Node string
	// Baseline are its snapshots over the judged node's baseline interval,
	// oldest first; the first and the last make the window.
	Baseline []wire.Snapshot
	// SoakStart is its snapshot at the judged node's soak start.
	SoakStart wire.Snapshot
}

// ControlWindow is one control node's two windows.
type ControlWindow struct {
	Node     string
	Baseline Window
	Soak     Window
}

// Control is the control group of one assessment.
type Control struct {
	// Scope says where the control nodes come from, for reasons: "zone a",
	// "the cluster (zone a has none)".
	Scope string
	Nodes []ControlWindow
}

// controlKey groups control pods: one workload and side, or (workload empty)
// every pod of one side, or (side empty too) every pod, for the node's rows.
type controlKey struct {
	namespace, workload string
	side                wire.Side
}

// controlAgg is what the control pods of one key did in the two windows.
type controlAgg struct {
	pods          int
	before, after Counts
	beforeSec     float64
	afterSec      float64
	// Latency: the samples-weighted mean over control pods of log2(median
	// after / before), the medians fitted as lognormal (LogMedian), per
	// metric. Per-pod ratios rather than a pooled histogram, so a shift in
	// the traffic mix between pods is not read as a change in latency.
	latLog, latW map[Metric]float64
}

func (a *controlAgg) latencyRatio(m Metric) (float64, bool) {
	if a == nil || a.latW[m] == 0 {
		return 1, false
	}
	return math.Exp2(a.latLog[m] / a.latW[m]), true
}

// controlGroup is the control pods by key.
type controlGroup struct {
	scope string
	nodes int
	by    map[controlKey]*controlAgg
}

// buildControl pairs each control node's pods present through both windows
// (as the judged node's are) and sums them by workload and side, by side,
// and overall. Probe pods count only under their own workload: they are a
// family of their own.
func buildControl(cfg Config, c *Control) *controlGroup {
	if c == nil || len(c.Nodes) == 0 {
		return nil
	}
	g := &controlGroup{scope: c.Scope, nodes: len(c.Nodes), by: map[controlKey]*controlAgg{}}
	get := func(k controlKey) *controlAgg {
		a := g.by[k]
		if a == nil {
			a = &controlAgg{latLog: map[Metric]float64{}, latW: map[Metric]float64{}}
			g.by[k] = a
		}
		return a
	}
	for _, n := range c.Nodes {
		base := make(map[PodKey]*PodWindow, len(n.Baseline.Pods))
		for i := range n.Baseline.Pods {
			base[n.Baseline.Pods[i].PodKey] = &n.Baseline.Pods[i]
		}
		for i := range n.Soak.Pods {
			s := &n.Soak.Pods[i]
			b, ok := base[s.PodKey]
			if !ok || b.Appeared || s.Appeared || b.UID != s.UID {
				continue
			}
			keys := []controlKey{{s.Namespace, workloadOf(s.Name), s.Side}}
			if !cfg.isProbe(s.PodKey) {
				keys = append(keys, controlKey{side: s.Side}, controlKey{})
			}
			for _, k := range keys {
				a := get(k)
				a.pods++
				a.before, a.after = a.before.add(b.Counts), a.after.add(s.Counts)
				a.beforeSec += n.Baseline.Duration.Seconds()
				a.afterSec += n.Soak.Duration.Seconds()
				for _, m := range LatencyMetrics {
					hb, hs := b.ConnectLatency, s.ConnectLatency
					if m == v1alpha1.MetricSRTT {
						hb, hs = b.SRTT, s.SRTT
					}
					nb, na := hb.Total(), hs.Total()
					if nb < cfg.MinEvents || na < cfg.MinEvents {
						continue
					}
					mb, _ := LogMedian(hb)
					ma, _ := LogMedian(hs)
					w := float64(min(nb, na))
					a.latLog[m] += w * (ma - mb)
					a.latW[m] += w
				}
			}
		}
	}
	return g
}

// forRow picks the control of one row: the same workload on the control
// nodes when it has enough events for the metric (the node's rows: every
// pod). A workload with no pod of its own there is compared with the
// control workload of its side that rose the most (rise tells how much), not
// with the side's pool: a change that hit some workloads and not others (a
// dependency failing) moves the pool by an average, which understates what
// an unseen workload may have shared. Probe rows use only other nodes'
// probes. nil means no control for this row.
func (g *controlGroup) forRow(cfg Config, k PodKey, enough func(*controlAgg) bool, rise func(*controlAgg) float64) *controlAgg {
	if g == nil {
		return nil
	}
	if k.Name == "" {
		if a := g.by[controlKey{}]; a != nil && enough(a) {
			return a
		}
		return nil
	}
	if a := g.by[controlKey{k.Namespace, workloadOf(k.Name), k.Side}]; a != nil && enough(a) {
		return a
	}
	if cfg.isProbe(k) {
		return nil
	}
	var top *controlAgg
	var topKey controlKey
	for key, a := range g.by {
		if key.workload == "" || key.side != k.Side || key.namespace == cfg.ProbeNamespace || !enough(a) {
			continue
		}
		if top == nil {
			top, topKey = a, key
			continue
		}
		if r, t := rise(a), rise(top); r > t || r == t && key.namespace+"/"+key.workload < topKey.namespace+"/"+topKey.workload {
			top, topKey = a, key
		}
	}
	if top != nil {
		return top
	}
	if a := g.by[controlKey{side: k.Side}]; a != nil && enough(a) {
		return a
	}
	return nil
}

// exposures are a control's before and after exposures: connections when
// it has the traffic, else seconds.
func (a *controlAgg) exposures(cfg Config) (before, after float64) {
	if a.before.Traffic() >= cfg.MinEvents && a.after.Traffic() >= cfg.MinEvents {
		return float64(a.before.Traffic()), float64(a.after.Traffic())
	}
	return a.beforeSec, a.afterSec
}

// countRise is a control's after/before ratio of metric m (see exposures).
func countRise(cfg Config, a *controlAgg, m Metric) float64 {
	eb, es := a.exposures(cfg)
	return ratio(float64(countOf(a.after, m))/es, float64(countOf(a.before, m))/eb)
}

// moved says the control group rose in metric m: the row's own control, or
// the control nodes' pods of its side, or all of them, rose at
// controlMovedP by their own before/after test (per connection when they
// have the traffic). A workload's few control pods may hold too few events
// to show a change the whole cluster shows plainly; a change the cluster
// did not show is left to before/after alone. The probe's own control
// counts only at controlMovedProbeP: the control nodes' probes talk to the
// judged node's probe, so they share a little of its regression (1/(N−1)
// of their traffic with N probes), and that share alone must not read as
// the cluster's change.
func (g *controlGroup) moved(cfg Config, disp Dispersion, k PodKey, m Metric, own *controlAgg) bool {
	phi := disp.Of(PodKey{}, m, cfg.CountDispersion)
	rose := func(a *controlAgg, level float64) bool {
		if a == nil {
			return false
		}
		cb, cs := deflate(countOf(a.before, m), phi), deflate(countOf(a.after, m), phi)
		eb, es := a.exposures(cfg)
		return PoissonRateTest(cb, eb, cs, es).P <= level
	}
	level := controlMovedP
	if cfg.isProbe(k) {
		level = controlMovedProbeP
	}
	return rose(own, level) || rose(g.by[controlKey{side: k.Side}], controlMovedP) || rose(g.by[controlKey{}], controlMovedP)
}

func (g *controlGroup) describe() string {
	s := "s"
	if g.nodes == 1 {
		s = ""
	}
	if g.scope == "" {
		return fmt.Sprintf("%d control node%s", g.nodes, s)
	}
	return fmt.Sprintf("%d control node%s in %s", g.nodes, s, g.scope)
}

// workloadOf reads a pod's workload from its generated name, so one
// workload's pods on different nodes can be compared: a Deployment's pods are
// <name>-<template hash>-<5>, a DaemonSet's or Job's <name>-<5>, where the
// suffixes use Kubernetes' safe alphabet (no vowels, no 0, 1 or 3); a
// StatefulSet's are <name>-<ordinal>. Any other name is its own workload.
func workloadOf(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return name
	}
	last := name[i+1:]
	switch {
	case allIn(last, "0123456789"):
		return name[:i]
	case len(last) == 5 && allIn(last, safeAlphabet):
		name = name[:i]
		if j := strings.LastIndexByte(name, '-'); j > 0 {
			if h := name[j+1:]; len(h) >= 6 && len(h) <= 10 && allIn(h, safeAlphabet) {
				return name[:j]
			}
		}
		return name
	}
	return name
}

// safeAlphabet is the alphabet of generated name suffixes and pod-template
// hashes (k8s.io/apimachinery/pkg/util/rand).
const safeAlphabet = "bcdfghjklmnpqrstvwxz2456789"

func allIn(s, set string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !strings.ContainsRune(set, r) {
			return false
		}
	}
	return true
}
