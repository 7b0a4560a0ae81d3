package dashboard

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

var t0 = time.Date(2026, 12, 3, 3, 0, 0, 0, time.UTC)

// haltedRollout is a rollout of nodes nodes in three zones whose canary
// node-001 failed its gate on a pod's resets.
func haltedRollout(name string, nodes int) *v1alpha1.NodeRollout {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0)}}
	nr.Status.Phase = v1alpha1.PhaseHalted
	nr.Status.HaltReason = "node node-001: gate Fail: resetsReceived rose on default/web-1 (p<0.001)"
	start, finish := metav1.NewTime(t0.Add(time.Minute)), metav1.NewTime(t0.Add(3*time.Minute))
	for i := 1; i <= nodes; i++ {
		n := v1alpha1.NodeStatus{Name: fmt.Sprintf("node-%03d", i), Zone: fmt.Sprintf("zone-%c", 'a'+(i-1)%3), State: v1alpha1.NodePending}
		switch {
		case i == 1:
			n.Canary, n.Wave, n.State, n.StartTime, n.FinishTime = true, 1, v1alpha1.NodeFailed, &start, &finish
			n.Verdict = "Fail: resetsReceived rose on default/web-1 (p<0.001)"
			n.Detail = []string{"resetsReceived rose on default/web-1: 0.05/s → 3.9/s (p<0.001)", "enrolled 3/4 (ambient pods in the mesh at the soak's end)", "agent clock skew 0.2s"}
			n.Judgement = &v1alpha1.NodeJudgement{Judgements: 1, ConsecutiveFailures: 1, IntervalOutcome: v1alpha1.OutcomeFail, BaselineSeconds: 60, SoakSeconds: 60,
				PodsCompared: 4, Tests: 24, Regressions: 1, JudgedAt: t0.Add(3 * time.Minute).Format(time.RFC3339),
				Rows: []v1alpha1.JudgementRow{
					{Metric: v1alpha1.MetricResetsReceived, Before: "0.1/s", After: "4.2/s", P: "p<0.001", Regressed: true,
						Values: &v1alpha1.RowValues{Before: "0.1", After: "4.2", NBefore: 6, NAfter: 252, ControlShift: "1.02", ControlPods: 9, PAdj: "1e-06"}},
					{Pod: "default/web-1", Metric: v1alpha1.MetricResetsReceived, Before: "0.05/s", After: "3.9/s", P: "p<0.001", Regressed: true,
						Values: &v1alpha1.RowValues{Before: "0.05", After: "3.9", NBefore: 3, NAfter: 234, ControlShift: "1.01", ControlPods: 9, PAdj: "2e-06"}},
					{Pod: "default/web-2", Metric: v1alpha1.MetricConnectLatency, Before: "p50 1.0ms p99 4.0ms", After: "p50 1.1ms p99 4.2ms", P: "p=0.41",
						Values: &v1alpha1.RowValues{Before: "4000", After: "4200", BeforeP50: "1000", AfterP50: "1100", PAdj: "0.41"}},
					{Pod: "nodewise-probe/probe-x", Metric: v1alpha1.MetricConnectFailures, Before: "0/s", After: "0/s", Note: "too little traffic to test",
						Values: &v1alpha1.RowValues{Before: "0", After: "0", Probe: true}},
				},
				PodAges: []v1alpha1.PodAges{
					{Pod: "default/web-1", Before: v1alpha1.ConnAges{Open: 40, Median: "45", Oldest: "600"}, After: v1alpha1.ConnAges{Open: 2, Median: "0", Oldest: "1"}},
					{Pod: "default/web-2"},
				},
				BaselineFrom: t0.Format(time.RFC3339), SwapAt: t0.Add(time.Minute).Format(time.RFC3339), SoakFrom: t0.Add(2 * time.Minute).Format(time.RFC3339),
				ControlNodes: []string{"node-002", "node-003"},
				Enrollment:   "enrolled 3/4", TrafficOutcome: v1alpha1.OutcomePass,
				EnrollmentPods: []string{"default/web-3 not enrolled (listeners: nothing listens on 15008): was enrolled before the swap: fails the node"}}
		default:
			n.Wave = int32(2 + (i-2)/4)
		}
		nr.Status.Nodes = append(nr.Status.Nodes, n)
	}
	nr.Status.Counts = v1alpha1.RolloutCounts{Total: int32(nodes), Pending: int32(nodes - 1), Failed: 1}
	return nr
}

// The reasons a fleetRollout's waiting nodes carry, as the orchestrator
// writes them on a Pending node's status entry.
const (
	notReadyReason = "waiting: NotReady: swapped when it is Ready again"
	kuredReason    = "waiting: held by Kured's lock (weave.works/kured-node-lock on DaemonSet kube-system/kured)"
	blockedReason  = "waiting: blocked by pod default/batch-1 (spec.blocking.podSelector app=batch)"
)

// fleetRollout is a Progressing rollout of nodes simulated nodes (status
// only, no data plane) in three zones, ordered and put in waves by the
// planner itself (the canary node-0001 first, then zone by zone, waves
// ramping 1, 2, 4 … up to 50): the first two fifths done (five of them
// skipped), the next dozen in flight, three pending nodes waiting on
// something else (NotReady, Kured's lock, a blocking pod), the rest
// pending. It needs at least 50 nodes.
func fleetRollout(name string, nodes int) *v1alpha1.NodeRollout {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0)}}
	nr.Status.Phase = v1alpha1.PhaseProgressing
	views := make([]model.NodeView, nodes)
	for i := range views {
		views[i] = model.NodeView{Name: fmt.Sprintf("node-%04d", i+1), Zone: fmt.Sprintf("zone-%c", 'a'+i%3)}
	}
	plan, _ := planner.Order(views, []string{"node-0001"}, 50)
	start, finish := metav1.NewTime(t0.Add(time.Minute)), metav1.NewTime(t0.Add(3*time.Minute))
	done := 2 * nodes / 5
	skipped := map[int]bool{}
	for k := range 5 {
		skipped[done*k/5+done/10] = true
	}
	steps := []v1alpha1.NodeState{v1alpha1.NodeDrain, v1alpha1.NodeSwapCNI, v1alpha1.NodeSwapZtunnel, v1alpha1.NodeWaitReady, v1alpha1.NodeSoak, v1alpha1.NodeGate}
	for i, pn := range plan {
		n := v1alpha1.NodeStatus{Name: pn.Name, Zone: pn.Zone, Canary: pn.Canary, Wave: int32(pn.Wave), State: v1alpha1.NodePending}
		switch {
		case skipped[i]:
			n.State, n.Reason = v1alpha1.NodeSkipped, "skipped by admin: hardware ticket"
		case i < done:
			n.State, n.StartTime, n.FinishTime, n.Verdict = v1alpha1.NodeDone, &start, &finish, "Pass: no regression in 12 tests over 4 pods"
		case i < done+12:
			n.State, n.StartTime, n.StateSince = steps[(i-done)%len(steps)], &start, &finish
		case i == done+13:
			n.Reason = notReadyReason
		case i == done+17:
			n.Reason = kuredReason
		case i == done+21:
			n.Reason = blockedReason
		}
		nr.Status.Nodes = append(nr.Status.Nodes, n)
	}
	nr.Status.Counts = planner.Counts(nr.Status.Nodes)
	return nr
}
