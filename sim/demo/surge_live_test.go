package demo

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/dataplane"
	"github.com/nodewise/nodewise/test/testkit"
)

// surgeTraffic is the live traffic with a background of aborted requests
// (one short request in 10 ends with a reset), so a cluster-wide surge moves
// what the judge counts (dataplane.Traffic.AbortEvery).
var surgeTraffic = func() dataplane.Traffic {
	t := liveTraffic
	t.AbortEvery = 10
	return t
}()

// surgeFactor is the cluster-wide traffic change: every client ×3.
const surgeFactor = 3

// surgeBaseline is the surge rollouts' baseline window.
const surgeBaseline = 15 * time.Second

// surgeRollout rolls a healthy build onto three nodes one at a time, the
// busiest first (its controls are the other two), swapped in place so each
// keeps its pods' traffic; too little traffic halts rather than holds.
func surgeRollout(name, canary string, control v1alpha1.ControlGroupPolicy) *v1alpha1.NodeRollout {
	nr := demoGates(judged(healthyRollout(name, canary), surgeBaseline, 15*time.Second, v1alpha1.InconclusiveFail))
	nr.Spec.MaxParallel, nr.Spec.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	nr.Spec.Drain.Policy = v1alpha1.DrainNever
	nr.Spec.Gates.ControlGroup = control
	// These tests judge resets against the control group; the nodes after
	// the canary have no controls left and are judged alone.
	latencyAboveLoadNoise(nr)
	return nr
}

// runSurged runs rollout nr while the whole cluster's traffic surges ×3
// from the moment the canary's soak starts until the canary is judged, and
// returns the rollout as it ended.
func (e *liveEnv) runSurged(nr *v1alpha1.NodeRollout, canary string) *v1alpha1.NodeRollout {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	go e.surgeDuringSoak(ctx, nr.Name, canary)
	got, err := runRollout(ctx, e.rc, nr, newView(testWriter{e.t}, false))
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// surgeDuringSoak watches the rollout: once canary soaks, every client of
// the cluster goes ×3 (for a minute at most), and back to ×1 once the
// canary is judged, so no later node soaks in it without a baseline in it.
func (e *liveEnv) surgeDuringSoak(ctx context.Context, name, canary string) {
	surged := false
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		nr, err := e.rc.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, n := range nr.Status.Nodes {
			if n.Name != canary {
				continue
			}
			switch {
			case !surged && (n.State == v1alpha1.NodeSoak || n.State == v1alpha1.NodeGate):
				if err := e.dp.TrafficSurge(surgeFactor, time.Minute); err != nil {
					e.t.Error(err)
					return
				}
				e.t.Logf("cluster-wide traffic ×%d from %s's soak on (state %s)", surgeFactor, canary, n.State)
				surged = true
			case surged && n.State != v1alpha1.NodeSoak && n.State != v1alpha1.NodeGate:
				_ = e.dp.TrafficSurge(1, 0)
				e.t.Logf("traffic back to ×1: %s is %s", canary, n.State)
				return
			}
		}
	}
}

// surgeEnv is a 3-node live cluster with surgeTraffic, its charts moved to
// the healthy 1.28.1 and its streams open, and the canary: its busiest node.
// It returns a baseline window after the streams opened: the agents start
// before the pods exist, so a window that opens earlier (the rollout reads
// it back from their history, the window that ended at the swap) holds
// every pod as appeared, none compared, and the canary fails for too little
// traffic, as it did on a loaded machine.
func surgeEnv(t testing.TB) (*liveEnv, string) {
	e := newLiveEnvTraffic(t, 3, surgeTraffic, testAgents(t))
	e.upgrade("1.28.1")
	e.settle()
	time.Sleep(surgeBaseline)
	canary, err := busiestAmbientNode(context.Background(), e.c)
	if err != nil {
		t.Fatal(err)
	}
	return e, canary
}

// TestLiveClusterWideSurgePassesOnControls: a healthy build rolled while
// every client of the cluster sends three times as much for the canary's
// soak (and aborts three times as large a share of its requests): the
// canary's resets rise before/after, but its control nodes' rose the same
// way over the same interval, so it passes with the reason saying so, and
// the rollout completes.
func TestLiveClusterWideSurgePassesOnControls(t *testing.T) {
	e, canary := surgeEnv(t)
	nr := e.runSurged(surgeRollout("surge-controls", canary, ""), canary)
	for _, n := range nr.Status.Nodes {
		t.Logf("%s: %s", n.Name, n.Verdict)
	}
	_, truth := e.dp.Truth()
	t.Logf("ground truth: %s; %d requests aborted by their clients", truth, truth.Aborted)
	ns := nodeStatus(t, nr, canary)
	logRows(t, ns)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		// All of it in this one line: CI logs are cut.
		t.Fatalf("rollout %s, want Completed: canary %s %s, verdict %q; its count rows: %s; halt reason: %s",
			nr.Status.Phase, canary, ns.State, ns.Verdict, strings.Join(countRows(ns), "; "), nr.Status.HaltReason)
	}
	if detail := strings.Join(ns.Detail, "; "); !strings.HasPrefix(ns.Verdict, "Pass") || !strings.Contains(detail, "the control group (") || !strings.Contains(detail, "moved the same way") {
		t.Errorf("canary %s: want a Pass that names the control group moving the same way, got %q (detail %q)", canary, ns.Verdict, detail)
	}
}

