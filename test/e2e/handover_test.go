package e2e

// A leader handover in the middle of a node's soak, with the judge wired:
// leader A records the canary's baseline and swaps it, and stops during the
// soak (in-process leaders: its context is cancelled; orchestrator
// processes: SIGKILL); leader B, whose Recorder never sampled that node,
// judges it from the baseline record A persisted in status.nodes[].baseline.

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/orchestrator/model"
)

const handoverSoak = 8 * time.Second

// handover runs the rollout under leader A until its first node is soaking
// with its record (baseline and soak start) persisted, stops A, and lets
// standby B finish. It returns the rollout as it ends and the node A left
// mid-soak.
//
// start runs a leader with that identity and returns what stops it: the
// in-process leaders' context cancel, or SIGKILL of an orchestrator process.
func handover(t *testing.T, e *e2e, start func(identity string) (stop func()), specs ...func(*v1alpha1.NodeRolloutSpec)) (*v1alpha1.NodeRollout, string) {
	stopA := start("leader-a")
	waitLeader(t, e, "leader-a")
	start("leader-b")
	nr := judgedRollout("handover", handoverSoak)
	for _, f := range specs {
		f(&nr.Spec)
	}
	ctx := context.Background()
	if _, err := e.rolls.Create(ctx, nr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.rolls.Get(ctx, nr.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, ns := range got.Status.Nodes {
			if ns.State != v1alpha1.NodeSoak || ns.Baseline == "" {
				continue
			}
			if rec, err := record.DecodeBaseline(ns.Baseline); err == nil && rec.SoakStart != nil {
				node = ns.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no node soaking with its baseline record persisted: %v", err)
	}
	n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	soakSince, _ := time.Parse(time.RFC3339Nano, n.Annotations[model.AnnotationSoakSince])
	stopA()
	t.Logf("leader A stopped %s into node %s's %s soak", time.Since(soakSince).Round(10*time.Millisecond), node, nr.Spec.Soak.Duration)
	if time.Since(soakSince) >= nr.Spec.Soak.Duration {
		t.Fatalf("leader A stopped after node %s's soak ended: the handover was not mid-soak", node)
	}
	waitLeader(t, e, "leader-b")
	return e.finished(t, nr.Name), node
}

// leader starts in-process leaders with e.startLeader.
func (e *e2e) leader(t *testing.T) func(string) func() {
	return func(id string) func() { return e.startLeader(t, id) }
}

// processLeader starts leaders as orchestrator processes wired as a
// Deployment runs them: the agents on each node's InternalIP, with the
// agents' CA and token files; stopping one is SIGKILL.
func (e *e2e) processLeader(t *testing.T) func(string) func() {
	port := e.f.serveOnNodes(t, e.c)
	procs := &env{t: t, c: e.c, rollouts: e.rolls}
	return func(id string) func() {
		p := procs.startProcess(id, "127.0.0.1:0", "--agent-ca", e.ca, "--agent-token-file", e.tok,
			"--agent-port", strconv.Itoa(port), "--agent-server-name", "example.com", "--agent-sample-every", "250ms")
		return p.kill
	}
}

// everyNode sets one of the fleet's per-node faults on every node.
func (e *e2e) everyNode(fault map[string]bool) {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	for _, n := range e.c.Nodes {
		fault[n.Name] = true
	}
}

func waitLeader(t *testing.T, e *e2e, id string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := e.c.Client.CoordinationV1().Leases("default").Get(ctx, model.LeaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == id, nil
	})
	if err != nil {
		t.Fatalf("%s never held the lease", id)
	}
}

func entry(nr *v1alpha1.NodeRollout, node string) *v1alpha1.NodeStatus {
	for i := range nr.Status.Nodes {
		if nr.Status.Nodes[i].Name == node {
			return &nr.Status.Nodes[i]
		}
	}
	return nil
}

// TestE2EHandoverMidSoakJudgesFromTheRecord: healthy agents. B passes the
// node A left mid-soak, on its evidence, from A's baseline and against the
// control group A recorded, and goes on to complete the rollout; no
// finished node keeps its records. Once with
// in-process leaders, once with orchestrator processes whose leader is
// killed with SIGKILL: nothing of it survives but what it wrote to the API.
func TestE2EHandoverMidSoakJudgesFromTheRecord(t *testing.T) {
	for _, tc := range []struct {
		name    string
		leaders func(*e2e, *testing.T) func(string) func()
	}{
		{"context cancelled", (*e2e).leader},
		{"SIGKILL", (*e2e).processLeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startE2ECluster(t)
			passesOnTheRecord(t, e, tc.leaders(e, t))
		})
	}
}

func passesOnTheRecord(t *testing.T, e *e2e, leaders func(string) func()) {
	nr, node := handover(t, e, leaders)
	ns := entry(nr, node)
	t.Logf("node %s: %s", node, ns.Verdict)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Done != e2eNodes {
		t.Fatalf("phase %s, counts %+v, halt %q", nr.Status.Phase, nr.Status.Counts, nr.Status.HaltReason)
	}
	detail := strings.Join(ns.Detail, "; ")
	if !strings.HasPrefix(ns.Verdict, "Pass") || !strings.Contains(detail, "baseline restored from the record of the swap at") ||
		!strings.Contains(detail, "11 pods of 11 kept") || ns.Judgement == nil || ns.Judgement.PodsCompared != 11 {
		t.Fatalf("node %s: verdict %q, detail %q, judgement %+v: want a Pass on the restored baseline, 11 pods compared", node, ns.Verdict, detail, ns.Judgement)
	}
	// B judged the node against its control group, from the control
	// record A persisted beside the baseline: not before/after alone.
	if !strings.Contains(detail, "control group restored from the record of the swap at") ||
		strings.Contains(detail, "left out") || strings.Contains(detail, "before/after alone") {
		t.Fatalf("node %s: detail %q: want it judged against the control group restored from A's record", node, detail)
	}
	controlled := 0
	for _, row := range ns.Judgement.Rows {
		if row.Values != nil && row.Values.ControlPods > 0 {
			controlled++
		}
	}
	if controlled == 0 {
		t.Errorf("node %s: no row of the judgement was compared with a control: %+v", node, ns.Judgement.Rows)
	}
	for _, other := range nr.Status.Nodes {
		if other.Baseline != "" || other.Controls != "" {
			t.Errorf("node %s (%s) still carries its baseline or control record", other.Name, other.State)
		}
		if other.Name != node && strings.Contains(strings.Join(other.Detail, "; "), "baseline restored") {
			t.Errorf("node %s, started by B, was judged from a record: %q", other.Name, other.Detail)
		}
	}
}

// TestE2EHandoverMidSoakFailsARegression: every node's pod 3 resets ×5
// from its swap. B fails the node A left mid-soak, on the regression it
// measured against A's baseline (not for a lost baseline), and halts there.
func TestE2EHandoverMidSoakFailsARegression(t *testing.T) {
	e := startE2ECluster(t)
	e.everyNode(e.f.regress)
	nr, node := handover(t, e, e.leader(t))
	assertHaltedAt(t, e, nr, node, "pod shop/"+node+"-app-3: resets received")
	ns := entry(nr, node)
	if !strings.Contains(strings.Join(ns.Detail, "; "), "baseline restored from the record of the swap at") {
		t.Errorf("detail %q: want the regression judged on the restored baseline", ns.Detail)
	}
	if nr.Status.Counts.Done != 0 {
		t.Errorf("%d nodes done after a halt at the first", nr.Status.Counts.Done)
	}
}

// TestE2EHandoverMidSoakWatchdogFailsOnEnrollment: every node's agent checks
// enrollment, and pod 3 loses its HBONE listener from the node's swap on.
// B, which never sampled the baseline, takes the enrollment before the swap
// back from A's record: its watchdog fails the node A left mid-soak once
// spec.enrollmentTimeout has passed, naming the pod enrolled before the swap,
// before the soak's end (without the record it would hold nothing, and the
// gate at the soak's end would count the pod as new on the node).
func TestE2EHandoverMidSoakWatchdogFailsOnEnrollment(t *testing.T) {
	e := startE2ECluster(t)
	e.everyNode(e.f.unenroll)
	// A soak long enough for several checks: one the agent does not answer
	// in time on a loaded machine is no evidence, and the next one decides
	// (a successor slow to reach the node still finds the soak running).
	const bound, soak = 3 * time.Second, 30 * time.Second
	nr, node := handover(t, e, e.leader(t), func(s *v1alpha1.NodeRolloutSpec) {
		s.EnrollmentTimeout = &v1alpha1.Duration{Duration: bound}
		s.Soak = &v1alpha1.Duration{Duration: soak}
	})
	assertHaltedAt(t, e, nr, node, "enrollment watchdog: pod shop/"+node+"-app-3 was enrolled before the swap and is not now: listeners failed: nothing listens on 15008")
	ns := entry(nr, node)
	if j := ns.Judgement; j == nil || j.SoakSeconds < int32(bound/time.Second) || j.SoakSeconds >= int32(soak/time.Second) || j.Tests != 0 {
		t.Errorf("node %s judgement %+v: want it failed by the watchdog %s to %s into the soak, before any traffic test", node, ns.Judgement, bound, soak)
	}
}
