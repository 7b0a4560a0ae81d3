package status

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestRenderStatusSaysItIsDegraded: a status that omits entries (over its
// budget) says so under the headline, with how many nodes it lists and
// the omitted ones' counts by state; a whole status says nothing of it.
func TestRenderStatusSaysItIsDegraded(t *testing.T) {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Status: v1alpha1.NodeRolloutStatus{
		Phase:   v1alpha1.PhaseProgressing,
		Counts:  v1alpha1.RolloutCounts{Total: 12000, Done: 7949, InProgress: 40, Failed: 12, Pending: 3999},
		Omitted: &v1alpha1.RolloutCounts{Total: 11900, Done: 7949, Pending: 3951},
		Nodes:   []v1alpha1.NodeStatus{{Name: "node-00001", State: v1alpha1.NodeSoak}},
	}}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, nr, time.Now()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	want := "DEGRADED: the status is over its size budget and lists 100 of 12000 nodes (in flight and failed first); not listed: 7949 done, 3951 pending"
	if len(lines) < 2 || !strings.HasPrefix(lines[1], want) {
		t.Errorf("second line %q, want it to start %q", lines[1], want)
	}
	nr.Status.Omitted = nil
	buf.Reset()
	if err := RenderStatus(&buf, nr, time.Now()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "DEGRADED") {
		t.Errorf("a whole status rendered as degraded:\n%s", buf.String())
	}
}

// TestRenderStatusHaltedLine: a halt is one HALTED line within
// HaltLineMax: the reason's first line and, when it names the failed node
// and fits, the command that explains it; a longer reason is cut, never
// wrapped onto more lines.
func TestRenderStatusHaltedLine(t *testing.T) {
	failed := []v1alpha1.NodeStatus{{Name: "node-007", State: v1alpha1.NodeFailed}, {Name: "node-001", State: v1alpha1.NodePending}}
	for _, tc := range []struct {
		name, reason, want string
	}{
		{"a gate's failure", "node node-007: gate Fail: probe: resets sent 0/s → 3.1/s (p<0.001)",
			"HALTED: node node-007: gate Fail: probe: resets sent 0/s → 3.1/s (p<0.001) — see nodewise explain faulty-1.28.2-rst --node node-007"},
		{"no failed node named", "spec.nodeSelector matches no node", "HALTED: spec.nodeSelector matches no node"},
		{"a long reason", "node node-007: preflight: " + strings.Repeat("istio-cni check token failed; ", 20) + "\nsecond line",
			"HALTED: node node-007: preflight: " + strings.Repeat("istio-cni check token failed; ", 20)[:200-len("HALTED: node node-007: preflight: ")-1] + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "faulty-1.28.2-rst"},
				Status: v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, HaltReason: tc.reason, Nodes: failed}}
			var buf bytes.Buffer
			if err := RenderStatus(&buf, nr, time.Now()); err != nil {
				t.Fatal(err)
			}
			var halted []string
			for _, l := range strings.Split(buf.String(), "\n") {
				if strings.HasPrefix(l, "HALTED") || strings.Contains(l, "second line") {
					halted = append(halted, l)
				}
			}
			if len(halted) != 1 || halted[0] != tc.want || len([]rune(halted[0])) > HaltLineMax {
				t.Errorf("halt lines %q, want one: %q", halted, tc.want)
			}
		})
	}
}

// TestRenderStatusShowsAStandingPolicysRuns: a standing policy's view has
// one line, under the headline, saying it stands and naming its last
// runs; a one-shot rollout's has none.
func TestRenderStatusShowsAStandingPolicysRuns(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	end := metav1.NewTime(now.Add(-time.Hour))
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "ambient"}, Spec: v1alpha1.NodeRolloutSpec{Standing: true}, Status: v1alpha1.NodeRolloutStatus{
		Phase: v1alpha1.PhaseIdle,
		Runs:  []v1alpha1.RunRecord{{Run: 1, Outcome: v1alpha1.PhaseCompleted, Targets: []v1alpha1.TargetStatus{{Name: "ztunnel", Revision: "5d8f"}}, CompletionTime: &end}},
	}}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, nr, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	want := "standing: rolls each new revision of its targets; runs: #1 Completed (ztunnel@5d8f) 1h0m0s ago"
	if len(lines) < 2 || lines[1] != want {
		t.Errorf("second line %q, want %q", lines[1], want)
	}
	nr.Spec.Standing, nr.Status.Runs = false, nil
	buf.Reset()
	if err := RenderStatus(&buf, nr, now); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "standing") {
		t.Errorf("a one-shot rollout's view mentions standing:\n%s", buf.String())
	}
}

// TestRenderStatusShowsTheConformanceRun: a rollout halted by its
// conformance Job shows the halt (naming the Job) and the run in one line each.
func TestRenderStatusShowsTheConformanceRun(t *testing.T) {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "up"}, Status: v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted,
		HaltReason: "conformance Job qa/up-conformance-start-1 failed: BackoffLimitExceeded; last log lines of pod p: FAIL TestMTLS",
		Conformance: &v1alpha1.ConformanceStatus{Step: "start", Attempt: 1, Namespace: "qa", Job: "up-conformance-start-1", Outcome: v1alpha1.ConformanceFailed,
			Message: "conformance Job qa/up-conformance-start-1 failed: BackoffLimitExceeded; last log lines of pod p: FAIL TestMTLS"}}}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, nr, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"HALTED: conformance Job qa/up-conformance-start-1 failed: BackoffLimitExceeded; last log lines of pod p: FAIL TestMTLS\n",
		"conformance start (attempt 1): Job qa/up-conformance-start-1 Failed: conformance Job qa/up-conformance-start-1 failed: BackoffLimitExceeded; last log lines of pod p: FAIL TestMTLS\n",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("status view:\n%s\nwant the line %q", buf.String(), want)
		}
	}
}