// TestLiveClusterWideSurgeHaltsWithoutControls: the same run with
// gates.controlGroup Disabled halts at the canary on the surge's resets,
// judged before/after alone: the control group is what let the rollout
// above complete.
func TestLiveClusterWideSurgeHaltsWithoutControls(t *testing.T) {
	t.Parallel()
	e, canary := surgeEnv(t)
	nr := e.runSurged(surgeRollout("surge-alone", canary, v1alpha1.ControlGroupDisabled), canary)
	ns := nodeStatus(t, nr, canary)
	logRows(t, ns)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at %s", nr.Status.Phase, canary, ns.State, ns.Verdict, canary)
	}
	if detail := strings.Join(ns.Detail, "; "); !strings.HasPrefix(ns.Verdict, "Fail") || !strings.Contains(nr.Status.HaltReason, "resets") ||
		!strings.Contains(detail, "the control group is switched off") {
		t.Errorf("want a reset regression judged before/after alone: verdict %q, halt %q, detail %q", ns.Verdict, nr.Status.HaltReason, detail)
	}
}

// logRows logs the count rows of a node's last judgement.
func logRows(t testing.TB, ns v1alpha1.NodeStatus) {
	for _, r := range countRows(ns) {
		t.Log(r)
	}
}

// countRows are the count rows of a node's last judgement, one line each.
func countRows(ns v1alpha1.NodeStatus) []string {
	if ns.Judgement == nil {
		return nil
	}
	var out []string
	for _, r := range ns.Judgement.Rows {
		if !r.Metric.IsLatency() {
			out = append(out, fmt.Sprintf("%s %s: %s → %s %s %s", orDash(r.Pod), r.Metric, r.Before, r.After, r.P, r.Note))
		}
	}
	return out
}

// BenchmarkClusterWideSurge runs the surge above side by side, the control
// group on and then off, each on a fresh 3-node live cluster: every client
// ×3 from the canary's soak until it is judged. It prints, per run, how
// the rollout ended, the canary's node rows (resets before → after), its
// verdict, and last one line per run. Run it with `make bench-surge` (root).
func BenchmarkClusterWideSurge(b *testing.B) {
	testkit.RequireNetns(b)
	type result struct {
		control  string
		phase    v1alpha1.RolloutPhase
		canary   string
		rows     []string
		verdict  string
		wall     time.Duration
		aborted  int64
		requests int64
	}
	var results []result
	for i := 0; i < b.N; i++ {
		for _, control := range []v1alpha1.ControlGroupPolicy{v1alpha1.ControlGroupEnabled, v1alpha1.ControlGroupDisabled} {
			b.Run(string(control), func(b *testing.B) {
				e, canary := surgeEnv(b)
				_, before := e.dp.Truth()
				t0 := time.Now()
				nr := e.runSurged(surgeRollout("surge-"+strings.ToLower(string(control)), canary, control), canary)
				_, after := e.dp.Truth()
				w := after.Sub(before)
				ns := nodeStatus(b, nr, canary)
				r := result{control: string(control), phase: nr.Status.Phase, canary: canary, verdict: ns.Verdict,
					wall: time.Since(t0), aborted: w.Aborted, requests: w.Requests}
				if j := ns.Judgement; j != nil {
					for _, row := range j.Rows {
						if row.Pod == "" && !row.Metric.IsLatency() {
							r.rows = append(r.rows, fmt.Sprintf("%s %s → %s %s", row.Metric, row.Before, row.After, row.P))
						}
					}
				}
				results = append(results, r)
			})
		}
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "control group\trollout\tcanary\tcanary's node rows (before → after)\trequests\taborted by clients\twall\n")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.control, r.phase, r.canary, strings.Join(r.rows, "; "), r.requests, r.aborted, r.wall.Round(time.Second))
	}
	_ = tw.Flush()
	fmt.Printf("\nA healthy ztunnel build rolled over 3 live nodes while every client of the cluster sends ×%d during the canary's soak:\n%s\n", surgeFactor, sb.String())
	for _, r := range results {
		fmt.Printf("canary verdict, control group %s: %s\n", r.control, r.verdict)
	}
	for _, r := range results {
		fmt.Printf("surge control=%s phase=%s wall_s=%d\n", strings.ToLower(r.control), r.phase, int(r.wall.Round(time.Second)/time.Second))
	}
}
