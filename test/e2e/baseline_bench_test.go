package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// BenchmarkBaselineFromHistory rolls the judge e2e cluster's nodes one at a
// time (maxParallel 1) with a baseline B and a soak S, judged through
// synthetic agents that keep a history (a snapshot a second, served at
// /v1/history over HTTPS to the real AgentClient), and prints one line:
//
//	baseline-bench nodes=N maxParallel=1 baseline=B soak=S wall=… old_floor=… new_floor=… swaps=… swap_mean=… swap_max=… wall/new_floor=… wall/old_floor=… from_history=k/N
//
// The old floor is N×(B+S) plus the swaps (the baseline waited out in each
// node's slot), the new floor N×S plus the swaps (the baseline read back
// from the agents' history when the slot starts). Swaps are each node's as
// the cluster saw it (first old pod deleted → last new pod Ready);
// slot_to_swap_mean is the mean time from a node's slot start (its status
// startTime: preflight) to its first old pod deleted (preflight, the
// history read, the cordon).
// from_history counts the nodes whose verdict says their baseline came from
// the agent's history; the benchmark fails unless it is every node, since
// the figures would not measure what they say. B and S default to 20s
// (NODEWISE_BENCH_BASELINE, NODEWISE_BENCH_SOAK).
func BenchmarkBaselineFromHistory(b *testing.B) {
	baseline := envDuration(b, "NODEWISE_BENCH_BASELINE", 20*time.Second)
	soak := envDuration(b, "NODEWISE_BENCH_SOAK", 20*time.Second)
	e := startE2ECluster(b)
	historyFrom := time.Now()
	e.f.keepHistory(b, e.c.Nodes, time.Second)
	e.startLeader(b, "bench-baseline")
	sc := clockSwaps(b, e.c.Client, "1.28.1")
	// The agents have counted for a baseline before the first slot, as
	// agents running since before a rollout have.
	time.Sleep(time.Until(historyFrom.Add(baseline + time.Second)))

	nr := judgedRollout("bench-baseline", soak)
	nr.Spec.Baseline = &v1alpha1.Duration{Duration: baseline}
	start := time.Now()
	if _, err := e.rolls.Create(context.Background(), nr, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	done := e.finished(b, nr.Name)
	wall := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	sc.stop()
	if done.Status.Phase != v1alpha1.PhaseCompleted {
		b.Fatalf("phase %s: %s", done.Status.Phase, done.Status.HaltReason)
	}

	n := len(done.Status.Nodes)
	var swaps, slowest, toSwap time.Duration
	fromHistory := 0
	for _, ns := range done.Status.Nodes {
		d := sc.took(ns.Name)
		if d <= 0 {
			b.Fatalf("node %s: no swap clocked", ns.Name)
		}
		swaps += d
		if ns.StartTime == nil {
			b.Fatalf("node %s: no start time in status", ns.Name)
		}
		toSwap += sc.start[ns.Name].Sub(ns.StartTime.Time)
		slowest = max(slowest, d)
		if detail := strings.Join(ns.Detail, "; "); strings.Contains(detail, "baseline of node "+ns.Name+" from its agent's history") {
			fromHistory++
		} else {
			b.Errorf("node %s: the baseline was not read from the agent's history: %q", ns.Name, detail)
		}
	}
	oldFloor := time.Duration(n)*(baseline+soak) + swaps
	newFloor := time.Duration(n)*soak + swaps
	r := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	fmt.Printf("baseline-bench nodes=%d maxParallel=1 baseline=%s soak=%s wall=%s old_floor=%s new_floor=%s swaps=%s swap_mean=%s swap_max=%s slot_to_swap_mean=%s wall/new_floor=%.3f wall/old_floor=%.3f from_history=%d/%d\n",
		n, baseline, soak, r(wall), r(oldFloor), r(newFloor), r(swaps), r(swaps/time.Duration(n)), r(slowest), r(toSwap/time.Duration(n)),
		wall.Seconds()/newFloor.Seconds(), wall.Seconds()/oldFloor.Seconds(), fromHistory, n)
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(wall.Seconds()/newFloor.Seconds(), "wall/new-floor")
}

// envDuration is the duration in the environment variable name, or def.
func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 20s", name, v)
	}
	return d
}
