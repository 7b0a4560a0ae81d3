// Package fleetstatus builds the status of a large rollout, the fixture the
// orchestrator's status writer is tested with: by its unit tests
// (orchestrator/write) and by the suite that writes it through a real API
// server (test/e2e). It depends on nothing of ours but the API types, so a
// unit test may use it without pulling in the simulated cluster.
package fleetstatus

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TwoThirds is the status of a rollout over n nodes in 5 zones, as its
// leader holds it two thirds of the way through: the nodes that passed
// (each with its verdict and the judge's counters), 40 nodes soaking (each
// with its baseline and control records, judgement counters and start
// time), 12 failed (reason and verdict), the rest Pending.
func TwoThirds(n int) []v1alpha1.NodeStatus {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	out := make([]v1alpha1.NodeStatus, 0, n)
	for i := range n {
		at := &metav1.Time{Time: t0.Add(time.Duration(i) * time.Second)}
		ns := v1alpha1.NodeStatus{Name: fmt.Sprintf("node-%05d", i), Zone: fmt.Sprintf("zone-%c", 'a'+i%5), Wave: int32(i/100 + 1), State: v1alpha1.NodePending}
		switch {
		case i < 40:
			ns.State, ns.StateSince, ns.StartTime = v1alpha1.NodeSoak, at, at
			ns.Baseline, ns.Controls = strings.Repeat("QkFTRUxJTkU", 400), strings.Repeat("Q09OVFJPTA", 150)
			ns.Judgement = &v1alpha1.NodeJudgement{Judgements: 2, BaselineSeconds: 300, SoakSeconds: 120, PodsCompared: 12, Tests: 40}
		case i < 52:
			ns.State, ns.StateSince, ns.StartTime, ns.FinishTime = v1alpha1.NodeFailed, at, at, at
			ns.Reason, ns.Verdict = "gate failed", "Fail: resets 0.2/s → 4.1/s on 3 pods"
		case i < 2*n/3:
			ns.State, ns.StateSince, ns.StartTime, ns.FinishTime = v1alpha1.NodeDone, at, at, at
			ns.Verdict = "Pass: no regression in 40 tests over 12 pods (5m0s baseline, 5m0s soak)"
			ns.Judgement = &v1alpha1.NodeJudgement{Judgements: 3, BaselineSeconds: 300, SoakSeconds: 300, PodsCompared: 12, Tests: 40}
		}
		out = append(out, ns)
	}
	return out
}
