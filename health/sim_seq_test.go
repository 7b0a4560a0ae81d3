package health

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// The sequential method beside the fixed one on the cluster simulation's
// draws (sim_cluster_test.go): each trial's soak is drawn in LookEvery
// steps, and the same draw is judged both ways. Fixed: the judgement at the
// soak's end at the whole significance, and the next interval's too
// (consecutiveFailures 2). Sequential: a look every LookEvery at its share
// of the significance, the first failing one failing the node; else the
// fixed method's two judgements at the rest of the significance.

// simSeqTrials is the nodes per case: every look of a healthy node's soak
// is a judgement with its control group, about 0.7 s of CPU a node.
var simSeqTrials = 150

// seqRates are one case's figures under both methods.
type seqRates struct {
	trials                 int
	fixedFails, seqFails   int
	fixedCaught, seqCaught int
	early                  int   // nodes the sequential method failed during the soak
	fixedTimes, seqTimes   []int // seconds from the soak's start to each failing decision
	earlyExamples          []string
}

// runSequential judges trials drawn clusters of case c both ways.
func runSequential(seed uint64, trials int, t clusterTiming, c clusterCase) seqRates {
	cfg, err := NewConfig(Config{})
	if err != nil {
		panic(err)
	}
	soak := time.Duration(t.soak) * time.Second
	end := cfg
	end.Sequential = true
	end.Significance = end.endSignificance()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r2 := rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
	var out seqRates
	for range trials {
		d := drawCluster(r, cfg, t, c, int(LookEvery/time.Second))
		caught := func(a Assessment) bool { return d.target == "" || caughtIn(a, d.target) }
		out.trials++
		early, seqCaught := 0, false
		for k := 1; k <= Looks(soak) && k < len(d.nodes[0].soak); k++ {
			look := cfg
			look.Significance = LookSignificance(cfg.Significance, soak, time.Duration(k)*LookEvery)
			if a := d.assess(look, step(k-1), false); a.Outcome == Fail {
				early, seqCaught = k, caught(a)
				if c.regress == "" {
					out.earlyExamples = append(out.earlyExamples, a.Reasons[0])
				}
				break
			}
		}
		last := step(len(d.nodes[0].soak) - 1)
		fixed, seqEnd := d.assess(cfg, last, false), d.assess(end, last, false)
		decided := t.soak + t.interval // the second judgement, an interval after the soak's end
		var next func(soaking) wire.Snapshot
		if fixed.Outcome == Fail || early == 0 && seqEnd.Outcome == Fail {
			next = d.later(r2, t)
		}
		if fixed.Outcome == Fail {
			if a := d.assess(cfg, next, false); a.Outcome == Fail {
				out.fixedFails++
				out.fixedTimes = append(out.fixedTimes, decided)
				if caught(a) {
					out.fixedCaught++
				}
			}
		}
		switch {
		case early > 0:
			out.early++
			out.seqFails++
			out.seqTimes = append(out.seqTimes, early*int(LookEvery/time.Second))
		case seqEnd.Outcome == Fail:
			if a := d.assess(end, next, false); a.Outcome == Fail {
				out.seqFails++
				out.seqTimes = append(out.seqTimes, decided)
				seqCaught = caught(a)
			}
		}
		if seqCaught {
			out.seqCaught++
		}
	}
	return out
}

// median of seconds, "-" for none.
func medianSeconds(s []int) string {
	if len(s) == 0 {
		return "-"
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return (time.Duration(s[len(s)/2]) * time.Second).String()
}

// BenchmarkSimSequential prints, for healthy clusters (false Fails) and
// regressions (caught, and when), the fixed and the sequential method side
// by side on the same draws at the defaults (5m/5m, a look every 5 s), and
// one `falsefail method=… rate=…` line a method over every healthy node,
// and a NOT MET line when the sequential method fails more healthy nodes
// than the fixed one. A report of about ten minutes of CPU (make bench-harm).
func BenchmarkSimSequential(b *testing.B) {
	for range b.N {
		healthy := []clusterCase{{shift: shiftNone}, {shift: shiftNone, drained: true}, {shift: shiftLoad3x}, {shift: shiftDependency}}
		regressions := []clusterCase{{shift: shiftNone, regress: "rst"}, {shift: shiftNone, regress: "probe"}, {shift: shiftNone, regress: "pod"}}
		trials := simSeqTrials
		b.Logf("%-55s %7s %12s %12s %14s %14s %9s", "case", "trials", "fail fixed", "fail seq", "median fixed", "median seq", "seq early")
		var nodes, fixed, seq int
		for i, c := range append(healthy, regressions...) {
			s := runSequential(uint64(300+i), trials, defaultTiming, c)
			fail, failSeq := s.fixedFails, s.seqFails
			if c.regress != "" {
				fail, failSeq = s.fixedCaught, s.seqCaught
			} else {
				nodes, fixed, seq = nodes+s.trials, fixed+s.fixedFails, seq+s.seqFails
			}
			pct := func(n int) float64 { return 100 * float64(n) / float64(s.trials) }
			b.Logf("%-55s %7d %11.1f%% %11.1f%% %14s %14s %9d", c, s.trials, pct(fail), pct(failSeq), medianSeconds(s.fixedTimes), medianSeconds(s.seqTimes), s.early)
			if len(s.earlyExamples) > 0 {
				b.Logf("    failed early e.g. %q", s.earlyExamples)
			}
		}
		fmt.Printf("falsefail method=fixed rate=%.2f%% nodes=%d\n", 100*float64(fixed)/float64(nodes), nodes)
		fmt.Printf("falsefail method=sequential rate=%.2f%% nodes=%d\n", 100*float64(seq)/float64(nodes), nodes)
		if seq > fixed {
			// Why the fixed method is the default (docs/health.md).
			fmt.Printf("NOT MET: the sequential method failed %d healthy nodes of %d, the fixed one %d\n", seq, nodes, fixed)
		}
	}
}
