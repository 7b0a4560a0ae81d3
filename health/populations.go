package health

import (
	"fmt"
	"math"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// Population is what a group of pods did in one interval, summed: the
// migrated pods of a sidecar wave, the pods not yet migrated over the same
// interval, or one workload before its wave.
type Population struct {
	Pods           int                `json:"pods"`
	Counts         Counts             `json:"counts"`
	ConnectLatency wire.Log2Histogram `json:"connectLatency"`
}

// Add sums one pod's window into the population.
func (p *Population) Add(w PodWindow) {
	p.Pods++
	p.Counts = p.Counts.add(w.Counts)
	if p.ConnectLatency.Buckets == nil {
		p.ConnectLatency = newHist()
	}
	addHist(&p.ConnectLatency, w.ConnectLatency)
}

// PopulationMetrics are the metrics ComparePopulations tests: what a broken
// proxy shows from outside (resets, failed connects, connect latency).
var PopulationMetrics = []Metric{v1alpha1.MetricResetsReceived, v1alpha1.MetricResetsSent, v1alpha1.MetricConnectFailures, v1alpha1.MetricConnectLatency}

// MinExcessPerConnection is the least rise of a count per connection that
// counts as a regression between populations (on top of the ratio floor).
const MinExcessPerConnection = 0.005

// PopulationTest is one row comparing a population with its reference.
type PopulationTest struct {
	Metric Metric `json:"metric"`
	// Ref and Got are events per connection (counts) or p99 in µs (latency).
	Ref  float64 `json:"ref"`
	Got  float64 `json:"got"`
	NRef uint64  `json:"nRef"`
	NGot uint64  `json:"nGot"`
	// Tested is false when either side had too few events or connections.
	Tested bool `json:"tested"`
	// P is one-sided (got worse than ref); PAdj is set by the caller's Holm.
	P            float64 `json:"p"`
	PAdj         float64 `json:"pAdj"`
	ClearsFloors bool    `json:"clearsFloors"`
	Note         string  `json:"note,omitempty"`
}

// Scale is how much the reference is expected to have moved on its own: a
// baseline before an interval is scaled by the change the control group
// showed over the same two intervals, so that a change everyone shows is not
// counted against one population. Use Scale{1, 1} for two populations
// observed over the same interval.
type Scale struct {
	// Count multiplies the reference's events per connection.
	Count float64
	// Latency multiplies the ratio floor of latency (the control's own
	// geometric-mean ratio, when it rose).
	Latency float64
}

// ComparePopulations tests, metric by metric, whether got is worse than ref
// with the judge's statistics: counts per connection with the conditional
// binomial test of Poisson rates (ref's exposure scaled by s.Count), latency
// with the one-sided Mann-Whitney U and the tail test, Bonferroni-combined.
// A row regresses when its Holm-adjusted p-value (the caller's, across every
// row of the judgement) is at most cfg.Significance and it clears the
// floors: cfg's ratio floors (latency's times s.Latency) and
// MinExcessPerConnection or the latency's MinIncrease. It is pure.
func ComparePopulations(cfg Config, ref, got Population, s Scale) []PopulationTest {
	if s.Count <= 0 {
		s.Count = 1
	}
	if s.Latency < 1 {
		s.Latency = 1
	}
	var out []PopulationTest
	tr, tg := ref.Counts.Traffic(), got.Counts.Traffic()
	for _, m := range PopulationMetrics {
		if m.IsLatency() {
			th := cfg.Latency[m]
			if th.Disabled {
				continue
			}
			hr, hg := ref.ConnectLatency, got.ConnectLatency
			if hr.Buckets == nil {
				hr = newHist()
			}
			if hg.Buckets == nil {
				hg = newHist()
			}
			r := PopulationTest{Metric: m, NRef: hr.Total(), NGot: hg.Total(), Ref: hr.Quantile(0.99), Got: hg.Quantile(0.99), P: 1, PAdj: 1}
			if r.NRef < cfg.MinEvents || r.NGot < cfg.MinEvents {
				r.Note = fmt.Sprintf("too few connects (%d, %d; need %d each)", r.NRef, r.NGot, cfg.MinEvents)
				out = append(out, r)
				continue
			}
			r.Tested = true
			r.P = math.Min(1, 2*math.Min(MannWhitney(hr, hg).P, TailTest(hr, hg, 0.01).P))
			minRatio := th.MinRatio * s.Latency
			ratio := func(b, a float64) bool { return b > 0 && a/b >= minRatio }
			inc := float64(th.MinIncrease.Microseconds())
			br50, bg50 := hr.Quantile(0.5), hg.Quantile(0.5)
			r.ClearsFloors = (ratio(GeoMean(hr), GeoMean(hg)) || ratio(br50, bg50) || ratio(r.Ref, r.Got)) &&
				(bg50-br50 >= inc || r.Got-r.Ref >= inc)
			out = append(out, r)
			continue
		}
		th := cfg.Counts[m]
		if th.Disabled {
			continue
		}
		kr, kg := countOf(ref.Counts, m), countOf(got.Counts, m)
		r := PopulationTest{Metric: m, NRef: kr, NGot: kg, P: 1, PAdj: 1}
		if tr > 0 {
			r.Ref = float64(kr) / float64(tr) * s.Count
		}
		if tg > 0 {
			r.Got = float64(kg) / float64(tg)
		}
		switch {
		case tr < cfg.MinEvents || tg < cfg.MinEvents:
			r.Note = fmt.Sprintf("too few connections (%d, %d; need %d each)", tr, tg, cfg.MinEvents)
		case kr+kg < cfg.MinEvents:
			r.Note = fmt.Sprintf("too few events to test (%d; need %d)", kr+kg, cfg.MinEvents)
		default:
			r.Tested = true
			phi := math.Max(1, cfg.CountDispersion)
			r.P = PoissonRateTest(deflate(kr, phi), float64(tr)*s.Count, deflate(kg, phi), float64(tg)).P
			ratio := math.Inf(1)
			if r.Ref > 0 {
				ratio = r.Got / r.Ref
			}
			r.ClearsFloors = ratio >= th.MinRatio && r.Got-r.Ref >= MinExcessPerConnection
		}
		out = append(out, r)
	}
	return out
}

// ControlScale is the change a control group showed from one interval to
// the next: its events per connection after over before (1 when it cannot
// be measured), and its connect latency's geometric-mean ratio.
func ControlScale(before, after Population) Scale {
	s := Scale{Count: 1, Latency: 1}
	tb, ta := before.Counts.Traffic(), after.Counts.Traffic()
	eb := before.Counts.ResetsReceived + before.Counts.ResetsSent + before.Counts.ConnectFailures
	ea := after.Counts.ResetsReceived + after.Counts.ResetsSent + after.Counts.ConnectFailures
	if tb > 0 && ta > 0 && eb > 0 && ea > 0 {
		s.Count = (float64(ea) / float64(ta)) / (float64(eb) / float64(tb))
	}
	if before.ConnectLatency.Total() > 0 && after.ConnectLatency.Total() > 0 {
		if gb, ga := GeoMean(before.ConnectLatency), GeoMean(after.ConnectLatency); gb > 0 && ga > gb {
			s.Latency = ga / gb
		}
	}
	return s
}
