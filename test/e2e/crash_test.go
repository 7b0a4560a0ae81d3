package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestResumeAfterKillAtEveryStep kills -9 the orchestrator process right after
// it persists each step (one run per step) and checks a successor finishes:
// no node swapped twice, no cordon left, maxUnavailable never exceeded.
func TestResumeAfterKillAtEveryStep(t *testing.T) {
	t.Parallel()
	const nodes = 6
	e := newEnv(t, nodes, 2)
	// Every step that is persisted (WaitReady and Gate only observe and get no
	// record of their own: a successor repeats them from the record before;
	// Preflight is recorded when it has a baseline window to wait out), and
	// SwapZtunnel, which has no record of its own after SwapCNI: killed as it
	// begins, the successor resumes from SwapCNI's.
	steps := []v1alpha1.NodeState{
		v1alpha1.NodePreflight, v1alpha1.NodeCordon, v1alpha1.NodeDrain, v1alpha1.NodeSwapCNI, v1alpha1.NodeSwapZtunnel,
		v1alpha1.NodeUncordon, v1alpha1.NodeSoak, v1alpha1.NodeDone,
	}
	for i, step := range steps {
		version := fmt.Sprintf("1.28.%d", i+1)
		name := "crash-" + strings.ToLower(string(step))
		t.Run(string(step), func(t *testing.T) {
			e.t = t
			w := e.watch()
			e.upgrade(version)
			first := e.startProcess("first-"+name, "127.0.0.1:0", "--test-hold-after-persist", string(step))
			e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
				s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
				s.Drain.Policy = v1alpha1.DrainAlways
				s.Soak = &v1alpha1.Duration{Duration: time.Second}
				s.Baseline = &v1alpha1.Duration{Duration: time.Second}
			}))
			node := e.waitStep(name, step)
			first.kill()
			t.Logf("killed -9 pid %d with node %s at step %s", first.cmd.Process.Pid, node, step)
			e.startProcess("second-"+name, "127.0.0.1:0")
			nr := e.waitPhase(name, 4*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
			if nr.Status.Phase != v1alpha1.PhaseCompleted {
				t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
			}
			e.assertAllOnNewest(nodes)
			time.Sleep(300 * time.Millisecond)
			w.stop()
			if got, worst := w.max(); got > 2 {
				t.Errorf("%d nodes unavailable at once (> 2): %s", got, worst)
			}
			for k, n := range w.deletes {
				if n != 1 {
					t.Errorf("%s: %d old pods deleted, want exactly 1 (swapped twice?)", k, n)
				}
			}
			if len(w.deletes) != 2*nodes {
				t.Errorf("%d node/DaemonSet swaps seen, want %d", len(w.deletes), 2*nodes)
			}
			if uns := e.unschedulable(); len(uns) != 0 {
				t.Errorf("cordons left behind: %v", uns)
			}
			e.assertDrainRecorded(name, nodes)
		})
	}
}

// assertDrainRecorded: under drain always, every node carries a drain record
// at or after its cordon, although a process was killed mid-way, so the gate
// (GateInput.SwappedInPlace) reads it as drained, not swapped in place.
func (e *env) assertDrainRecorded(rollout string, want int) {
	e.t.Helper()
	nodes, err := e.c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	seen := 0
	for _, n := range nodes.Items {
		if n.Annotations[model.AnnotationRollout] != rollout {
			continue
		}
		seen++
		drained, err1 := time.Parse(time.RFC3339Nano, n.Annotations[model.AnnotationDrainedAt])
		cordon, err2 := time.Parse(time.RFC3339Nano, n.Annotations[model.AnnotationSwapSince])
		if err1 != nil || err2 != nil || drained.Before(cordon) {
			e.t.Errorf("node %s: drained-at %q, swap-since %q: want a drain recorded at or after the cordon",
				n.Name, n.Annotations[model.AnnotationDrainedAt], n.Annotations[model.AnnotationSwapSince])
		}
	}
	if seen != want {
		e.t.Errorf("%d nodes carry rollout %s, want %d", seen, rollout, want)
	}
}

// waitStep waits until some node's persisted step for the rollout is step.
func (e *env) waitStep(rollout string, step v1alpha1.NodeState) string {
	e.t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := e.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, n := range nodes.Items {
			if n.Annotations[model.AnnotationRollout] == rollout && n.Annotations[model.AnnotationStep] == string(step) {
				node = n.Name
				return true, nil
			}
		}
		// A step with no record of its own (the surge swap after another
		// swap) shows in status only.
		nr, err := e.rollouts.Get(ctx, rollout, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, ns := range nr.Status.Nodes {
			if ns.State == step {
				node = ns.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no node reached step %s", step)
	}
	return node
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape returns the metric families served at addr.
func scrape(t testing.TB, addr string) map[string]*dto {
	t.Helper()
	fams, err := scrapeQuiet(addr)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// scrapeQuiet is scrape returning its error.
func scrapeQuiet(addr string) (map[string]*dto, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", addr, err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing the metrics of %s: %w", addr, err)
	}
	return fams, nil
}

// TestSuccessorCatchesUpStatusBehindTheRecords: a leader persists each
// node's record (its annotations) first and mirrors it in status behind, in
// batches; killed before a batch is written, it leaves status entries behind
// records that are already settled (seen at 5,000 nodes: 94 entries still in
// flight or Pending, the rollout Completed). No worker resumes a settled
// node, so the successor's plan brings those entries to their records.
// Here the first leader finishes the rollout, is killed, and the status is
// set back to what a lost batch leaves: one node's entry mid-swap, another's
// Pending, the rollout Progressing. The successor completes it with every
// entry Done.
func TestSuccessorCatchesUpStatusBehindTheRecords(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	e.upgrade("1.28.1")
	first := e.startProcess("first", "127.0.0.1:0")
	e.apply(rollout("behind", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	nr := e.waitPhase("behind", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	first.kill()
	nr.Status.Phase, nr.Status.CompletionTime = v1alpha1.PhaseProgressing, nil
	behind := map[string]v1alpha1.NodeState{nr.Status.Nodes[0].Name: v1alpha1.NodeSwapZtunnel, nr.Status.Nodes[1].Name: v1alpha1.NodePending}
	for i := range nr.Status.Nodes {
		if st, ok := behind[nr.Status.Nodes[i].Name]; ok {
			nr.Status.Nodes[i].State, nr.Status.Nodes[i].FinishTime = st, nil
		}
	}
	nr.Status.Counts = v1alpha1.RolloutCounts{Total: nodes, Done: nodes - 2, InProgress: 1, Pending: 1}
	if _, err := e.rollouts.UpdateStatus(context.Background(), nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startProcess("second", "127.0.0.1:0")
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.rollouts.Get(ctx, "behind", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		nr = got
		return got.Status.Phase == v1alpha1.PhaseCompleted && got.Status.Counts.Done == nodes, nil
	})
	if err != nil {
		t.Fatalf("phase %s, counts %+v: want Completed with all %d nodes Done", nr.Status.Phase, nr.Status.Counts, nodes)
	}
	for _, ns := range nr.Status.Nodes {
		if ns.State != v1alpha1.NodeDone || ns.FinishTime == nil {
			t.Errorf("node %s: %s (finished %v), want Done", ns.Name, ns.State, ns.FinishTime)
		}
		if _, ok := behind[ns.Name]; ok && !strings.Contains(ns.Reason, "caught up with the node's record") {
			t.Errorf("node %s: reason %q, want it caught up with its record", ns.Name, ns.Reason)
		}
	}
}
