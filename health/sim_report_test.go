package health

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Figures beyond the acceptance thresholds: power by traffic, tail-only
// regressions, the rollout-level false-Fail rate, and benchmarks that print
// the simulation's rates. The traffic model and the acceptance tests are in
// sim_test.go.

// BenchmarkSimResetPowerByRate prints how often a 3× rise in resets received
// is caught, by the pod's baseline reset rate (300 trials a band). It fails
// only if power falls as the rate rises (more events, more evidence); the
// acceptance threshold is in TestSimResetRegressionCaught. A report of about
// four minutes of CPU, so a benchmark (make bench), not a test of make test.
func BenchmarkSimResetPowerByRate(b *testing.B) {
	for range b.N {
		var last float64
		for i, band := range [][2]float64{{0.02, 0.05}, {0.05, 0.1}, {0.1, 0.2}, {0.2, 0.5}, {0.5, 5}} {
			s := runSim(uint64(10+i), 300, injectResetsBand(band[0], band[1]))
			b.Logf("3x resets received, baseline %.2f–%.2f/s: caught %.1f%% of %d", band[0], band[1], 100*s.caughtRate(), s.trials)
			if s.caughtRate()+0.05 < last {
				b.Errorf("power fell from %.1f%% to %.1f%% as the rate rose", 100*last, 100*s.caughtRate())
			}
			last = s.caughtRate()
		}
	}
}

// BenchmarkSimRates prints the acceptance rates as benchmark metrics
// (go test -bench SimRates -benchtime 1x ./health/): false-Fail, and the
// share of 3× reset and +50% latency regressions caught, over 1,000 pairs each.
func BenchmarkSimRates(b *testing.B) {
	for range b.N {
		healthy := runSim(1, 1000, nil)
		resets := runSim(2, 1000, injectResets)
		latency := runSim(3, 1000, injectLatency)
		b.ReportMetric(100*healthy.rate(), "false-fail-%")
		b.ReportMetric(100*resets.caughtRate(), "resets-3x-caught-%")
		b.ReportMetric(100*latency.caughtRate(), "latency+50%-caught-%")
	}
}

// BenchmarkAssess measures one judgement of a 30-pod node (windows, dispersion
// from ten baseline snapshots, ~170 tests, Holm).
func BenchmarkAssess(b *testing.B) {
	cfg, _ := NewConfig(Config{})
	r := rand.New(rand.NewPCG(4, 4))
	series, base, soak := simWindows(r, newSimNode(r), nil)
	b.ResetTimer()
	for range b.N {
		disp, _ := EstimateDispersion(series, cfg.CountDispersion)
		_ = Assess(cfg, base, soak, disp, nil, nil)
	}
}

// TestSimTailLatencyPower reports how often a tail-only regression is caught:
// 7% of one pod's connects become 3× slower, which raises its p99 by about 50%
// and its median by about 4%. Mann-Whitney is a test of location, so the tail
// test (TailTest) carries this case. The figure is printed for docs/health.md;
// the test asserts that such a pod is flagged far more often than a healthy
// node fails.
func TestSimTailLatencyPower(t *testing.T) {
	var last float64
	for i, band := range [][2]float64{{0.5, 2}, {2, 10}, {10, 1000}} {
		s := runSim(uint64(20+i), 200, func(r *rand.Rand, pods []simPod) *simChange {
			for {
				p := &pods[0]
				p.connRate = math.Min(300, math.Max(0.2, lognormal(r, 10, 1.0)))
				if c := p.connRate * p.outFrac; c >= band[0] && c < band[1] {
					return &simChange{pod: 0, resetScale: 1, latScale: 1, slowShare: 0.07, slowFactor: 3}
				}
			}
		})
		t.Logf("slow tail (7%% of connects 3× slower: p99 about +50%%, median about +4%%), pod opening %g–%g connects/s: caught %.1f%% of %d",
			band[0], band[1], 100*s.caughtRate(), s.trials)
		if s.caughtRate()+0.05 < last {
			t.Errorf("power fell from %.1f%% to %.1f%% as traffic rose", 100*last, 100*s.caughtRate())
		}
		last = s.caughtRate()
	}
	if last < 0.9 {
		t.Errorf("a tail regression in a busy pod is caught in only %.1f%% of trials", 100*last)
	}
}

// TestSimHealthyConsecutive measures the rollout-level false-Fail rate with the
// default consecutiveFailures (2): a healthy node fails only if the interval
// after a failing one (the soak window one interval longer) fails too.
func TestSimHealthyConsecutive(t *testing.T) {
	cfg, _ := NewConfig(Config{})
	r := rand.New(rand.NewPCG(1, 1^0x9e3779b97f4a7c15))
	first, both := 0, 0
	const trials = 1000
	for range trials {
		pods := newSimNode(r)
		series, s2, s3 := simSnapshots(r, pods, nil)
		disp, _ := EstimateDispersion(series, cfg.CountDispersion)
		base, _ := NewWindow(series[0], series[len(series)-1])
		soak, _ := NewWindow(s2, s3)
		if Assess(cfg, base, soak, disp, nil, nil).Outcome != Fail {
			continue
		}
		first++
		soak2, _ := NewWindow(s2, simMore(r, pods, nil, s3, 60))
		if Assess(cfg, base, soak2, disp, nil, nil).Outcome == Fail {
			both++
		}
	}
	t.Logf("healthy: %d of %d nodes fail one interval (%.1f%%), %d fail two in a row (%.1f%%): the rollout-level false-Fail rate",
		first, trials, 100*float64(first)/trials, both, 100*float64(both)/trials)
	if both > first || float64(both)/trials > 0.01 {
		t.Errorf("two in a row: %d of %d", both, trials)
	}
}
