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
