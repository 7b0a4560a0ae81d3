package demo

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
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
		halted  bool
	}
	var results []result
	for i := 0; i < b.N; i++ {
		for _, method := range []v1alpha1.DecisionMethod{v1alpha1.MethodFixed, v1alpha1.MethodSequential} {
			b.Run(string(method), func(b *testing.B) {
				e := newLiveEnv(b, 3)
				node := e.faultyBuild(cluster.ZtunnelName, "1.27.4-rst") // the -rst build on the live tests' 1.27 control plane
				nr := faultyRollout("harm-"+strings.ToLower(string(method)), node, true)
				nr.Spec.Soak, nr.Spec.Gates.Interval = nil, nil // the defaults: 5m, 1m
				nr.Spec.Gates.Method = method
				nr.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": node}}
				resets := e.resetTimeline(500 * time.Millisecond)
				// Past the fixed method's second judgement (soak + interval)
				// with room: a rollout still going then is reported as not
				// halted, with what the node's verdict says.
				ctx, cancel := context.WithTimeout(context.Background(), harmLimit)
				defer cancel()
				got, err := runRollout(ctx, e.rc, nr, newView(testWriter{b}, false))
				halted := time.Now()
				tl := resets.stop()
				if err != nil {
					got, _ = e.rc.Get(context.Background(), nr.Name, metav1.GetOptions{})
				}
				r := result{method: method}
				ns := nodeStatus(b, got, node)
				r.verdict = ns.Verdict
				swap, perr := e.swapAt(node, ns)
				if perr != nil {
					b.Fatalf("%s: no swap recorded (%v): rollout %s, node %s %q", method, perr, got.Status.Phase, ns.State, ns.Verdict)
				}
				r.resets, r.seconds = tl.at(halted)-tl.at(swap), halted.Sub(swap).Seconds()
				r.halted = got.Status.Phase == v1alpha1.PhaseHalted && ns.State == v1alpha1.NodeFailed
				if ns.Judgement != nil {
					r.verdict += " [" + ns.Judgement.Decision + "]"
				}
				results = append(results, r)
			})
		}
	}
	for _, r := range results {
		fmt.Printf("verdict, method %s: %s\n", r.method, r.verdict)
	}
	for _, r := range results {
		m := map[v1alpha1.DecisionMethod]string{v1alpha1.MethodFixed: "fixed", v1alpha1.MethodSequential: "sequential"}[r.method]
		if !r.halted {
			fmt.Printf("harm method=%s resets_before_halt=none (%d in %.0f s, not halted within %s) seconds_to_halt=none\n", m, r.resets, r.seconds, harmLimit)
			continue
		}
		fmt.Printf("harm method=%s resets_before_halt=%d seconds_to_halt=%.0f\n", m, r.resets, r.seconds)
	}
}

// swapAt is when the node's swap began (its cordon): the node's
// swap-since annotation, else (cleared) the judgement's swapAt.
func (e *liveEnv) swapAt(node string, ns v1alpha1.NodeStatus) (time.Time, error) {
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err == nil && n.Annotations[model.AnnotationSwapSince] != "" {
		return time.Parse(time.RFC3339Nano, n.Annotations[model.AnnotationSwapSince])
	}
	if ns.Judgement == nil {
		return time.Time{}, fmt.Errorf("no swap-since annotation (%v) and no judgement", err)
	}
	return time.Parse(time.RFC3339, ns.Judgement.SwapAt)
}

// harmLimit bounds each rollout: the default soak and interval, and room.
const harmLimit = 9 * time.Minute

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
