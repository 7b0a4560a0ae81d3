package demo

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// BenchmarkHarmBeforeHalt rolls the faulty -rst ztunnel build (it resets a
// quarter of connections) onto the busiest node of a live 3-node cluster,
// swapped in place, with the default soak and gates.interval, once judged
// by each method: fixed (first decided at the soak's end, two failing
// intervals in a row) and sequential (looks every 5 s). Each method gets a
// fresh cluster. It prints one `harm method=… resets_before_halt=…
// seconds_to_halt=…` line a method: the resets every app received from
// the swap (the node's cordon) to the rollout's halt, as the apps saw them,
// and the seconds between them.
func BenchmarkHarmBeforeHalt(b *testing.B) {
	testkit.RequireNetns(b)
	type result struct {
		method  v1alpha1.DecisionMethod
		resets  int64
		seconds float64
		verdict string
	}
	var results []result
	for i := 0; i < b.N; i++ {
		for _, method := range []v1alpha1.DecisionMethod{v1alpha1.MethodFixed, v1alpha1.MethodSequential} {
			b.Run(string(method), func(b *testing.B) {
				e := newLiveEnv(b, 3)
				node := e.faultyBuild(cluster.ZtunnelName, "1.27.4-rst") // the -rst build on the live tests' 1.27 control plane
				nr := faultyRollout("harm-"+strings.ToLower(string(method)), node, true)
				nr.Spec.Baseline = &v1alpha1.Duration{Duration: 30 * time.Second}
				nr.Spec.Soak, nr.Spec.Gates.Interval = nil, nil // the defaults: 5m, 1m
				nr.Spec.Gates.Method = method
				resets := e.resetTimeline(500 * time.Millisecond)
				got := e.run(nr, node)
				halted := time.Now()
				tl := resets.stop()
				ns := nodeStatus(b, got, node)
				if got.Status.Phase != v1alpha1.PhaseHalted || ns.Judgement == nil {
					b.Fatalf("%s: rollout %s, node %s (%q): want Halted at %s by the judge", method, got.Status.Phase, ns.State, ns.Verdict, node)
				}
				swap, err := time.Parse(time.RFC3339, ns.Judgement.SwapAt)
				if err != nil {
					b.Fatalf("%s: the judgement's swapAt %q: %v", method, ns.Judgement.SwapAt, err)
				}
				results = append(results, result{method: method, resets: tl.at(halted) - tl.at(swap),
					seconds: halted.Sub(swap).Seconds(), verdict: ns.Verdict + " [" + ns.Judgement.Decision + "]"})
			})
		}
	}
	for _, r := range results {
		fmt.Printf("verdict, method %s: %s\n", r.method, r.verdict)
	}
	for _, r := range results {
		fmt.Printf("harm method=%s resets_before_halt=%d seconds_to_halt=%.0f\n", map[v1alpha1.DecisionMethod]string{v1alpha1.MethodFixed: "fixed", v1alpha1.MethodSequential: "sequential"}[r.method], r.resets, r.seconds)
	}
}

// resetTimeline samples the resets every app received (the data plane's
// truth) every period until stopped.
type resetTimeline struct {
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	ts   []time.Time
	rsts []int64
}

func (e *liveEnv) resetTimeline(period time.Duration) *resetTimeline {
	tl := &resetTimeline{done: make(chan struct{})}
	tl.wg.Add(1)
	go func() {
		defer tl.wg.Done()
		for {
			_, t := e.dp.Truth()
			tl.mu.Lock()
			tl.ts, tl.rsts = append(tl.ts, time.Now()), append(tl.rsts, t.RSTs)
			tl.mu.Unlock()
			select {
			case <-tl.done:
				return
			case <-time.After(period):
			}
		}
	}()
	return tl
}

func (tl *resetTimeline) stop() *resetTimeline {
	close(tl.done)
	tl.wg.Wait()
	return tl
}

// at is the resets counted by the last sample at or before t (the first
// sample's for an earlier t).
func (tl *resetTimeline) at(t time.Time) int64 {
	n := tl.rsts[0]
	for i, ts := range tl.ts {
		if ts.After(t) {
			break
		}
		n = tl.rsts[i]
	}
	return n
}
